"""matmul_triton's configuration chosen by shape, on the CPU: the rules of spec.RULES at the
shapes of its grid (conf/shape: decode_m*, odd_*, sq2k_*), the base a job builds at each
(static mode's guess: spec.DEFAULT_CANDIDATE, ablate/job/candidates.py), the pathologies that keep their meaning or
are declared not applicable there, every candidate compiled for sm_90 with every instance,
and the candidates tool's choice of shapes. The rules are a reasoned first choice until the
H100's figures (every candidate timed with cuBLAS over the grid) set them: a change of RULES changes
the expectations below with it."""
import dataclasses
from pathlib import Path
from types import SimpleNamespace

import pytest
from omegaconf import OmegaConf

from ablate.job import plugins
from ablate.job.job import make_job, shape_base
from conftest import kept_build_dir, tool

ROOT = Path(__file__).resolve().parents[1]
MATMUL = plugins.load("matmul_triton")
SPEC = MATMUL.spec


def shape(name):
    return SPEC.validate_shape(OmegaConf.to_container(OmegaConf.load(MATMUL.conf / "shape" / f"{name}.yaml")))


def compose(name, pathology="none", *more):
    return plugins.compose("matmul_triton", [f"pathology={pathology}", f"shape={name}", "mode=static",
                                             "build.arch=sm_90", f"build.dir={kept_build_dir('triton')}", *more])


def test_the_grid_has_its_families_each_shape_its_instance_and_a_candidate():
    names = MATMUL.options("shape")
    decode = [n for n in names if n.startswith("decode_m")]
    odd = [n for n in names if n.startswith("odd_")]
    assert len(decode) >= 8 and len(odd) >= 4 and {"sq2k_fp16", "sq2k_bf16"} <= set(names)
    ms = {shape(n)["m"] for n in decode}
    assert min(ms) == 1 and max(ms) == 256
    for family in (decode, odd, ["sq2k_fp16", "sq2k_bf16"]):
        assert {shape(n)["dtype"] for n in family} == {"fp16", "bf16"}
    for n in odd:  # off every tile: m, n not multiples of 16, k not a multiple of 64
        s = shape(n)
        assert s["m"] % 16 and s["n"] % 16 and s["k"] % 64, n
    for n in names:
        s = shape(n)
        assert SPEC.instance_of(s) is not None, n
        assert SPEC.choose(s) in SPEC.CANDIDATES, n


def test_the_large_shapes_keep_the_measured_base():
    """sq4k, sq8k and prefill were measured at 0.98-1.01x of cuBLAS with META (issue 37): the
    choice leaves them on it, so their ablations stay comparable."""
    for n in ("sq4k_fp16", "sq4k_bf16", "sq8k_fp16", "sq8k_bf16", "prefill_fp16", "prefill_bf16"):
        assert SPEC.choose(shape(n)) == "wide" and SPEC.base_meta_of(SPEC.choose(shape(n))) == SPEC.META, n
    assert SPEC.CANDIDATES["wide"] == {}


def test_each_rule_picks_its_configuration():
    """One shape per rule of spec.RULES; undoing a rule (or an m bound) changes its pick."""
    pick = {n: SPEC.base_meta_of(SPEC.choose(shape(n))) for n in MATMUL.options("shape")}
    # m <= 16: 16 x 128 where that is 0.8 of a wave (n 14336: 112 tiles), else 16 x 64 (n 4096)
    for n in ("decode_m1_bf16", "decode_m1_fp16", "decode_m16_bf16"):
        assert (pick[n]["BLOCK_M"], pick[n]["BLOCK_N"]) == (16, 128), n
    assert (pick["decode_m16_down_bf16"]["BLOCK_M"], pick["decode_m16_down_bf16"]["BLOCK_N"]) == (16, 64)
    # 16 < m <= 64: 64 x 128 where 0.8 of a wave (112 tiles), else 64 x 64
    assert (pick["decode_m64_bf16"]["BLOCK_M"], pick["decode_m64_bf16"]["BLOCK_N"]) == (64, 128)
    assert SPEC.choose({"m": 64, "n": 4096, "k": 4096, "dtype": "bf16"}) == "m64_n64"
    # 64 < m <= 128: 128 x 128 on one warpgroup where 0.8 of a wave, else 64 x 64
    assert SPEC.choose(shape("decode_m128_bf16")) == "square_w4"  # 112 tiles
    assert SPEC.choose(shape("decode_m128_down_bf16")) == "m64_n64"  # square_w4 32 tiles
    assert SPEC.choose({"m": 129, "n": 4096, "k": 4096, "dtype": "bf16"}) == "wide"  # above 128: META
    # m > 128: wide at every point measured
    assert SPEC.choose(shape("decode_m256_bf16")) == "wide"
    assert SPEC.choose(shape("sq2k_bf16")) == "wide"
    for n in ("odd_k1000_bf16", "odd_4104_fp16", "odd_wide_bf16"):
        assert SPEC.choose(shape(n)) == "wide", n
    # the dtype does not enter
    assert all(SPEC.choose(shape(n)) == SPEC.choose(shape(n.replace("_fp16", "_bf16")))
               for n in MATMUL.options("shape") if n.endswith("_fp16"))


def test_every_candidate_fits_the_h100s_shared_memory():
    """(BLOCK_M + BLOCK_N + STRIP_N) x BLOCK_K x 2 bytes a stage, plus the C tile, within 227 KiB
    (the static build's over_limits would make a base that does not fit fail every job)."""
    for name, c in SPEC.CANDIDATES.items():
        m = {**SPEC.META, **c}
        stage = (m["BLOCK_M"] + m["BLOCK_N"] + m.get("STRIP_N", 0)) * m["BLOCK_K"] * 2
        smem = stage * m["num_stages"] + m["BLOCK_M"] * m["BLOCK_N"] * 2
        assert smem <= 232448, (name, smem)


def test_a_job_builds_the_base_of_its_shape_and_the_pathologies_over_it():
    job = make_job(compose("decode_m64_bf16", "narrow_tiles"), "decode_m64_bf16")
    assert job.base.base_meta == SPEC.base_meta_of(SPEC.choose(shape("decode_m64_bf16")))
    assert job.variant.base_meta == job.base.base_meta and job.base.base_meta["BLOCK_M"] == 64
    from ablate.build.triton_aot import effective_meta

    # narrow_tiles halves the width of the base there is: 128 -> 64 here, 256 -> 128 at sq4k
    assert effective_meta(SPEC, job.variant)["BLOCK_N"] == job.base.base_meta["BLOCK_N"] // 2 == 64
    big = make_job(compose("sq4k_fp16", "narrow_tiles"), "sq4k_fp16")
    assert big.base.base_meta == SPEC.META and effective_meta(SPEC, big.variant)["BLOCK_N"] == 128
    # a spec without base_meta: the base is META at every shape, as before
    assert shape_base(SimpleNamespace(language="triton", spec=SimpleNamespace(META={"A": 1})), {}) == {}


def test_a_spec_base_meta_that_names_no_meta_key_is_one_line_naming_it():
    plugin = SimpleNamespace(name="k", language="triton",
                             spec=SimpleNamespace(META={"BLOCK": 64}, base_meta=lambda s: {"BLOK": 32}))
    with pytest.raises(ValueError, match=r"spec.base_meta\(shape\) gives \['BLOK'\], which are not in its META"):
        shape_base(plugin, {})
    plugin.spec.base_meta = lambda s: None
    with pytest.raises(ValueError, match=r"spec.base_meta\(shape\) must return"):
        shape_base(plugin, {})


def test_pathologies_without_meaning_at_a_configuration_are_declared_not_applicable():
    na = SPEC.not_applicable
    # one row of tiles: grouping is no order at all
    assert "one row of output tiles" in na("no_grouping", shape("decode_m16_bf16"))
    assert na("no_grouping", shape("sq2k_bf16")) is None and na("no_grouping", shape("decode_m256_bf16")) is None
    # small_tiles (64 x 64) would not shrink a 16- or 64-row skinny tile
    assert "no larger than twice 64 x 64" in na("small_tiles", shape("decode_m1_bf16"))
    assert "no larger than twice 64 x 64" in na("small_tiles", shape("decode_m64_bf16"))
    assert na("small_tiles", shape("sq2k_bf16")) is None and na("small_tiles", shape("sq4k_bf16")) is None
    # not_persistent where the base is persistent (every candidate but wide_tiles)
    assert na("not_persistent", shape("decode_m1_bf16")) is None
    # the pointer candidates (m64_ptr, square_ptr) load and store without TMA already, when timed fastest
    assert "by pointers already (m64_ptr" in na("no_tma", shape("sq2k_bf16"), "m64_ptr")
    assert "by pointers already (square_ptr" in na("no_tma_store", shape("sq2k_bf16"), "square_ptr")
    assert na("no_tma", shape("sq2k_bf16"), "splitk4") is None  # split-K's loads are TMA's
    assert "splits K (splitk4)" in na("no_tma_store", shape("sq2k_bf16"), "splitk4")
    # META's neighbours stand beside META's value only
    assert "META's BLOCK_M = 128" in na("tune_block_m_64", shape("decode_m1_bf16"))
    assert na("tune_block_m_64", shape("sq4k_fp16")) is None and na("tune_num_stages_4", shape("sq4k_fp16")) is None
    assert na("tune_group_m_4", shape("decode_m1_bf16")) is None  # GROUP_M is META's there too
    job = make_job(compose("decode_m16_bf16", "no_grouping"), "decode_m16_bf16")
    assert "one row of output tiles" in job.opted_out["no_grouping"]


def test_the_candidates_tool_takes_matmul_tritons_shapes_and_candidates():
    """tools/gemm_candidates.py times any kernel's candidates: matmul_triton's by glob over its grid."""
    candidates_tool = tool("gemm_candidates")
    names = candidates_tool.shape_names(MATMUL, "decode_m1*,sq2k_*,decode_m1_bf16")
    assert names == ["decode_m128_bf16", "decode_m128_down_bf16", "decode_m16_bf16", "decode_m16_down_bf16",
                     "decode_m1_bf16", "decode_m1_fp16", "sq2k_bf16", "sq2k_fp16"]
    with pytest.raises(SystemExit, match="'nope_\\*' matches no shape of matmul_triton"):
        candidates_tool.shape_names(MATMUL, "nope_*")
    # spec.candidates: every one at sq2k but the split-K ones (1024 tiles of 64 x 64: no few tiles to split)
    # and the tail-split ones (256 tiles of 128 x 128, 124 past one wave; 128 of 128 x 256: none split)
    assert candidates_tool.chosen_candidates(SPEC, None, shape("sq2k_bf16")) == [
        n for n, c in SPEC.CANDIDATES.items() if "SPLIT_K" not in c and "TAIL_SPLIT" not in c]
    assert candidates_tool.chosen_candidates(SPEC, "all", shape("sq2k_bf16")) == list(SPEC.CANDIDATES)
    with pytest.raises(SystemExit, match=r"--candidates: \['huge'\] are not in spec.CANDIDATES"):
        candidates_tool.chosen_candidates(SPEC, "huge", shape("sq2k_bf16"))


def test_every_candidate_compiles_for_sm_90_with_every_instance():
    """Static mode compiles each configuration the choice can name, each instance of
    spec.INSTANCES (aligned, m = 1, off the grid; FP16 and BF16) with TMA loads and stores where
    it takes them (USE_TMA, TMA_STORE: the pointer candidates' loads are cp.async, LDGSTS);
    the 16-row tiles without wgmma (a warpgroup's is 64 rows), the others with it."""
    pytest.importorskip("triton")
    from ablate.build import sass
    from ablate.build.compile import build
    from ablate.job.variant import Variant

    variants = [Variant(name=n, pathologies=(), base_meta={**SPEC.META, **c}) for n, c in SPEC.CANDIDATES.items()]
    cfg = OmegaConf.create({"dir": str(kept_build_dir("triton")), "arch": "sm_90", "jobs": 0})
    results = build(variants, cfg, MATMUL, ROOT)
    for name, r in results.items():
        assert r.ok, (name, r.log[-2000:])
        assert set(r.ptxas["kernels"]) == set(SPEC.INSTANCES), name
        totals = sass.read(r.lib)["totals"]
        meta = {**SPEC.META, **SPEC.CANDIDATES[name]}
        assert (totals["utmaldg"] > 0) == meta["USE_TMA"] and (totals["utmastg"] > 0) == meta["TMA_STORE"], name
        assert meta["USE_TMA"] or totals["ldgsts"] > 0, name
        assert (totals["hgmma"] == 0) == (SPEC.CANDIDATES[name].get("BLOCK_M") == 16), (name, totals["hgmma"])


def test_the_tma_candidates_make_no_descriptor_on_the_device_and_device_descriptors_makes_three():
    """HOST_TMA (META's) takes A's, B's and C's descriptors as parameters (spec.descriptors): the
    machine code of a TMA candidate has none of the device's making (the descriptor cache's
    invalidation, UTMACCTL, and the exchange that publishes a descriptor), and the pathology
    device_descriptors puts them back, one of each per descriptor and instance."""
    pytest.importorskip("triton")
    from ablate.build import sass
    from ablate.build.compile import build
    from ablate.job.variant import Variant, variant_from_cfg

    names = ["m64_tiles", "square_w4", "wide"]
    device = variant_from_cfg(OmegaConf.load(MATMUL.conf / "pathology" / "device_descriptors.yaml"), MATMUL.dir)
    variants = [Variant(name=n, pathologies=(), base_meta=SPEC.base_meta_of(n)) for n in names]
    variants += [dataclasses.replace(device, name=f"{n}_device", base_meta=SPEC.base_meta_of(n)) for n in names]
    cfg = OmegaConf.create({"dir": str(kept_build_dir("triton")), "arch": "sm_90", "jobs": 0})
    results = build(variants, cfg, MATMUL, ROOT)

    def made_on_device(name):
        assert results[name].ok, results[name].log[-2000:]
        report = sass.read(results[name].lib)
        return report["totals"]["utmacctl"], report["text"].count("ATOMG.E.EXCH")

    for name in names:
        assert made_on_device(name) == (0, 0), name
        invalidations, exchanges = made_on_device(f"{name}_device")
        assert invalidations >= 3 * len(SPEC.INSTANCES) and exchanges >= 3 * len(SPEC.INSTANCES), (name, invalidations)


def test_the_benchmark_times_each_shape_on_the_base_of_that_shape():
    """`python -m ablate benchmark --shapes a,b` builds the base each shape chooses (it built
    the default shape's base for every shape before); a kernel with one base keeps one job."""
    from ablate.tools.benchmark import shape_base_job

    default = make_job(plugins.compose("matmul_triton", ["pathology=none", "mode=static"]), "sq4k_fp16")
    here = shape_base_job(MATMUL, [], ["mode=static", "build.arch=sm_90"], "decode_m1_bf16", default)
    assert here.shape == shape("decode_m1_bf16") and here.base.base_meta == SPEC.base_meta_of(SPEC.choose(shape("decode_m1_bf16")))
    assert default.base.base_meta == SPEC.META
    rmsnorm = plugins.load("rmsnorm")
    assert shape_base_job(rmsnorm, [], [], "whatever", "the default job") == "the default job"


@pytest.mark.parametrize("shape_name", ["decode_m1_bf16", "decode_m64_bf16"])
def test_every_pathology_keeps_its_fingerprint_on_a_skinny_base_or_is_declared_not_applicable(shape_name):
    """Static jobs over the 16-row (m16) and 64-row (m64_n64) bases the skinny shapes choose:
    each hand-written and generic pathology builds and its fingerprint holds there, but those
    spec.not_applicable declares (with why) and no_fp_fusion (equal machine code, as at every
    shape)."""
    pytest.importorskip("triton")
    from ablate.pipeline import run_job

    names = [p for p in MATMUL.options("pathology") if not p.startswith("tune_") and p != "none"]
    outcomes = {p: run_job(make_job(compose(shape_name, p), shape_name)) for p in names}
    declared = {p for p, r in outcomes.items() if r.status == "not_applicable" and "declares it not applicable" in r.error}
    assert declared == {"no_grouping", "small_tiles"}, {p: outcomes[p].error for p in declared}
    for name, r in outcomes.items():
        if name in declared or name == "no_fp_fusion":
            assert r.status == "not_applicable", (name, r.status, r.error)
            continue
        assert r.status == "static" and r.metrics["fingerprint_ok"] == 1, (name, r.status, r.error)
        assert r.params["base_meta_from"] == "candidate" and r.params["base_candidate"] == SPEC.choose(shape(shape_name))
        assert r.params["base_candidate_from"] == "spec.DEFAULT_CANDIDATE"
        assert '"BLOCK_M": %d' % SPEC.base_meta_of(SPEC.choose(shape(shape_name)))["BLOCK_M"] in r.params["base_meta"]


def test_the_random_gemm_check_draws_the_shapes_it_states():
    """tools/gemm_random_check.py: the draw stated before it ran (seed 62; m, n, k log-uniform in
    [128, 8192], multiples of 16; half FP16, half BF16), the same on every machine."""
    check = tool("gemm_random_check")
    shapes = check.draw(62, 24)
    assert shapes == check.draw(62, 24) and shapes != check.draw(63, 24)
    assert len(shapes) == 24 and sorted(s["dtype"] for s in shapes) == ["bf16"] * 12 + ["fp16"] * 12
    assert all(s[d] % 16 == 0 and 128 <= s[d] <= 8192 for s in shapes for d in "mnk")
    with pytest.raises(SystemExit, match=r"--kernels: \['cublas'\] not among cutlass_gemm, matmul_triton"):
        check.main(["/dev/null", "--kernels", "cublas"])


def test_pathologies_over_a_pointer_base_keep_their_fingerprints_or_are_declared_not_applicable():
    """Static jobs at 320 x 464 x 208 moved onto m64_ptr (pointer loads and store, a program per
    tile, 64 x 64): those that would switch off what it lacks, device_descriptors among them, are
    declared not applicable; no_grouping and the rest keep their fingerprints."""
    from test_matmul_triton_splitk import pathologies_over

    pathologies_over("m64_ptr", "decode_m64_bf16", 320, 464, 208,
                     {"no_tma", "no_tma_store", "not_persistent", "small_tiles", "device_descriptors"},
                     '"USE_TMA": false')
