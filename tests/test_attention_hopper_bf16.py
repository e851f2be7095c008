"""BF16 in the Hopper attention base (issue 37), without a GPU: its shapes (each of attention's,
FP16 and BF16, a link), the spec's binding of the ABI's dtype, the sanitizer's shapes, and the
built library: BF16 instances beside the FP16 ones, each the FP16 instance with only the
element type's instructions changed, in the base and in every variant, so each pathology
applies in BF16 and its fingerprint holds in the BF16 instances alone."""
import ctypes
import re

import pytest
from omegaconf import OmegaConf

from ablate.build import static
from ablate.job import fingerprint, plugins
from ablate.job.job import make_job

ATTENTION = plugins.load("attention")
HOPPER = plugins.load("attention_hopper")
SPEC = HOPPER.spec
OWN = sorted(p.stem for p in (HOPPER.conf / "pathology").glob("*.yaml"))  # the hand-written ones
CONFIGS = [("d64", "fp16", 64), ("d128", "fp16", 128), ("d64_bf16", "bf16", 64), ("d128_bf16", "bf16", 128)]


def load(name):
    return OmegaConf.to_container(OmegaConf.load(HOPPER.conf / "shape" / f"{name}.yaml"))


def test_the_hopper_base_has_each_shape_of_attention_fp16_and_bf16():
    """Its conf/shape links each of attention's shapes (the two kernels' shapes cannot drift
    apart), so shape=glob(*bf16*) picks the 20 BF16 ones here as there."""
    theirs = sorted(p.stem for p in (ATTENTION.conf / "shape").glob("*.yaml"))
    names = sorted(p.stem for p in (HOPPER.conf / "shape").glob("*.yaml"))
    assert names == theirs and len(names) == 40
    for n in names:
        link = HOPPER.conf / "shape" / f"{n}.yaml"
        assert link.is_symlink() and link.resolve() == (ATTENTION.conf / "shape" / f"{n}.yaml").resolve()
    bf16 = sorted(p.stem for p in (HOPPER.conf / "shape").glob("*bf16*.yaml"))
    assert len(bf16) == 20 and all(SPEC.validate_shape(load(n))["dtype"] == "bf16" for n in bf16)
    assert all(SPEC.validate_shape(load(n))["dtype"] == "fp16" for n in names if n not in bf16)


def test_the_abi_gets_the_dtype_and_the_gate_its_tolerance():
    fp16, bf16 = SPEC.validate_shape(load("s512")), SPEC.validate_shape(load("s512_d128_causal_bf16"))
    pointers = {"q": 16, "k": 32, "v": 48, "o": 64}
    assert SPEC.SYMBOL == "ablate_attention_fwd_dtype" and SPEC.ARCH == "sm_90a"
    assert SPEC.arguments(pointers, fp16, 0)[-2:] == (0, 0) and SPEC.arguments(pointers, bf16, 0)[-2:] == (1, 0)
    assert SPEC.tolerance(fp16) == 2e-3 and SPEC.tolerance(bf16) == 1e-2
    with pytest.raises(ValueError, match=r"dtype must be one of \['fp16', 'bf16'\], got 'fp32'"):
        SPEC.validate_shape({**load("s512"), "dtype": "fp32"})


def test_the_sanitizer_runs_every_instance_of_both_dtypes():
    """D x causal x dtype: the eight kernels the library holds; the stream-K hand-over (150
    query tiles of D = 128, non-causal) in both dtypes."""
    shapes = [SPEC.validate_shape(dict(s)) for s in SPEC.SANITIZE_SHAPES]
    assert {(s["head_dim"], s["causal"], s["dtype"]) for s in shapes} == \
        {(d, c, t) for d in (64, 128) for c in (False, True) for t in ("fp16", "bf16")}
    assert {s["dtype"] for s in shapes if s["heads"] * -(-s["seq"] // 128) > 132 and s["head_dim"] == 128
            and not s["causal"]} == {"fp16", "bf16"}


@pytest.mark.parametrize("pathology", sorted(HOPPER.options("pathology")))
def test_every_pathology_applies_at_bf16_shapes_as_at_fp16_ones(pathology):
    """Nothing is declared not applicable in BF16 that is not in FP16 (the kernel's yaml
    declares regs_capped and no_launch_bounds for both); the built library's BF16 instances
    show each pathology changes them (test_each_variants_bf16_instances_are_its_fp16_ones_in_bf16)."""
    def job(shape):
        return make_job(plugins.compose("attention_hopper", [f"pathology={pathology}", f"shape={shape}"]))

    bf16, fp16 = job("s2k_d128_bf16"), job("s2k_d128")
    assert bf16.shape["dtype"] == "bf16" and fp16.shape["dtype"] == "fp16"
    assert bf16.opted_out == fp16.opted_out
    assert not bf16.opted_out or pathology in ("regs_capped", "no_launch_bounds")
    assert SPEC.not_applicable(pathology, bf16.shape) is None


# ---- the built library (every variant, built once per session: tests/conftest.py) -------------

@pytest.fixture(scope="module")
def hopper(built_kernels):
    return built_kernels["attention_hopper"]


def functions(built, name):
    """{mangled kernel name: its instructions} of a built variant (the SASS text sass.read keeps)."""
    out = {}
    for block in built.sass(name)["text"].split("Function : ")[1:]:
        head, *code = block.splitlines()
        out[head.strip()] = [line.strip() for line in code]
    return out


# The element type's instructions: the tensor cores' (wgmma, and mma.sync where mma_sync puts
# it) and the FP32 -> 16-bit packing of P and O. Nothing else of a BF16 instance may differ.
_INSTRUCTION = re.compile(r"^(@!?U?P\w+\s+)?(\S+)\s*(.*)$")


def element_change(fp16, bf16):
    """Whether one BF16 instruction is its FP16 twin with the element type changed: the same
    predicate and operands; an MMA's mnemonic with .BF16 added, a pack's F16 become BF16."""
    (p16, m16, ops16), (p, m, ops) = _INSTRUCTION.match(fp16).groups(), _INSTRUCTION.match(bf16).groups()
    if (p16, ops16) != (p, ops):
        return False
    if m16.startswith(("HGMMA.", "HMMA.")):
        return m == m16 + ".BF16"
    return m16.startswith("F2FP.F16.") and m == m16.replace("F2FP.F16.", "F2FP.BF16.", 1)


def test_element_change_reads_the_types():
    assert element_change("HGMMA.64x128x16.F32 R24, gdesc[UR4], R24", "HGMMA.64x128x16.F32.BF16 R24, gdesc[UR4], R24")
    assert element_change("F2FP.F16.F32.PACK_AB R3, R5, R4", "F2FP.BF16.F32.PACK_AB R3, R5, R4")
    assert element_change("@P0 HMMA.16816.F32 R8, R4, R2, R8", "@P0 HMMA.16816.F32.BF16 R8, R4, R2, R8")
    assert not element_change("HMMA.16816.F32 R8, R4, R2, R8", "HMMA.16816.F32.BF16 R8, R4, R6, R8")
    assert not element_change("@P0 HMMA.16816.F32 R8, R4, R2, R8", "@P1 HMMA.16816.F32.BF16 R8, R4, R2, R8")
    assert not element_change("FFMA R3, R5, R4, R3", "FFMA R3, R5, R4, R2")
    assert not element_change("HGMMA.64x128x16.F32 R24, gdesc[UR4], R24", "HGMMA.64x64x16.F32.BF16 R24, gdesc[UR4], R24")


def test_the_library_holds_bf16_instances_beside_the_fp16_ones(hopper):
    from ablate.build import sass
    from ablate.build.library import variant_info

    info = variant_info(hopper.results["none"].lib, SPEC)
    assert [(c["name"], c["dtype"], c["head_dim"]) for c in info["configs"]] == CONFIGS
    kernels = sass.read(hopper.results["none"].lib)["kernels"]
    assert sorted(static.config_of(SPEC, k, info["configs"]) for k in kernels) == \
        sorted(c[0] for c in CONFIGS for _ in range(2))  # causal and not
    for name in kernels:  # each instance is the one a shape of its D, causal flag and dtype runs
        shapes = [{"head_dim": d, "causal": c, "dtype": t} for d in (64, 128) for c in (False, True)
                  for t in ("fp16", "bf16")]
        assert sum(SPEC.launched(name, s, info["configs"]) for s in shapes) == 1, name
    lib = ctypes.CDLL(str(hopper.results["none"].lib))
    assert lib.ablate_attention_fwd and lib.ablate_attention_fwd_dtype  # both forms of the ABI


def assert_bf16_twins(hopper, name):
    # the attention kernel's instances (a calibration may add a function of its own)
    code = {k: v for k, v in functions(hopper, name).items() if "hopper_attention_kernel" in k}
    bf16 = {k: v for k, v in code.items() if "4Bf16E" in k}
    assert len(bf16) == 4 and len(code) == 8, (name, sorted(code))
    for k, instructions in bf16.items():
        twin = code[k.replace("4Bf16E", "4Fp16E")]
        assert len(instructions) == len(twin), (name, k)
        changed = [(a, b) for a, b in zip(twin, instructions) if a != b]
        wrong = [(a, b) for a, b in changed if not element_change(a, b)]
        assert not wrong, f"{name} {k}: {wrong[:3]}"
        assert any(b.startswith(("HGMMA", "HMMA")) for _, b in changed), (name, k)  # BF16's MMAs
        assert not any(i.startswith("F2FP.F16.") for i in instructions), (name, k)  # P and O in BF16
        assert not any(i.startswith(("HGMMA", "HMMA")) and ".BF16" in i for i in twin), (name, k)


@pytest.mark.parametrize("name", ["none", *OWN])
def test_each_variants_bf16_instances_are_its_fp16_ones_in_bf16(hopper, name):
    """Instruction for instruction, but for the MMAs' type and the packing of P and O: so each
    pathology does to the BF16 instances what it does to the FP16 ones, and each applies at
    BF16 shapes. (The FP16 code of the base and of every pathology is that of the commit
    before BF16 came, checked by hand: docs/design.md.)"""
    if name in hopper.errors:
        pytest.fail(str(hopper.errors[name]))
    assert_bf16_twins(hopper, name)


def test_the_generic_variants_change_the_bf16_instances_too(hopper):
    """The generic pathologies and the calibrations built for this kernel (no seam of its own):
    where one changes the FP16 instances it changes the BF16 instances too, and their MMAs stay
    BF16's. (Not instruction for instruction: no_forceinline leaves calls that ptxas schedules
    a few instructions apart in the two dtypes.)"""
    def kernel_code(name, dtype):
        return {k: v for k, v in functions(hopper, name).items()
                if "hopper_attention_kernel" in k and dtype in k}

    others = sorted(set(hopper.results) - {"none", *OWN})
    assert others
    base = kernel_code("none", "4Bf16E")
    for name in others:
        if hopper.results[name].status != "built":
            continue
        bf16 = kernel_code(name, "4Bf16E")
        assert len(bf16) == 4, name
        if kernel_code(name, "4Fp16E") != kernel_code("none", "4Fp16E"):  # (a calibration may add a kernel)
            assert bf16 != base, name
        # the kernel's GEMMs (FP32 accumulators); not ptxas's own HGMMA.64x8x16.F16, one per
        # kernel where it serializes wgmma across calls (no_forceinline: in 753beb2's FP16 build too)
        mmas = {i.split()[0] for code in bf16.values() for i in code
                if i.startswith(("HGMMA", "HMMA")) and ".F32" in i.split()[0]}
        assert mmas and all(m.endswith(".BF16") for m in mmas), (name, mmas)


def per_dtype(metrics, dtype):
    """static_metrics as if the library held one dtype's instances: each whole-library metric
    from that dtype's configs (SASS counts summed; sizes the largest, occupancy the least)."""
    names = [c for c, t, _ in CONFIGS if t == dtype]
    out = {}
    for metric in fingerprint.METRICS:
        values = [metrics[f"{c}.{metric}"] for c in names]
        if metric.startswith("sass.") or metric == "spill_bytes":
            out[metric] = sum(values)
        elif metric.startswith("occupancy"):
            out[metric] = min(values)
        else:
            out[metric] = max(values)
    return out


@pytest.mark.parametrize("dtype", ["fp16", "bf16"])
@pytest.mark.parametrize("name", OWN)
def test_the_fingerprint_holds_in_each_dtypes_instances_alone(hopper, name, dtype):
    if name in hopper.errors:
        pytest.fail(str(hopper.errors[name]))
    spec = hopper.plugin.spec

    def measured(n):
        m = static.static_metrics(hopper.results[n], spec, None, hopper.sass(n))
        code = functions(hopper, n)
        text = "".join(k + "".join(code[k]) for k in sorted(code) if re.search(
            r"4Bf16E" if dtype == "bf16" else r"4Fp16E", k))
        return per_dtype(m, dtype), text

    (metrics, text), (base, base_text) = measured(name), measured("none")
    assert text != base_text
    assert fingerprint.check(hopper.variants[name], metrics, base, text, base_text) == []
