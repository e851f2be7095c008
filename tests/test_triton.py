"""Triton kernels as plugins, on the CPU: matmul_triton's every variant built ahead of time for
sm_90 (Triton compiles for a named target, no GPU) and read statically, each fingerprint
held; the instance a shape's arguments take; the refusals. Skipped, with the reason, where
triton cannot be imported (CI installs it: pyproject.toml)."""
import json
from pathlib import Path
from types import SimpleNamespace

import pytest

pytest.importorskip("triton", reason="triton is not installed (pip install -e '.[dev]' installs it on Linux x86_64)")
pytest.importorskip("torch")

from ablate.build import sass, triton_aot  # noqa: E402
from ablate.build.compile import build  # noqa: E402
from ablate.build.triton_launch import TritonKernel  # noqa: E402
from ablate.job import plugins  # noqa: E402
from ablate.job.job import check_language, make_job  # noqa: E402
from ablate.job.variant import VariantError, variant_from_cfg  # noqa: E402
from ablate.pipeline import run_job  # noqa: E402
from conftest import kept_build_dir, lock_state  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
MATMUL = plugins.load("matmul_triton")
# Its hand-written and generic pathologies; its tunables' generated neighbours (tune_*) are
# tests/test_tunables.py's.
PATHOLOGIES = [p for p in MATMUL.options("pathology") if not p.startswith("tune_")]
# What this kernel's static analysis finds of the generic Triton pathologies: no_fp_fusion
# changes nothing (its math is wgmma; the epilogue has no a * b + c), so it is not applicable.
NOT_APPLICABLE = {"no_fp_fusion"}


def compose(pathology, build_dir, *more):
    return plugins.compose("matmul_triton", [f"pathology={pathology}", "mode=static", f"build.dir={build_dir}",
                                             "build.arch=sm_90", *more])


@pytest.fixture(scope="module")
def built():
    """Every variant of matmul_triton, and one pair, built once (in parallel) and kept between
    sessions (conftest.kept_build_dir: each variant is named by the hash of everything that
    goes into it, Triton's version and ablate's Triton build among them), so that a later run
    compiles only what changed; the two test processes share it through its folder's lock. A
    fresh folder cost each process that ran a test of this module ~63 s of compiles, every
    run (docs/benchmarks.md, "Sweep speed")."""
    build_dir = kept_build_dir("triton")
    cfgs = {p: compose(p, build_dir) for p in PATHOLOGIES}
    cfgs["no_grouping+no_tma"] = compose("[no_grouping,no_tma]", build_dir)
    jobs = {name: make_job(cfg) for name, cfg in cfgs.items()}
    variants = {v.name: v for job in jobs.values() for v in [*job.variants, *job.rests.values()]}
    results = build(list(variants.values()), cfgs["none"].build, MATMUL, ROOT)
    return build_dir, jobs, results


def test_the_plugin_is_a_triton_one_with_its_languages_generic_pathologies():
    assert MATMUL.language == "triton" and MATMUL.spec.SYMBOL == "matmul_kernel"
    assert MATMUL.source == MATMUL.dir / "base" / "matmul.py"
    generic = {p.stem for p in (ROOT / "conf" / "generic_triton" / "pathology").glob("*.yaml")}
    assert generic == {"half_sms", "half_warps", "no_fp_fusion", "no_pipelining"}
    assert generic <= set(PATHOLOGIES)
    assert not {"no_restrict", "regs_capped", "strict_fp"} & set(PATHOLOGIES)  # nvcc's are not a Triton kernel's
    assert len(set(PATHOLOGIES) - generic - {"none"}) >= 5


def test_every_variant_builds_for_sm_90_without_a_gpu(built):
    _, _, results = built
    for name, r in results.items():
        assert r.ok, f"{name}: {r.log}"
        assert r.lib.name == f"{r.digest}.triton.json" and r.arch == "sm_90"
        # ptxas's own report, per instance: registers and spills read as nvcc's are
        assert set(r.ptxas["kernels"]) == set(MATMUL.spec.INSTANCES), r.log  # fp16, bf16, *_m1, *_odd
        assert r.ptxas["max_registers"] > 0
        manifest = json.loads(r.lib.read_text())
        assert manifest["capability"] == 90
        for inst in manifest["instances"].values():
            assert all((r.lib.parent / f).is_file() for f in inst["files"].values())


def test_every_fingerprint_holds_and_only_the_expected_generic_one_does_not_apply(built):
    _, jobs, _ = built
    outcomes = {name: run_job(job) for name, job in jobs.items()}
    not_applicable = {n for n, r in outcomes.items() if r.status == "not_applicable"}
    assert not_applicable == NOT_APPLICABLE, {n: outcomes[n].error for n in not_applicable}
    for name, r in outcomes.items():
        if name in NOT_APPLICABLE:
            assert "machine code equals the base's" in r.error
            continue
        assert r.status == "static", (name, r.status, r.error)
        assert r.error is None and r.metrics["fingerprint_ok"] == 1, (name, r.error)
        assert r.metrics["fp16.threads_per_block"] == 32 * (4 if name == "half_warps" else 8)


def test_the_static_metrics_read_the_binary(built):
    _, jobs, results = built
    base, no_tma, store = (sass.read(results[n].lib)["totals"] for n in ("none", "no_tma", "no_tma_store"))
    assert base["hgmma"] > 0 and base["utmaldg"] > 0 and base["utmastg"] > 0 and base["ldgsts"] == 0
    assert no_tma["utmaldg"] == 0 and no_tma["ldgsts"] > 0
    assert store["utmastg"] == 0 and store["stg_128"] > 0
    # a pathology never builds the base's machine code again (generic ones aside: not applicable)
    texts = {n: sass.read(r.lib)["text"] for n, r in results.items()}
    for name in set(PATHOLOGIES) - {"none", "half_sms"} - NOT_APPLICABLE:
        assert texts[name] != texts["none"], name


def test_a_second_build_is_cached(built):
    build_dir, jobs, results = built
    again = build(jobs["no_tma"].variants, jobs["no_tma"].build, MATMUL, ROOT)
    assert all(r.cached for r in again.values())
    assert again["no_tma"].lib == results["no_tma"].lib


def test_a_build_reads_its_results_while_it_holds_the_folders_lock(built, monkeypatch):
    """As compile.build does: the tests' two processes share the kept folder, and another
    build of it would rewrite a failure's log while this one reads it."""
    build_dir, jobs, _ = built
    from ablate.build import manifests

    probes, real = [], manifests.ptxas.parse

    def parse(log, **kwargs):  # called as each built result is read
        probes.append(lock_state(build_dir))
        return real(log, **kwargs)
    monkeypatch.setattr(manifests.ptxas, "parse", parse)
    build(jobs["no_tma"].variants, jobs["no_tma"].build, MATMUL, ROOT)
    assert probes == ["held", "held"]  # the base and no_tma, each read under the lock


def test_a_shape_runs_the_instance_its_specialization_takes():
    spec = MATMUL.spec
    assert spec.instance_of({"m": 8192, "n": 14336, "k": 4096, "dtype": "bf16"}) == "bf16"
    assert spec.instance_of({"m": 4096, "n": 4096, "k": 4096, "dtype": "fp16"}) == "fp16"
    assert spec.instance_of({"m": 4095, "n": 4096, "k": 4096, "dtype": "fp16"}) is None  # M not a multiple of 16
    assert spec.instance_of({"m": 1, "n": 14336, "k": 4096, "dtype": "fp16"}) == "fp16_m1"  # 1: a constant
    assert spec.instance_of({"m": 3000, "n": 5000, "k": 1000, "dtype": "bf16"}) == "bf16_odd"
    assert spec.instance_of({"m": 3000, "n": 5000, "k": 1024, "dtype": "bf16"}) is None  # k alone a multiple of 16
    for shape_file in (MATMUL.conf / "shape").glob("*.yaml"):  # every shipped shape has its instance
        from omegaconf import OmegaConf

        shape = spec.validate_shape(OmegaConf.to_container(OmegaConf.load(shape_file)))
        kind = "_m1" if shape["m"] == 1 else "_odd" if shape["m"] % 16 else ""
        assert spec.instance_of(shape) == shape["dtype"] + kind, shape_file.name


def test_the_launcher_refuses_arguments_no_instance_was_built_for(built):
    _, _, results = built
    kernel = TritonKernel(results["none"].lib, MATMUL.spec)
    shape = {"m": 4096, "n": 4096, "k": 4096, "dtype": "bf16"}

    def args(shape):
        return kernel.launched(MATMUL.spec.args(triton_aot.fake_inputs(MATMUL.spec, shape), shape))

    assert kernel.instance(*args(shape))[0] == "bf16"
    odd = {**shape, "m": 4095}
    with pytest.raises(ValueError, match="no built instance of matmul_kernel"):
        kernel.instance(*args(odd))


def test_a_meta_parameter_the_kernel_lacks_fails_its_build_naming_it(tmp_path):
    cfg = compose("none", tmp_path / "build")
    bad = variant_from_cfg({"typo": {"meta": {"BLOCK_Q": 64}}}, MATMUL.dir)
    r = build([bad], cfg.build, MATMUL, ROOT)["typo"]
    assert not r.ok and "BLOCK_Q" in r.log and "neither a parameter of matmul_kernel" in r.log


def test_meta_is_checked_and_belongs_to_triton_kernels():
    with pytest.raises(ValueError, match="pathology 'p': meta.num_warps must be a number, a bool or .* for a Triton kernel, got 'four'"):
        check_language(MATMUL, variant_from_cfg({"p": {"meta": {"num_warps": "four"}}}, MATMUL.dir))
    with pytest.raises(VariantError, match="meta.num_warps must be a number"):
        variant_from_cfg({"p": {"meta": {"num_warps": ["four"]}}}, MATMUL.dir)
    with pytest.raises(VariantError, match="fraction_of_base must be a number in"):
        variant_from_cfg({"p": {"meta": {"num_warps": {"fraction_of_base": 2}}}}, MATMUL.dir)
    with pytest.raises(VariantError, match="meta.GROUP_M=1 conflicts with GROUP_M=4"):
        variant_from_cfg({"a": {"meta": {"GROUP_M": 4}}, "b": {"meta": {"GROUP_M": 1}}}, MATMUL.dir)
    v = variant_from_cfg({"p": {"meta": {"GROUP_M": 1, "BLOCK_N": 64}}}, MATMUL.dir)
    assert v.seams == {"p": "block_n+group_m"} and v.changes_build
    assert triton_aot.effective_meta(MATMUL.spec, variant_from_cfg(
        {"h": {"meta": {"num_warps": {"fraction_of_base": 0.5}}}}, MATMUL.dir))["num_warps"] == 4
    rmsnorm = plugins.load("rmsnorm")
    with pytest.raises(ValueError, match="pathology 'p': meta is for triton kernels, and kernel 'rmsnorm' is a cuda"):
        check_language(rmsnorm, v)
    with pytest.raises(ValueError, match="pathology 'q': macros is for cuda kernels"):
        check_language(MATMUL, variant_from_cfg({"q": {"macros": {"ABLATE_X": 1}}}, MATMUL.dir))


def test_the_gpu_side_reads_the_built_cubins_back(built):
    """What the worker does before the first launch, short of the GPU: the manifest's cubin and
    Triton's metadata become the CompiledKernel that Triton's driver loads."""
    _, _, results = built
    r = results["no_tma"]
    kernel = TritonKernel(r.lib, MATMUL.spec)
    kernel._bind()
    compiled = kernel._kernel("bf16")
    manifest = json.loads(r.lib.read_text())
    assert compiled.kernel == triton_aot.cubins(r.lib)["bf16"].read_bytes()
    assert compiled.metadata.shared == manifest["instances"]["bf16"]["shared"] > 0
    assert compiled.metadata.num_warps == 8 and kernel.meta["USE_TMA"] is False
    assert kernel.info()["configs"][1]["name"] == "bf16"


def test_host_side_descriptors_are_built_from_the_arguments_and_the_meta():
    """spec.descriptors(meta): a TensorDescriptor over the named argument, its block from the
    meta, for a tensor as for the sanitizer's raw pointer (its dims, contiguous strides); None
    where the configuration takes none; a spec without it passes its args as they are; a name
    that is no argument is one line naming both."""
    pytest.importorskip("triton")
    import torch

    from ablate.build.triton_aot import described, undescribed, with_descriptors
    from ablate.build.triton_launch import Pointer

    spec = SimpleNamespace(descriptors=lambda meta: {"a_host": ("a", (meta["BM"], 64)) if meta["HOST"] else None})
    a = torch.empty((256, 512), dtype=torch.float16, device="meta")
    out = with_descriptors(spec, {"a": a, "M": 256}, {"BM": 128, "HOST": True})
    desc = out["a_host"]
    assert out["a"] is a and out["M"] == 256
    assert (desc.base is a and desc.shape == [256, 512] and desc.strides == [512, 1] and desc.block_shape == [128, 64])
    assert with_descriptors(spec, {"a": a}, {"BM": 128, "HOST": False})["a_host"] is None
    assert with_descriptors(SimpleNamespace(), {"a": a}, {}) == {"a": a}
    raw = Pointer(1 << 20, torch.float16, (256, 512))
    on_raw = with_descriptors(spec, {"a": raw}, {"BM": 64, "HOST": True})["a_host"]
    assert on_raw.base is raw and on_raw.shape == [256, 512] and on_raw.strides == [512, 1]
    # the build's request carries it as JSON, and the compile process makes it again on the meta device
    said = described(desc)
    assert said == {"descriptor": {"tensor": [256, 512], "dtype": "float16"}, "block": [128, 64]}
    again = undescribed(said)
    assert list(again.shape) == [256, 512] and list(again.strides) == [512, 1] and again.block_shape == [128, 64]
    assert described(None) is None
    with pytest.raises(ValueError, match=r"spec.descriptors: a_host names 'a', which is not an argument \(b\)"):
        with_descriptors(spec, {"b": a}, {"BM": 128, "HOST": True})
