"""BF16 in the FA2-style attention base (issue 37), without a GPU: the shapes (a `dtype` field,
fp16 where a shape names none), the spec's binding of the ABI's dtype and its instances, the
pathology that has no meaning in BF16 (declared not applicable, with why), and the built
library: BF16 instances beside the FP16 ones, each pathology's code in both."""
import ctypes
import re

import pytest
from omegaconf import OmegaConf

from ablate.build import sass, static
from ablate.job import plugins
from ablate.job.job import make_job
from ablate.job.thin import SpecError, shape_validator

ATTENTION = plugins.load("attention")
SPEC = ATTENTION.spec
OWN = sorted(p.stem for p in (ATTENTION.conf / "pathology").glob("*.yaml"))  # the hand-written ones
FP16_SHAPES = sorted(p.stem for p in (ATTENTION.conf / "shape").glob("*.yaml") if not p.stem.endswith("_bf16"))


def load(name):
    return OmegaConf.to_container(OmegaConf.load(ATTENTION.conf / "shape" / f"{name}.yaml"))


def test_each_fp16_shape_has_its_bf16_sibling_and_a_glob_picks_them():
    bf16 = sorted(p.stem for p in (ATTENTION.conf / "shape").glob("*bf16*.yaml"))
    assert bf16 == sorted(f"{n}_bf16" for n in FP16_SHAPES) and len(bf16) == 20
    for name in FP16_SHAPES:
        assert load(f"{name}_bf16") == {**load(name), "dtype": "bf16"}, name
        assert "dtype" not in load(name)  # the FP16 shapes stay as they were written
        assert SPEC.validate_shape(load(name))["dtype"] == "fp16"
        assert SPEC.validate_shape(load(f"{name}_bf16"))["dtype"] == "bf16"


def test_a_bad_dtype_is_a_clear_error():
    good = load("s512")
    with pytest.raises(ValueError, match=r"dtype must be one of \['fp16', 'bf16'\], got 'fp32'"):
        SPEC.validate_shape({**good, "dtype": "fp32"})
    # the Hopper base has BF16 instances too (tests/test_attention_hopper_bf16.py): it takes
    # BF16 shapes, and refuses a bad dtype by the same field
    hopper = plugins.load("attention_hopper").spec
    assert hopper.validate_shape(load("s512_bf16"))["dtype"] == "bf16"
    with pytest.raises(ValueError, match=r"dtype must be one of \['fp16', 'bf16'\], got 'fp32'"):
        hopper.validate_shape({**good, "dtype": "fp32"})


def test_shape_defaults_must_name_fields_of_shape():
    assert shape_validator("k", {"n": int, "dtype": ("a", "b")}, defaults={"dtype": "a"})({"n": 3}) == \
        {"n": 3, "dtype": "a"}
    with pytest.raises(SpecError, match=r"SHAPE_DEFAULTS \['dtype'\] are no field of SHAPE \['n'\]"):
        shape_validator("k", {"n": int}, defaults={"dtype": "a"})


def test_the_abi_gets_the_dtype_and_the_gate_its_tolerance():
    fp16, bf16 = SPEC.validate_shape(load("s512")), SPEC.validate_shape(load("s512_bf16"))
    pointers = {"q": 16, "k": 32, "v": 48, "o": 64}
    assert SPEC.SYMBOL == "ablate_attention_fwd_dtype"
    assert SPEC.arguments(pointers, fp16, 0)[-2:] == (0, 0) and SPEC.arguments(pointers, bf16, 0)[-2:] == (1, 0)
    assert SPEC.tolerance(fp16) == 2e-3 and SPEC.tolerance(bf16) == 1e-2
    assert SPEC.label(bf16).endswith(" bf16") and "16" not in SPEC.label(fp16).split("D=64")[1]
    # the Hopper base calls the same form of the ABI
    hopper = plugins.load("attention_hopper").spec
    assert hopper.SYMBOL == "ablate_attention_fwd_dtype"
    assert hopper.arguments(pointers, bf16, 0) == SPEC.arguments(pointers, bf16, 0)


CONFIGS = [{"name": "d64", "dtype": "fp16", "head_dim": 64}, {"name": "d128", "dtype": "fp16", "head_dim": 128},
           {"name": "d64_bf16", "dtype": "bf16", "head_dim": 64},
           {"name": "d128_bf16", "dtype": "bf16", "head_dim": 128}]


@pytest.mark.parametrize("name, config", [
    ("void attention_fwd_kernel<BaseTile<64>, true, Fp16>(Params)", "d64"),
    ("void attention_fwd_kernel<BaseTile<128>, false, Bf16>(Params)", "d128_bf16"),
    ("void attention_fwd_kernel<TinyTile<64>, false, Bf16>(Params)", "d64_bf16"),
    ("void attention_fwd_kernel<BaseTile<64>, true>(Params)", "d64"),  # a library from before BF16
])
def test_each_instance_is_the_config_of_its_dtype(name, config):
    assert SPEC.config_of(name, CONFIGS) == config
    dim, dtype = (128, "bf16") if config == "d128_bf16" else (64, "bf16" if "bf16" in config else "fp16")
    causal = "true" in name
    shape = {"batch": 1, "heads": 1, "seq": 8, "head_dim": dim, "causal": causal, "dtype": dtype}
    assert SPEC.launched(name, shape, CONFIGS)
    other = {**shape, "dtype": "fp16" if dtype == "bf16" else "bf16"}
    assert not SPEC.launched(name, other, CONFIGS)


def job_at(pathology, shape):
    return make_job(plugins.compose("attention", [f"pathology={pathology}", f"shape={shape}"]))


def test_fp32_accum_is_declared_not_applicable_at_bf16_shapes_only():
    job = job_at("fp32_accum", "s4k_bf16")
    assert list(job.opted_out) == ["fp32_accum"]
    assert "BF16's mma.sync has no FP16 accumulator" in job.opted_out["fp32_accum"]
    assert not job_at("fp32_accum", "s4k").opted_out
    assert not job_at("fp32_accum", "s4k_d128_causal").opted_out


@pytest.mark.parametrize("pathology", sorted(n for n in ATTENTION.options("pathology") if n != "fp32_accum"))
def test_every_other_pathology_applies_at_bf16_shapes(pathology):
    """Each of them changes a stage the BF16 instances share with the FP16 ones; the built
    library's BF16 instances show it (test_every_pathology_changes_the_bf16_instances)."""
    assert not job_at(pathology, "s2k_d128_bf16").opted_out


def test_a_bf16_job_of_fp32_accum_builds_nothing(monkeypatch):
    from ablate import pipeline
    import ablate.build.compile as compile_

    monkeypatch.setattr(compile_, "build", lambda *a, **k: pytest.fail("built a not-applicable job"))
    result = pipeline.run_job(job_at("fp32_accum", "s512_bf16"))
    assert result.status == "not_applicable" and "fp32_accum" in result.error and "FP32" in result.error


def test_a_spec_reason_that_says_nothing_is_an_error(monkeypatch):
    monkeypatch.setattr(SPEC.module, "not_applicable", lambda pathology, shape: " ")
    with pytest.raises(ValueError, match=r"spec.not_applicable\('fp32_accum', shape\) must say why"):
        job_at("fp32_accum", "s512")


# ---- the built library (every variant, built once per session: tests/conftest.py) -------------

def functions(built, name):
    return sass.parse(sass.disassemble(built.results[name].lib))


def bf16_code(built, name):
    return {k: v for k, v in functions(built, name).items() if "Bf16" in k}


def test_the_library_holds_bf16_instances_beside_the_fp16_ones(built):
    from ablate.build.library import variant_info

    info = variant_info(built.results["none"].lib, SPEC)
    assert [(c["name"], c["dtype"], c["head_dim"]) for c in info["configs"]] == \
        [(c["name"], c["dtype"], c["head_dim"]) for c in CONFIGS]
    kernels = sass.read(built.results["none"].lib)["kernels"]
    assert sorted(static.config_of(SPEC, k, info["configs"]) for k in kernels) == \
        sorted(c["name"] for c in CONFIGS for _ in range(2))  # causal and not
    for name, mix in kernels.items():  # the FP16 base accumulates Q K^T in FP16, BF16 cannot
        if SPEC.dtype_of(name) == "bf16":
            assert mix["hmma_f16"] == 0 and mix["hmma_f32"] > 0, name
        else:
            assert mix["hmma_f16"] > 0 and mix["hmma_f32"] > 0, name
    for k, code in functions(built, "none").items():
        if "Bf16" in k:  # every MMA of a BF16 instance is BF16's, accumulating in FP32
            hmma = {i.split()[0] for i in code if i.startswith("HMMA")}
            assert hmma == {"HMMA.16816.F32.BF16"}, (k, hmma)
    lib = ctypes.CDLL(str(built.results["none"].lib))
    assert lib.ablate_attention_fwd and lib.ablate_attention_fwd_dtype  # both forms of the ABI


def test_fp32_accum_leaves_the_bf16_instances_as_the_base_has_them(built):
    """What the not-applicable declaration says: its BF16 code is the base's."""
    assert bf16_code(built, "fp32_accum") == bf16_code(built, "none")
    fp16 = {k: v for k, v in functions(built, "fp32_accum").items() if "Fp16" in k}
    assert fp16 != {k: v for k, v in functions(built, "none").items() if "Fp16" in k}


@pytest.mark.parametrize("pathology", [n for n in OWN if n != "fp32_accum"])
def test_every_pathology_changes_the_bf16_instances(built, pathology):
    """So at a BF16 shape each measures something (fp32_accum aside: declared not applicable)."""
    if pathology in built.errors:
        pytest.fail(str(built.errors[pathology]))
    assert bf16_code(built, pathology) != bf16_code(built, "none")
