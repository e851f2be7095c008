"""The CUTLASS GEMM plugin on the CPU: CUTLASS found in the nvidia-cutlass wheel (a clear line
without it), the shapes it refuses (naming the field), its candidate configurations (each one the
kernel defines, with the tile and cluster it defines), the ones worth timing at a shape and
static mode's guess, where a pathology does not apply, a build holding the one configuration it
names (conftest's session build), and the candidates' tool (tools/gemm_candidates.py) as far as it
goes without a GPU."""
import importlib.util
import re

import pytest

from ablate.build import static
from ablate.build.library import Kernel
from ablate.job import plugins
from conftest import module_at, tool

GEMM = plugins.load("cutlass_gemm")
SPEC = GEMM.spec


def test_cutlass_comes_from_the_installed_wheel():
    include, = SPEC.INCLUDE_DIRS()
    assert (include / "cutlass" / "gemm" / "collective" / "collective_builder.hpp").is_file()
    assert (include / "cute" / "tensor.hpp").is_file()
    assert not (GEMM.dir / "cutlass").exists() and not list(GEMM.dir.rglob("cutlass.h"))  # never a copy


def test_without_the_wheel_the_build_says_what_to_install(monkeypatch):
    from ablate.build.compile import BuildError, include_dirs

    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: None if name == "cutlass_library" else real(name, *a))
    with pytest.raises(BuildError, match=r"kernel 'cutlass_gemm': spec.INCLUDE_DIRS: the nvidia-cutlass package "
                                         r"is not installed \(pip install nvidia-cutlass\)"):
        include_dirs(GEMM)


@pytest.mark.parametrize("field", ["n", "k"])
@pytest.mark.parametrize("value", [1, 7, 1001, 4100])
def test_n_and_k_must_be_multiples_of_8_and_the_error_names_the_field(field, value):
    shape = {"m": 64, "n": 4096, "k": 4096, "dtype": "fp16", field: value}
    with pytest.raises(ValueError, match=rf"^{field}={value}: must be a multiple of 8"):
        SPEC.validate_shape(shape)


def test_odd_m_is_a_shape():
    assert SPEC.validate_shape({"m": 333, "n": 1000, "k": 1032, "dtype": "bf16"})["m"] == 333


def shipped_shapes():
    from omegaconf import OmegaConf

    return {n: OmegaConf.to_container(OmegaConf.load(GEMM.conf / "shape" / f"{n}.yaml")) for n in GEMM.options("shape")}


def source_candidates():
    """{name: (index, tile, cluster)} of base/cutlass_gemm.cu's GEMM_CANDIDATE rows."""
    text = (GEMM.dir / "base" / "cutlass_gemm.cu").read_text()
    rows = re.findall(r"^GEMM_CANDIDATE\((\d+),\s*(\w+),\s*(\w+),\s*(\w+),", text, re.M)
    return {name: (int(i), tile, cluster) for i, name, tile, cluster in rows}


CLUSTERS = {"Cluster1x1": (1, 1), "LargeCluster": (1, 1), "WideCluster": (1, 2), "TallCluster": (2, 1),
            "QuadCluster": (2, 2), "Tall4Cluster": (4, 1), "Tall4x2Cluster": (4, 2)}


def test_every_candidate_is_a_configuration_the_kernel_defines_by_its_index():
    defined = source_candidates()
    assert SPEC.INDEX == {name: i for name, (i, _, _) in defined.items()}
    assert set(SPEC.CANDIDATES) == set(SPEC.TILES) and all(SPEC.CANDIDATES[n] == SPEC.INDEX[n] for n in SPEC.TILES)
    assert GEMM.spec.CANDIDATE_SETS["large"] == {"ABLATE_GEMM_FORCE": "1"}


def test_the_wave_models_tiles_and_clusters_are_the_kernels():
    """TILES says what each candidate's grid covers of d: rows of m and columns of n, the cluster
    along each; a swapped one (d^T = b a^T) the kernel's tile and cluster transposed."""
    for name, (rows, cols, cluster_rows, cluster_cols) in SPEC.TILES.items():
        _, tile, cluster = source_candidates()[name]
        tm, tn = (128, 128) if tile == "ABLATE_SEAM_TILE" else map(int, re.match(r"Tile(\d+)x(\d+)", tile).groups())
        cm, cn = CLUSTERS[cluster]
        want = (tn, tm, cn, cm) if name.startswith("swap") else (tm, tn, cm, cn)
        assert (rows, cols, cluster_rows, cluster_cols) == want, name


def test_every_shipped_and_sanitizer_shape_is_valid_and_has_candidates_to_time():
    shapes = [*shipped_shapes().values(), *SPEC.SANITIZE_SHAPES]
    for shape in shapes:
        shape = SPEC.validate_shape(dict(shape))
        names = SPEC.candidates(shape)
        assert names and set(names) <= set(SPEC.CANDIDATES)
        assert SPEC.DEFAULT_CANDIDATE(shape) in SPEC.CANDIDATES
    assert {s["dtype"] for s in shapes} == {"fp16", "bf16"}


@pytest.mark.parametrize("m, n, k", [(1, 4096, 4096), (16, 14336, 4096), (128, 4096, 4096), (200, 1000, 1000),
                                     (1000, 1000, 1000), (282, 10696, 3296), (4096, 4096, 4096), (8192, 8192, 8192)])
def test_the_candidates_timed_are_the_tiles_that_fit_m_within_the_wave_cut(m, n, k):
    shape = {"m": m, "n": n, "k": k, "dtype": "fp16"}
    names = SPEC.candidates(shape)
    cost = {c: SPEC._waves_of_tiles(shape, c) for c in names}
    assert max(cost.values()) <= SPEC.WAVE_CUT * min(cost.values())
    assert all(m <= 256 for c in names if c.startswith("swap"))
    assert all(m <= 1024 for c in names if SPEC.TILES[c][0] == 64 and not c.startswith("swap"))
    assert all(m > 64 for c in names if SPEC.TILES[c][0] >= 128 and not c.startswith("swap"))


def test_the_wave_cut_leaves_out_a_tile_mostly_padding():
    """At m = 16, n = 4096 a 128x128 tile is 7/8 padding of m: its one wave does 8 times the work
    of swap_n32_4x1's 64 tiles of 32 columns (four of its waves would not fill the SMs)."""
    shape = {"m": 16, "n": 4096, "k": 4096, "dtype": "fp16"}
    assert "large" not in SPEC.candidates(shape) and "swap_n32_4x1" in SPEC.candidates(shape)
    assert SPEC._waves_of_tiles(shape, "large") == 8 * SPEC._waves_of_tiles(shape, "swap_n32_4x1")
    big = SPEC.candidates({"m": 8192, "n": 8192, "k": 8192, "dtype": "bf16"})
    assert {"large", "wide", "n192_1x2", "n320", "n224", "n160_coop", "streamk"} <= set(big)


def test_the_wave_model_splits_k_as_the_kernel_does():
    """A split-k configuration's blocks are its tiles times the chunks base/cutlass_gemm.cu's
    split_count cuts k into (as many as the tiles leave SMs for, at most 8, each a multiple of 8
    long), each the chunk's k steps; where it would not split it is not timed. At m = 704, n = 240,
    k = 5472 (issue 62's minimum, skinny's 44 tiles): 22 tiles of 64x128 in 6 chunks of 912."""
    text = (GEMM.dir / "base" / "cutlass_gemm.cu").read_text()
    assert "std::min(int64_t(8), cute::max(int64_t(1), sms / tiles))" in text.replace("cute::min", "std::min")
    assert "while (splits > 1 && k % (splits * 8)) --splits;" in text
    shape = {"m": 704, "n": 240, "k": 5472, "dtype": "fp16"}
    assert SPEC._splits(shape, "skinny_splitk") == 6 and SPEC._splits(shape, "skinny") == 1
    assert SPEC._waves_of_tiles(shape, "skinny_splitk") == 64 * 128 * 15   # one wave of 132 blocks, 15 k steps
    assert SPEC._waves_of_tiles(shape, "skinny") == 64 * 64 * 86           # one wave of 44, 86 k steps
    assert {"skinny_splitk", "skinny"} <= set(SPEC.candidates(shape))
    assert SPEC._splits({**shape, "k": 5464}, "skinny_splitk") == 1   # 5464 = 8 * 683: no chunk count divides it
    assert "skinny_splitk" not in SPEC.candidates({**shape, "k": 5464})
    assert "skinny_splitk" not in SPEC.candidates({"m": 1000, "n": 1000, "k": 1000, "dtype": "fp16"})  # 128 tiles


@pytest.mark.parametrize("m, want", [(1, "swap_n32_4x1"), (24, "swap_n32_4x1"), (64, "swap_n64"), (96, "swap_n96"),
                                     (128, "swap_n128"), (160, "swap_n160"), (256, "skinny_n128"), (257, "large"),
                                     (8192, "large")])
def test_static_modes_guess_is_a_short_rule_of_m(m, want):
    assert SPEC.DEFAULT_CANDIDATE({"m": m, "n": 4096, "k": 4096, "dtype": "fp16"}) == want


@pytest.mark.parametrize("pathology", ["cooperative", "cluster_2x1", "tile_64x64"])
@pytest.mark.parametrize("candidate", ["swap_n64", "skinny", "wide", "n320", "swap128_n144"])
def test_a_seam_of_the_large_configuration_does_not_apply_where_another_runs(pathology, candidate):
    shape = shipped_shapes()["sq4k"]
    why = SPEC.not_applicable(pathology, shape, candidate)
    assert why and f"runs the {candidate} configuration" in why and "large configuration's" in why
    assert SPEC.not_applicable(pathology, shape, "large") is None


@pytest.mark.parametrize("pathology", ["cooperative", "cluster_2x1", "tile_64x64", "cp_async", "two_stages",
                                       "no_tma_epilogue", "no_swizzle", "no_l1", "half_sms", "no_pdl"])
def test_every_pathology_applies_where_the_large_configuration_runs(pathology):
    for shape in ("prefill_n4k", "sq8k", "sq4k_bf16"):
        assert SPEC.not_applicable(pathology, shipped_shapes()[shape]) is None  # the default there: large


@pytest.mark.parametrize("pathology", ["cp_async", "two_stages", "no_tma_epilogue", "no_swizzle", "no_l1", "no_pdl"])
@pytest.mark.parametrize("candidate", ["swap_n32_4x1", "skinny_n128", "n128_2x1", "wide", "swap128_n160"])
def test_a_seam_every_configuration_takes_applies_on_every_candidate(pathology, candidate):
    assert SPEC.not_applicable(pathology, shipped_shapes()["decode_m1_n4k"], candidate) is None


def test_a_build_holds_the_one_configuration_it_names_and_a_shape_runs_its_types(built_kernels):
    """conftest's builds name no shape: large, the kernel's own default, in both types (the whole
    base) or FP16 alone (the narrowed ones); each type's instance is its config, and a shape runs
    the one of its type."""
    b = built_kernels["cutlass_gemm"]
    info = Kernel(b.whole.lib).info()
    assert [c["name"] for c in info["configs"]] == ["fp16_large", "bf16_large"]
    instances = list(b.whole.ptxas["kernels"])
    assert sorted(static.config_of(SPEC, k, info["configs"]) for k in instances) == ["bf16_large", "fp16_large"]
    for dtype in ("fp16", "bf16"):
        shape = {"m": 64, "n": 4096, "k": 4096, "dtype": dtype}
        ran = [static.config_of(SPEC, k, info["configs"]) for k in instances
               if static.launched(SPEC, k, shape, info["configs"])]
        assert ran == [f"{dtype}_large"]
    assert all(c["threads"] == 384 for c in info["configs"])
    narrowed = Kernel(b.results["none"].lib).info()
    assert [c["name"] for c in narrowed["configs"]] == ["fp16_large"]


def test_the_base_instances_fit_at_every_sanitizer_shape(built_kernels):
    from ablate.pipeline import cannot_fit

    base = built_kernels["cutlass_gemm"].whole
    info = Kernel(base.lib).info()
    shapes = [SPEC.validate_shape(dict(s)) for s in SPEC.SANITIZE_SHAPES]
    assert [cannot_fit(base, info, SPEC, s) for s in shapes] == [None] * len(shapes)


@pytest.mark.parametrize("name, dtype", [
    ("void cutlass::device_kernel<cutlass::gemm::kernel::GemmUniversal<cute::tuple<int, int, int>, ... "
     "cutlass::bfloat16_t, ...>>(...)", "bf16"),
    ("_ZN7cutlass13device_kernelINS_4gemm6kernel13GemmUniversalIN4cute5tupleIJiiiEEENS_6half_tE", "fp16"),
    ("_ZN4gemm12sum_partialsIN7cutlass13bfloat16_tEEEvPKfPT_li", "bf16")])
def test_an_instance_is_its_types_config_and_the_split_k_sum_is_not_launched_as_the_gemm(name, dtype):
    configs = [{"name": "fp16_skinny_splitk", "dtype": "fp16"}, {"name": "bf16_skinny_splitk", "dtype": "bf16"}]
    assert SPEC.config_of(name, configs) == f"{dtype}_skinny_splitk"
    shape = {"m": 8, "n": 4096, "k": 4096, "dtype": dtype}
    assert SPEC.launched(name, shape, configs) == ("sum_partials" not in name)
    assert not SPEC.launched(name, {**shape, "dtype": "fp16" if dtype == "bf16" else "bf16"}, configs)


def gemm_tool():
    return tool("gemm_candidates")


def test_the_tool_takes_shapes_by_glob_or_by_field_and_names_what_it_refuses():
    f = gemm_tool()
    assert f.shape_names(GEMM, "sq4k*,decode_m64") == ["sq4k", "sq4k_bf16", "decode_m64"]
    with pytest.raises(SystemExit, match=r"--shapes: 'nope_\*' matches no shape of cutlass_gemm"):
        f.shape_names(GEMM, "nope_*")
    assert f.given_shape("m=282,n=10696") == ["shape.m=282", "shape.n=10696"]
    with pytest.raises(SystemExit, match=r"--shape 'm282': give the shape's fields as name=value"):
        f.given_shape("m282")
    shape = {"m": 16, "n": 4096, "k": 4096, "dtype": "fp16"}
    assert f.chosen_candidates(SPEC, None, shape) == SPEC.candidates(shape)
    assert f.chosen_candidates(SPEC, "all", shape) == list(SPEC.CANDIDATES)
    with pytest.raises(SystemExit, match=r"--candidates: \['huge'\] are not in spec.CANDIDATES"):
        f.chosen_candidates(SPEC, "large,huge", shape)
    job = dict(f.jobs(f.main.__globals__["argparse"].Namespace(
        kernel="cutlass_gemm", shapes="decode_m64", shape=["m=282,n=10696,k=3296"], override=["mode=static"])))
    assert job["decode_m64"].shape["m"] == 64 and job["m=282,n=10696,k=3296"].shape["n"] == 10696


def test_the_tools_counters_are_known_to_ncu_and_set_side_by_side():
    """--counters: ncu's names checked against its list before any GPU; the driver's sides the
    timed candidates fastest first, then the peer (none where the peer was not timed); the table
    a row a side, a dash where ncu gave no value."""
    from ablate.gpu import profile
    from ablate.job import counters

    f = gemm_tool()
    counters.check_names(f.counter_metrics(), "tools/gemm_candidates.py")
    record = {"times_us": {"large": 30.0, "skinny": 11.1}, "peer": "torch_matmul", "peer_us": 11.5}
    libs = {"large": "l.so", "skinny": "s.so"}
    assert f.counter_sides(record, libs) == [{"name": "skinny", "so": "s.so"}, {"name": "large", "so": "l.so"},
                                             {"name": "torch_matmul", "peer": "torch_matmul"}]
    assert [s["name"] for s in f.counter_sides({**record, "peer_us": None}, libs)] == ["skinny", "large"]
    found = {"skinny": {profile.TIME: 11100.0, f.CROSSBAR["into SMs"]: 165e6, f.CROSSBAR["multicast"]: 0.0,
                        f.CROSSBAR["cluster"]: 0.0},
             "torch_matmul": {profile.TIME: 8000.0, f.CROSSBAR["into SMs"]: 166e6, f.CROSSBAR["multicast"]: 111e6,
                              f.CROSSBAR["L2 reads"]: 2.0e6, f.CROSSBAR["cluster"]: 4.0}}
    head, mine, peer = f.counter_table(found)
    assert head.split()[:2] == ["us", "tensor"] and "multicast" in head
    assert mine.split()[:2] == ["skinny", "11.10"] and "165 MB" in mine and mine.split()[-1] == "1"
    assert peer.split()[:2] == ["torch_matmul", "8.00"] and "111 MB" in peer and peer.split()[-1] == "4"
    assert "L2 reads" in head and "64 MB" in peer  # sectors of 32 bytes
    assert mine.split()[2] == "-"  # no tensor pipe value given: a dash, not a zero


def test_the_gpu_tests_cases_are_shapes_the_kernel_takes():
    """tests/test_cutlass_gemm_gpu.py's CASES run only on a GPU; a case the kernel refuses (n or k
    not a multiple of 8) fails every pathology's test there, so it is caught here, on the CPU, too."""
    from pathlib import Path

    module = module_at(Path(__file__).with_name("test_cutlass_gemm_gpu.py"), "cutlass_gemm_gpu_cases")
    for m, n, k in module.CASES:
        for dtype in ("fp16", "bf16"):
            SPEC.validate_shape({"m": m, "n": n, "k": k, "dtype": dtype})
