"""The CUTLASS GEMM plugin on the CPU: CUTLASS found in the nvidia-cutlass wheel (a clear line
without it), the shapes it refuses (naming the field), the choice of configuration by shape
(base/choice.def, read by spec.choice and compiled into the kernel, which agree), where a
pathology does not apply, which compiled instance is which configuration in its real base
library (built with every variant in conftest's session build), and the candidates'
measurement tool (tools/gemm_candidates.py) as far as it goes without a GPU."""
import ctypes
import importlib.util
import re

import pytest

from ablate.build import static
from ablate.build.library import Kernel
from ablate.job import plugins

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


def test_every_shipped_shape_is_valid_and_each_configuration_has_one():
    shapes = shipped_shapes()
    for shape in shapes.values():
        SPEC.validate_shape(shape)
    assert {SPEC.choice(s) for s in shapes.values()} == set(SPEC.configurations())
    assert {s["dtype"] for s in shapes.values()} == {"fp16", "bf16"}


def test_the_sanitizer_shapes_reach_every_configuration_of_the_table_in_both_dtypes():
    shapes = [SPEC.validate_shape(dict(s)) for s in SPEC.SANITIZE_SHAPES]
    assert {SPEC.choice(s) for s in shapes} == set(SPEC.configurations())
    assert {s["dtype"] for s in shapes} == {"fp16", "bf16"}


def test_the_grid_is_families_a_glob_picks():
    """Skinny m from 1 to 256 (decode_*), shapes off every tile (odd_*: m and n multiples of no
    tile side, k not of 64), and BF16 variants (*_bf16) of both."""
    shapes = shipped_shapes()
    decode = {n: s for n, s in shapes.items() if n.startswith("decode_")}
    odd = {n: s for n, s in shapes.items() if n.startswith("odd_")}
    assert {1, 16, 32, 64, 128, 256} <= {s["m"] for s in decode.values()}
    for name, s in odd.items():
        assert s["m"] % 32 and s["n"] % 32 and s["k"] % 64, name
    for family in (decode, odd):
        assert {s["dtype"] for s in family.values()} == {"fp16", "bf16"}
        assert all(n.endswith("_bf16") == (s["dtype"] == "bf16") for n, s in family.items())
    assert 16 <= len(decode) + len(odd) <= 30  # one GPU benchmark of the grid in a few minutes


def test_wave_efficiency_counts_the_last_wave_whole():
    assert SPEC.wave_efficiency(4096, 4096) == 96  # 1024 tiles: 8 waves of 132
    assert SPEC.wave_efficiency(1000, 1000) == 48  # 64 tiles: half a wave
    assert SPEC.wave_efficiency(128 * 12, 128 * 11) == 100  # 132 tiles
    assert SPEC.wave_efficiency(128 * 133, 128) == 50  # 133 tiles: one in a second wave
    assert SPEC.wave_efficiency(1000, 1000, sms=64) == 100


@pytest.mark.parametrize("m, n, k, want", [
    # m <= 24: swap_n32_4x1 (d^T = b a^T on 64x32 tiles, 4x1 clusters) but at 46-55% of a wave, where
    # its clusters of four pass the 30 the H100 holds at once: there skinny_n128 to m = 16, skinny
    # to n = 9000 beyond
    (1, 4096, 1000, "swap_n32_4x1"), (16, 4096, 4096, "swap_n32_4x1"), (1, 4360, 1032, "swap_n32_4x1"),
    (12, 2560, 1000, "swap_n32_4x1"), (16, 14336, 4096, "swap_n32_4x1"), (24, 6144, 2048, "swap_n32_4x1"),
    (19, 9800, 4096, "swap_n32_4x1"), (8, 11008, 4096, "swap_n32_4x1"), (20, 9472, 4096, "swap_n32_4x1"),
    (4, 8192, 2048, "skinny_n128"), (16, 8192, 1000, "skinny_n128"), (16, 7808, 1000, "skinny_n128"), (16, 7680, 2048, "swap_n32_4x1"),
    (17, 8192, 1000, "skinny"), (24, 9000, 1000, "skinny"), (24, 9344, 1000, "skinny_n128"),
    # m 25-160, the swapped ones (d^T = b a^T, the tile's N fitted to m; the twelfth session's probe
    # and random shapes): swap_n64 to m = 64, swap_n96 to 96, swap_n128 to 127 where n > 3072
    (25, 1120, 3400, "swap_n64"), (64, 4096, 4096, "swap_n64"), (64, 7680, 4096, "swap_n64"),
    (72, 4096, 1000, "swap_n96"), (65, 3600, 1000, "swap_n96"),
    (96, 4104, 4096, "swap_n96"), (72, 14336, 4096, "swap_n96"), (96, 8192, 1000, "swap_n96"),
    (125, 4168, 4104, "swap_n128"), (112, 4096, 1000, "swap_n128"),
    # past the 64-row tiles' one wave of clusters to n = 15360 (the twenty-first session): the tile 128
    # rows tall at m 25-64, and at m 97-128 past half a wave with rows on lines; off lines (m 97-127)
    # and at m 65-96 the 64-row ones stay
    (64, 7688, 4096, "swap128_n64"), (64, 14336, 4096, "swap128_n64"), (32, 14336, 4096, "swap128_n64"),
    (25, 15360, 1000, "swap128_n64"), (64, 15368, 1000, "swap_n64"), (118, 13008, 1536, "swap128_n128"),
    (127, 15360, 1024, "swap128_n128"), (127, 15368, 1024, "swap_n128"), (100, 12000, 1000, "swap_n128"),
    (96, 14336, 4096, "swap_n96"), (128, 15360, 4096, "swap128_n128"), (128, 15368, 4096, "swap_n128"),
    # m 65-128 where n <= 3072 (the thirteenth session): four or more column tiles of 32 to n = 1024,
    # two of 64 to n = 2048, two of 64 on a 4x2 cluster to n = 3584 (the fifteenth session); to a quarter
    # of a wave beyond (n <= 4096), rows on lines: two of 48 on a 1x2 cluster to m = 96, two of 64 on one to 128
    (65, 1000, 1000, "swap_n32_4x1"), (128, 1024, 4096, "swap_n32_4x1"), (100, 1000, 2048, "swap_n32_4x1"),
    (65, 2040, 1000, "swap_n64"), (100, 2040, 1000, "swap_n64"), (125, 1320, 3000, "swap_n64"),
    (128, 2048, 4096, "swap_n64"), (72, 3072, 2048, "swap_n64_4x2"), (120, 3072, 3072, "swap_n64_4x2"),
    (83, 2072, 328, "swap_n64_4x2"), (65, 3080, 1000, "swap_n64_4x2"), (128, 3584, 1000, "swap_n64_4x2"),
    (96, 4096, 4096, "swap_n48_1x2"), (65, 3600, 64, "swap_n48_1x2"), (90, 4096, 2048, "swap_n48_1x2"),
    (112, 4096, 4096, "swap_n64_1x2"), (97, 3600, 2048, "swap_n64_1x2"), (128, 4096, 4096, "swap_n64_1x2"),
    # m = 128, n > 3584: swap_n64_1x2 to a quarter of a wave on lines, skinny to 25% off them, n128_2x1 to
    # 50%, then n128_2x1 where rows are off lines, swap_n128 on lines
    (128, 4096, 1000, "skinny"), (128, 4224, 4096, "skinny"), (128, 14336, 1000, "n128_2x1"),
    (128, 6144, 4096, "n128_2x1"), (128, 8192, 4096, "n128_2x1"), (128, 11008, 4096, "swap128_n128"),
    # m 65-127 at 46-50% of a wave, rows on lines: n128_2x1 (the fourteenth session; to 50%, one wave of
    # its blocks, the fifteenth); off lines, and past 50%, the swapped ones
    (72, 8192, 4096, "n128_2x1"), (112, 8192, 4096, "n128_2x1"), (96, 8192, 1000, "swap_n96"), (78, 8584, 2760, "swap_n96"),
    (72, 9216, 2048, "swap_n96"), (112, 8704, 4096, "swap128_n128"),
    # m 129-192: three column tiles of 64 to n = 1024, two of 96 to n = 3072; beyond, swap_n160 to 160
    (150, 1000, 1000, "swap_n64"), (192, 1024, 2048, "swap_n64"), (146, 1880, 1216, "swap_n96"),
    (150, 3072, 2048, "swap_n96"), (161, 2040, 4096, "swap_n96"), (129, 8, 8, "swap_n64"),
    (136, 4096, 1000, "swap_n160"), (160, 4096, 4096, "swap_n160"), (144, 7680, 4096, "swap_n160"),
    # past n = 7680 (30 clusters of four of its tiles) to 15360 the 128-row swapped tile whose 144 or
    # 160 columns hold m (the twentieth session); past n = 15360 swap_n160 again
    (129, 128 * 66, 4096, "swap128_n144"), (144, 7688, 4096, "swap128_n144"), (137, 8704, 1000, "swap128_n144"),
    (144, 14336, 4096, "swap128_n144"), (145, 7688, 4096, "swap128_n160"), (150, 11968, 1000, "swap128_n160"),
    (160, 15360, 2048, "swap128_n160"), (160, 15368, 2048, "swap_n160"), (136, 16384, 4096, "swap_n160"),
    # m 161-256, rows off lines: two column tiles of swap_n96 to m = 192, of swap_n128 beyond; four
    # of 64 at m 193-256 to n = 1024, rows on lines or off
    (192, 12720, 4104, "swap_n96"), (161, 3080, 1000, "swap_n96"), (200, 1000, 1000, "swap_n64"),
    (240, 1000, 2048, "swap_n64"), (256, 4096, 1000, "swap_n128"), (194, 3936, 3000, "swap_n128"),
    (204, 4728, 3000, "swap_n128"), (253, 6000, 3344, "swap_n128"), (256, 14336, 1000, "swap_n128"),
    (213, 10120, 4104, "swap_n128"),
    # on lines, n 1025-3072: swap_n128 to m = 224, then skinny to a quarter of a wave, swap_n128 past it
    (200, 2040, 2048, "swap_n128"), (224, 3072, 4096, "swap_n128"), (240, 2040, 2048, "skinny"),
    (240, 3072, 2048, "swap_n128"),
    # n > 3072: skinny to a quarter; skinny_n128 to m = 192, and to half a wave beyond
    (176, 14336, 4096, "skinny_n128"), (192, 10344, 3072, "skinny_n128"),
    (256, 4096, 4096, "skinny_n128"), (233, 3280, 2048, "skinny_n128"),
    # past half a wave: large to m = 224 while its tiles make one wave (n <= 8448; the fifteenth session),
    # swap_n128 beyond; the wave model (fastest) past m = 224
    (224, 8192, 4096, "large"), (208, 8192, 2048, "large"), (224, 6144, 2048, "large"), (200, 8448, 4096, "large"),
    (200, 9000, 4096, "swap_n128"), (219, 13384, 2048, "swap_n128"), (224, 14336, 4096, "swap_n128"), (225, 14336, 4096, "n224"),
    (256, 14336, 4096, "n224"), (241, 6120, 4096, "large"), (256, 8192, 4096, "large"),
    # m 257-448, rows on lines, up to half a wave: skinny where n <= 1024, skinny_n128 to n = 2048 (the
    # fifteenth session); skinny_n128 at m 449-512 and past 768 where n <= 1024
    (512, 1024, 4096, "skinny_n128"), (1000, 1000, 1024, "skinny_n128"), (257, 8, 64, "skinny"),
    (384, 1024, 4096, "skinny"), (448, 1000, 320, "skinny"), (449, 1024, 4096, "skinny_n128"),
    (448, 1032, 4096, "skinny_n128"), (384, 2048, 4096, "skinny_n128"), (769, 1024, 4096, "skinny_n128"),
    # m 257-448, rows off lines: skinny_n128 where n <= 1024, swap_n128 to n = 2048 (the fifteenth session)
    (448, 1024, 1000, "skinny_n128"), (448, 640, 2056, "skinny_n128"),
    (384, 1536, 1000, "swap_n128"), (300, 2048, 1000, "swap_n128"), (448, 2048, 1032, "swap_n128"),
    # m 449-768 up to half a wave (the eighteenth session, H200): of swap_n96, swap_n128 and swap_n160, the
    # narrowest whose clusters of four (n / 256 of them per column tile of m) fit one wave of 30; but
    # skinny_n128 at m 449-512 on lines where n <= 1024 (above) and swap_n128 at m 577-672 on lines where
    # n <= 1024 (H100 readings); n128_2x1 at m 481-512, n 1793-2048, where none fits
    (512, 1024, 1000, "swap_n96"), (513, 1032, 4096, "swap_n96"), (480, 1536, 2048, "swap_n96"),
    (481, 1280, 1000, "swap_n96"), (576, 1280, 4096, "swap_n96"), (640, 640, 2056, "swap_n96"),
    (640, 1024, 1000, "swap_n96"), (672, 1024, 1000, "swap_n96"), (768, 768, 2048, "swap_n96"), (513, 1032, 1000, "swap_n96"),
    (449, 1544, 1000, "swap_n128"), (512, 1792, 4096, "swap_n128"), (600, 1504, 2048, "swap_n128"),
    (640, 1032, 1000, "swap_n128"), (640, 1024, 4096, "swap_n128"), (673, 1024, 1000, "swap_n128"),
    (768, 1280, 2048, "swap_n128"), (768, 1024, 4096, "swap_n128"),
    (480, 2048, 4096, "swap_n160"), (576, 1664, 1000, "swap_n160"), (640, 1544, 2048, "swap_n160"), (705, 1288, 328, "swap_n160"),
    (512, 2048, 1032, "n128_2x1"), (481, 1800, 4096, "n128_2x1"),
    # before them, skinny on lines where its 64x64 tiles make one wave, n <= 872 (the nineteenth session)
    (684, 568, 3968, "skinny"), (512, 872, 4096, "skinny"), (576, 872, 1024, "skinny"), (640, 832, 2048, "skinny"),
    (705, 704, 2048, "skinny"), (768, 704, 1024, "skinny"), (449, 512, 64, "skinny"),
    (512, 880, 4096, "skinny_n128"), (577, 872, 1024, "swap_n128"), (641, 832, 1024, "swap_n128"),
    # m 769-1024, n <= 1024, rows off lines: n128_2x1; past m = 1024 large
    (769, 1000, 1000, "n128_2x1"), (1024, 512, 1000, "n128_2x1"), (1000, 1000, 1000, "n128_2x1"), (1025, 512, 1000, "large"),
    # up to half a wave beyond: large (rows on lines or off)
    (1500, 512, 1000, "large"), (800, 1104, 2048, "large"), (800, 1104, 1000, "large"), (1025, 1032, 64, "large"),
    # m > 256 past half a wave: the wave model (fastest), its picks where they were measured (the
    # eighth and ninth sessions; at m = 384 and 640, n = 3000-3504, where large and n160_coop read
    # within 1% of each other, the speeds now give large): rows off lines
    (1500, 1496, 1000, "n160_coop"), (384, 3504, 1000, "large"), (640, 3000, 1000, "large"),
    (777, 5000, 2056, "n320"), (3000, 3000, 1000, "n320"), (3072, 3072, 1000, "n320"), (1500, 3000, 1000, "n320"),
    (600, 5000, 1000, "wide"), (1200, 3000, 1000, "wide"), (5000, 3000, 1032, "wide"), (4185, 6704, 1000, "wide"),
    (2048, 2048, 1000, "wide"), (4096, 4096, 4104, "wide"), (777, 4000, 1000, "wide"),
    (2058, 1304, 1000, "n224"), (788, 6064, 1000, "n224"), (3094, 1768, 4104, "n224"), (3995, 1736, 4104, "n224"),
    # rows on 64-byte half-lines (k = 1056, 1120, 1568)
    (3072, 3072, 1056, "n192_1x2"), (2776, 5432, 1056, "n192_1x2"), (3712, 2288, 1120, "n192_1x2"),
    (845, 2448, 1056, "n160_coop"), (1981, 5320, 1056, "n224"),
    # and on lines (at m = 640, n = 5000 and m = 257, n = 36864 large walks its 5 and 3 rows of tiles
    # unswizzled: its fourth speed, 85, gives wide and n192_1x2 there, not measured at these shapes)
    (4096, 4096, 4096, "large"), (8192, 14336, 4096, "large"), (8192, 8192, 8192, "large"), (2048, 1024, 4096, "large"),
    (640, 5000, 2048, "wide"), (257, 4096 * 9, 64, "n192_1x2"), (777, 5000, 2048, "n320"),
    (3000, 3000, 2048, "n192_1x2"), (5000, 3000, 2048, "n192_1x2"), (742, 4736, 1024, "n224"), (1136, 2856, 4096, "n224")])
def test_the_table_chooses_by_m_n_the_wave_efficiency_and_the_rows(m, n, k, want):
    assert SPEC.choice({"m": m, "n": n, "k": k, "dtype": "fp16"}) == want


def test_the_choice_follows_the_sm_count():
    shape = {"m": 240, "n": 4096, "k": 1024, "dtype": "fp16"}  # 64 tiles: 25% of 256 SMs, 48% of 132, 100% of 64
    assert [SPEC.choice(shape, sms=s) for s in (256, 132, 64)] == ["skinny", "skinny_n128", "large"]


@pytest.mark.parametrize("text, error", [
    ("GEMM_CHOICE(skinny, 128, 0, 100, any)\n", r"the last row must hold at every shape"),
    ("GEMM_CHOICE(wide, 0, 0, 100, off_line)\n", r"the last row must hold at every shape"),
    ("GEMM_CHOICE(large, 0, 1024, 100, any)\n", r"the last row must hold at every shape"),
    ("GEMM_CHOICE(huge, 0, 0, 100, any)\n", r"row 'GEMM_CHOICE\(huge, 0, 0, 100, any\)' names 'huge', not one of large, skinny"),
    ("GEMM_CHOICE(wide, 0, 0, 100, odd)\nGEMM_CHOICE(large, 0, 0, 100, any)\n",
     r"row 'GEMM_CHOICE\(wide, 0, 0, 100, odd\)': rows must be one of any, off_line, on_line, got 'odd'"),
    ("GEMM_CHOICE(large, 0, 100, any)\n", r"cannot read the row 'GEMM_CHOICE\(large, 0, 100, any\)' "
     r"\(GEMM_CHOICE\(name, max_m, max_n, max_efficiency, rows\)\)"),
    ("// nothing\n", r"the last row must hold at every shape .*no rows")])
def test_a_bad_table_is_refused_naming_the_file_and_row(text, error):
    with pytest.raises(ValueError, match=rf"choice.def: {error}"):
        SPEC.choice_table(text)


def test_a_table_row_reaches_the_choice():
    rows = SPEC.choice_table("GEMM_CHOICE(skinny_n32, 32, 0, 100, any)\nGEMM_CHOICE(skinny, 128, 0, 100, any)\n"
                             "GEMM_CHOICE(n192, 0, 2048, 100, any)\n"
                             "GEMM_CHOICE(wide, 0, 0, 100, off_line)\nGEMM_CHOICE(large, 0, 0, 100, any)\n")
    assert [SPEC.choice({"m": m, "n": n, "k": k}, table=rows)
            for m, n, k in ((16, 4096, 8), (33, 4096, 8), (1000, 2048, 1024), (1000, 2056, 1024), (1000, 4096, 1000))] \
        == ["skinny_n32", "skinny", "n192", "large", "wide"]


def test_the_pool_gives_each_configuration_the_tile_and_cluster_the_kernel_defines():
    """base/choice.def's GEMM_POOL rows restate each configuration's tile and cluster (the wave
    model counts its tiles); they must be the base's, as base/cutlass_gemm.cu's GEMM_CANDIDATE rows
    define them."""
    source = (GEMM.dir / "base" / "cutlass_gemm.cu").read_text()
    clusters = {"Cluster1x1": (1, 1), "LargeCluster": (1, 1), "WideCluster": (1, 2), "TallCluster": (2, 1),
                "QuadCluster": (2, 2), "Tall4Cluster": (4, 1), "Tall4x2Cluster": (4, 2)}  # the base's: its mainloop multicasts, large's cluster seam is 1x1
    defined = {}
    for name, tile, cluster in re.findall(r"^GEMM_CANDIDATE\(\d+,\s*(\w+),\s*(\w+),\s*(\w+),", source, re.M):
        tile = (128, 128) if tile == "ABLATE_SEAM_TILE" else tuple(int(x) for x in re.fullmatch(r"Tile(\d+)x(\d+)", tile).groups())
        defined[name] = (*tile, *clusters[cluster])
    pool = SPEC.pool_table()
    assert pool and {name for name, *_ in pool} <= set(SPEC.CANDIDATES)
    for name, tile_m, tile_n, cluster_m, cluster_n, *_ in pool:
        assert (tile_m, tile_n, cluster_m, cluster_n) == defined[name], name


@pytest.mark.parametrize("text, error", [
    ("GEMM_POOL(huge, 128, 128, 1, 1, 50, 75, 100, 100)\n", r"names 'huge', not one of large"),
    ("GEMM_POOL(large, 128, 128, 1, 1, 0, 75, 100, 100)\n", r"tiles, clusters and speeds must be at least 1"),
    ("GEMM_POOL(large, 128, 128, 1, 1, 50, 75, 100)\n", r"cannot read the row"),  # the fourth speed missing
    ("GEMM_POOL(large, 128, 128, 1, 1)\n", r"cannot read the row 'GEMM_POOL\(large, 128, 128, 1, 1\)'")])
def test_a_bad_pool_row_is_refused_naming_the_file_and_row(text, error):
    with pytest.raises(ValueError, match=rf"choice.def: .*{error}"):
        SPEC.pool_table(text)


def test_a_table_that_names_fastest_needs_a_pool():
    with pytest.raises(ValueError, match=r"a row names fastest but no GEMM_POOL row"):
        SPEC.choice_table("GEMM_CHOICE(fastest, 0, 0, 100, any)\n")


@pytest.mark.parametrize("tiles, cluster, swizzle", [
    ((32, 32), (1, 1), 8), ((31, 31), (1, 1), 1), ((12, 40), (1, 1), 4),  # 12 rows: 8 pads to 16, 4 does not
    ((7, 40), (1, 1), 1),  # m = 777, n = 5000: a swizzle of 8 launched 320 tiles for 280 (base/seams.cuh)
    ((12, 12), (1, 1), 4), ((24, 10), (2, 1), 2), ((1, 64), (1, 1), 1)])
def test_fitted_swizzle_is_the_largest_that_pads_no_tile(tiles, cluster, swizzle):
    assert SPEC.fitted_swizzle(*tiles, *cluster) == swizzle


def test_fastest_times_the_waves_of_each_configurations_tiles():
    """A wave of a configuration's tiles takes tile M x tile N / speed, the speed by where the rows
    start; the pick takes least time, the first of equals."""
    pool = [("large", 128, 128, 1, 1, 50, 75, 100, 100), ("wide", 256, 128, 1, 2, 100, 100, 100, 100)]
    # 1024 tiles of 128x128 (8 waves of 132) and 512 of 256x128 (4): equal work, the first wins on
    # lines; off lines (k = 4104: rows of 8208 bytes) and on half-lines (k = 4128) large is slower
    shapes = [{"m": 4096, "n": 4096, "k": k} for k in (4096, 4104, 4128)]
    assert [SPEC.fastest(s, pool=pool) for s in shapes] == ["large", "wide", "wide"]
    # 132 tiles of 128x128 fill one wave; 256x128 tiles, 66 of them, a wave of twice the work
    assert SPEC.fastest({"m": 128 * 12, "n": 128 * 11, "k": 4096}, pool=pool) == "large"
    # the cluster rounds the grid: 2 columns of 128 are one 1x2 cluster, 3 are two
    tall = [("wide", 256, 128, 1, 2, 100, 100, 100, 100), ("large", 128, 128, 1, 1, 100, 100, 100, 100)]
    assert SPEC.fastest({"m": 256 * 44, "n": 128 * 3, "k": 64}, sms=132, pool=tall) == "large"
    assert SPEC.fastest({"m": 256 * 44, "n": 128 * 2, "k": 64}, sms=132, pool=tall) == "wide"
    # the speed on half-lines is its own: large at 75 against wide's 100 at equal work
    slow_half = [("wide", 256, 128, 1, 2, 100, 50, 100, 100), ("large", 128, 128, 1, 1, 100, 75, 100, 100)]
    assert [SPEC.fastest(s, pool=slow_half) for s in shapes] == ["wide", "wide", "large"]
    # on lines, the speed where the base's raster leaves a configuration's tiles unswizzled is its
    # own: 31 x 31 tiles of 128x128 (no swizzle pads none) and 16 x 32 clusters of 256x128, equal
    # work, large at 85 there; at 32 x 32 large swizzles by 8 and keeps 100
    unswizzled = [("large", 128, 128, 1, 1, 100, 100, 100, 85), ("wide", 256, 128, 1, 2, 100, 100, 100, 100)]
    assert [SPEC.fastest({"m": 128 * t, "n": 128 * t, "k": 4096}, pool=unswizzled) for t in (31, 32)] == ["wide", "large"]
    assert SPEC.fastest({"m": 128 * 31, "n": 128 * 31, "k": 4104}, pool=unswizzled) == "large"  # off lines: not this speed
    table = SPEC.choice_table("GEMM_CHOICE(skinny, 128, 0, 100, any)\nGEMM_CHOICE(fastest, 0, 0, 100, any)\n"
                              "GEMM_POOL(large, 128, 128, 1, 1, 50, 75, 100, 100)\n"
                              "GEMM_POOL(wide, 256, 128, 1, 2, 100, 100, 100, 100)\n")
    assert SPEC.choice({"m": 64, "n": 4096, "k": 4104}, table=table, pool=pool) == "skinny"
    assert SPEC.choice(shapes[1], table=table, pool=pool) == "wide"


@pytest.mark.parametrize("pathology, shape, config", [
    ("cooperative", "decode_m64", "swap_n64"), ("cluster_2x1", "decode_m32_n4k", "swap_n64"),
    ("tile_64x64", "decode_m96_n4k", "swap_n48_1x2"), ("cluster_2x1", "decode_m144_n14k", "swap128_n144"),
    ("tile_64x64", "decode_m128_n4k_bf16", "swap_n64_1x2"), ("tile_64x64", "decode_m96_n14k", "swap_n96"), ("cooperative", "prefill_m384_n1k", "skinny"), ("cooperative", "decode_m1_n4k", "swap_n32_4x1"),
    ("tile_64x64", "decode_m120_n3k", "swap_n64_4x2"),
    ("cluster_2x1", "decode_m256_n4k", "skinny_n128"), ("tile_64x64", "odd_m200_n1000_k1000", "swap_n64"), ("cooperative", "decode_m112_n14k", "swap128_n128"),
    ("cooperative", "odd_m777_n5000_k2056", "n320"), ("cluster_2x1", "odd_m3000_n3000_k1000", "n320"),
    ("cooperative", "odd_m1500_n1496_k1000", "n160_coop"), ("tile_64x64", "rows_m3072_k1024", "n192_1x2"),
    ("tile_64x64", "rows_m4096_k4104", "wide"), ("cluster_2x1", "odd_m1000_n1000_k1000", "n128_2x1"),
    ("cooperative", "odd_m2058_n1304_k1000", "n224")])
def test_a_seam_of_the_large_configuration_does_not_apply_where_another_runs(pathology, shape, config):
    shape = shipped_shapes()[shape]
    why = SPEC.not_applicable(pathology, shape)
    assert why and f"runs the {config} configuration" in why and "large configuration's" in why


@pytest.mark.parametrize("pathology", ["cooperative", "cluster_2x1", "tile_64x64", "cp_async", "two_stages",
                                       "no_tma_epilogue", "no_swizzle", "no_l1", "half_sms"])
def test_every_pathology_applies_where_the_large_configuration_runs(pathology):
    for shape in ("prefill_n4k", "sq8k", "sq4k_bf16"):
        assert SPEC.not_applicable(pathology, shipped_shapes()[shape]) is None


@pytest.mark.parametrize("pathology", ["cp_async", "two_stages", "no_tma_epilogue", "no_swizzle", "no_l1"])
@pytest.mark.parametrize("shape", ["decode_m1_n4k", "odd_m1000_n1000_k1000_bf16"])
def test_a_seam_every_configuration_takes_applies_at_every_shape(pathology, shape):
    assert SPEC.not_applicable(pathology, shipped_shapes()[shape]) is None


def test_each_instance_is_one_configuration_and_a_shape_runs_one(built_kernels):
    b = built_kernels["cutlass_gemm"]
    base = b.whole  # both dtypes' instances (the others are built with FP16's alone: conftest.NARROWED)
    info = Kernel(base.lib).info()
    names = [c["name"] for c in info["configs"]]
    table = SPEC.configurations()
    assert sorted(names) == sorted(f"{d}_{c}" for d in ("fp16", "bf16") for c in table)  # exactly the table's
    instances = list(base.ptxas["kernels"])
    found = [static.config_of(SPEC, k, info["configs"]) for k in instances]
    assert sorted(found) == sorted(names)  # one instance a configuration
    for shape, want in (({"m": 64, "n": 4096, "k": 4096, "dtype": "fp16"}, "fp16_swap_n64"),
                        ({"m": 96, "n": 14336, "k": 4096, "dtype": "bf16"}, "bf16_swap_n96"),
                        ({"m": 96, "n": 4096, "k": 4096, "dtype": "bf16"}, "bf16_swap_n48_1x2"),
                        ({"m": 128, "n": 4096, "k": 4096, "dtype": "fp16"}, "fp16_swap_n64_1x2"),
                        ({"m": 128, "n": 3208, "k": 8, "dtype": "fp16"}, "fp16_swap_n64_4x2"),
                        ({"m": 100, "n": 2040, "k": 1000, "dtype": "fp16"}, "fp16_swap_n64"),
                        ({"m": 83, "n": 2072, "k": 328, "dtype": "bf16"}, "bf16_swap_n64_4x2"),
                        ({"m": 150, "n": 14336, "k": 4096, "dtype": "fp16"}, "fp16_swap128_n160"),
                        ({"m": 150, "n": 4096, "k": 4096, "dtype": "fp16"}, "fp16_swap_n160"),
                        ({"m": 144, "n": 14336, "k": 4096, "dtype": "bf16"}, "bf16_swap128_n144"),
                        ({"m": 32, "n": 14336, "k": 4096, "dtype": "fp16"}, "fp16_swap128_n64"),
                        ({"m": 112, "n": 14336, "k": 4096, "dtype": "bf16"}, "bf16_swap128_n128"),
                        ({"m": 112, "n": 5120, "k": 4096, "dtype": "fp16"}, "fp16_swap_n128"),
                        ({"m": 128, "n": 4104, "k": 8, "dtype": "bf16"}, "bf16_skinny"),
                        ({"m": 1, "n": 4096, "k": 8, "dtype": "fp16"}, "fp16_swap_n32_4x1"),
                        ({"m": 16, "n": 4096, "k": 4096, "dtype": "bf16"}, "bf16_swap_n32_4x1"),
                        ({"m": 1, "n": 8192, "k": 8, "dtype": "fp16"}, "fp16_skinny_n128"),
                        ({"m": 256, "n": 4096, "k": 64, "dtype": "fp16"}, "fp16_skinny_n128"),
                        ({"m": 256, "n": 4096, "k": 8, "dtype": "fp16"}, "fp16_swap_n128"),
                        ({"m": 1000, "n": 1000, "k": 1000, "dtype": "bf16"}, "bf16_n128_2x1"),
                        ({"m": 1500, "n": 512, "k": 1000, "dtype": "bf16"}, "bf16_large"),
                        ({"m": 4096, "n": 4096, "k": 64, "dtype": "fp16"}, "fp16_large"),
                        ({"m": 4096, "n": 4096, "k": 8, "dtype": "fp16"}, "fp16_wide"),
                        ({"m": 3000, "n": 3000, "k": 1024, "dtype": "bf16"}, "bf16_n192_1x2"),
                        ({"m": 3000, "n": 3000, "k": 1000, "dtype": "bf16"}, "bf16_n320"),
                        ({"m": 777, "n": 5000, "k": 2056, "dtype": "fp16"}, "fp16_n320"),
                        ({"m": 1500, "n": 1496, "k": 1000, "dtype": "fp16"}, "fp16_n160_coop")):
        ran = [static.config_of(SPEC, k, info["configs"]) for k in instances
               if static.launched(SPEC, k, shape, info["configs"])]
        assert ran == [want]
    # the configurations differ where the base says they do (static metrics per config)
    metrics = static.static_metrics(base, SPEC, info)
    assert metrics["fp16_large.sass.hgmma"] != metrics["fp16_skinny.sass.hgmma"]
    assert all(c["threads"] == 384 for c in info["configs"])


def test_an_instance_that_cannot_launch_in_a_pathologys_build_is_not_run_where_it_would(built_kernels):
    """no_launch_bounds leaves ptxas free to give the n192_1x2 and n320 instances more registers
    than 384 threads may hold (218 and 188 with nvcc 13.0; cudaErrorLaunchOutOfResources on the
    H100): the general rule (pipeline.cannot_fit) finds it from the build, so neither a sweep nor
    the sanitizer runs that build where they run; the base's instances all fit. The sanitizer's
    shapes in FP16, the instances the pathologies' builds here hold (conftest.NARROWED)."""
    from ablate.pipeline import cannot_fit
    from ablate.tools import sanitize

    b = built_kernels["cutlass_gemm"]
    base, var, results = b.whole, b.results["no_launch_bounds"], b.results
    plugin = plugins.load("cutlass_gemm")
    shapes = [SPEC.validate_shape({**s, "dtype": "fp16"}) for s in SPEC.SANITIZE_SHAPES]
    configs = [SPEC.choice(s) for s in shapes]
    skipped = sanitize.not_run_at(plugin, "no_launch_bounds", shapes, var)
    assert sorted(skipped) == [i for i, c in enumerate(configs) if c in ("n192_1x2", "n320")]
    assert {configs[i] for i in skipped} == {"n192_1x2", "n320"}
    for i, why in skipped.items():
        regs = int(re.search(r"384 threads at (\d+) registers a thread \(ptxas\)", why).group(1))
        assert regs * 384 > 65536 and f"_{configs[i]})" in why, why
    info = Kernel(base.lib).info()
    every = shapes + [SPEC.validate_shape(dict(s)) for s in SPEC.SANITIZE_SHAPES]  # the base's: both dtypes
    assert [cannot_fit(base, info, SPEC, s) for s in every] == [None] * len(every)
    assert sanitize.not_run_at(plugin, "two_stages", shapes, results["two_stages"]) == {}


def test_the_kernel_compiles_the_table_spec_choice_reads(built_kernels):
    """The dispatch's choice (ablate_cutlass_gemm_choice, exported for this test) is spec.choice
    at every row's m and n bound and just past it, rows on lines and off, for three SM counts."""
    lib = ctypes.CDLL(str(built_kernels["cutlass_gemm"].whole.lib))
    choose = lib.ablate_cutlass_gemm_choice
    choose.restype, choose.argtypes = ctypes.c_char_p, [ctypes.c_int] * 4
    rows = SPEC.choice_table()
    edges_m = sorted({1, 1500, 3000, 3968, 8192} | {m + d for _, m, _, _, _ in rows if m for d in (0, 1)})
    edges_n = {8, 1000, 1496, 3968, 5000, 14336} | {n + d for _, _, n, _, _ in rows if n for d in (0, 8)}
    for sms in (132, 114, 78):
        for m in edges_m:
            for n in sorted(edges_n | {128 * sms}):
                for k in (8, 64, 1000, 1024, 1056, 4104):
                    want = SPEC.choice({"m": m, "n": n, "k": k}, sms=sms)
                    assert choose(m, n, k, sms).decode() == want, (m, n, k, sms)
    assert choose(0, 8, 8, 132) is None


_COOP_160 = ("_ZN7cutlass13device_kernelINS_4gemm6kernel13GemmUniversalIN4cute5tupleIJiiiEEENS1_10collective13"
             "CollectiveMmaINS1_34MainloopSm90TmaGmmaWarpSpecializedILi{stages}ENS5_IJNS4_1CILi{cm}EEENSA_ILi{cn}EEE"
             "SC_EEENS1_35KernelTmaWarpSpecializedCooperativeEEENS5_IJNSA_ILi128EEENSA_ILi{n}EEENSA_ILi64EEEEEENS_6"
             "half_tENS5_IJlSC_lEEESK_SL_NS4_8TiledMMAINS4_8MMA_AtomIJNS4_4SM904GMMA26MMA_64x160x16_F32F16F16_SS")


@pytest.mark.parametrize("name, want", [
    # shortened from this build's (cuobjdump, not demangled): n320's 2x1 cluster, 3 stages, 320 columns
    (_COOP_160.format(stages=3, cm=2, cn=1, n=320), "fp16_n320"),
    (_COOP_160.format(stages=5, cm=1, cn=2, n=160), "fp16_n160_coop")])
def test_instances_with_a_64x160_atom_are_told_apart_by_the_tiles_n(name, want):
    configs = [{"name": f"fp16_{c}"} for c in ("n320", "n160_coop")]
    assert SPEC.config_of(name, configs) == want


def test_the_instance_with_a_64x224_atom_is_n224():
    name = _COOP_160.format(stages=4, cm=2, cn=1, n=224).replace("MMA_64x160x16", "MMA_64x224x16")
    assert SPEC.config_of(name, [{"name": "fp16_n224"}, {"name": "fp16_n320"}]) == "fp16_n224"
    assert SPEC.config_of(name, [{"name": "fp16_n320"}]) is None  # a build without it: not this one


# ---- the candidates' measurement, without a GPU ---------------------------------------------

def module_at(path, name):
    """The Python file at `path`, loaded as a module called `name`."""
    found = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(found)
    found.loader.exec_module(module)
    return module


def tool(name="gemm_candidates"):
    """The project's tools/NAME.py, loaded as a module."""
    return module_at(GEMM.dir.parent.parent / "tools" / f"{name}.py", name)


def test_the_tool_picks_shapes_by_glob_and_names_a_glob_that_matches_none():
    t = tool()
    assert t.shape_names(GEMM, "decode_m1*,*_bf16")[:3] == ["decode_m112_n14k", "decode_m112_n5k", "decode_m120_n3k"]
    assert all(n.startswith("odd_") for n in t.shape_names(GEMM, "odd_*"))
    with pytest.raises(SystemExit, match=r"--shapes: 'nope\*' matches no shape of cutlass_gemm"):
        t.shape_names(GEMM, "odd_*,nope*")


def test_the_tool_builds_each_candidate_alone_by_its_index():
    from ablate.job.variant import Variant

    t = tool()
    base = Variant("none", ())
    built = t.variants(SPEC, base, t.candidate_names(SPEC, None))
    assert built[0] is base
    assert {v.name: v.macros for v in built[1:]} == {
        f"candidate_{n}": {"ABLATE_GEMM_FORCE": str(i)} for n, i in SPEC.CANDIDATES.items()}
    assert sorted(SPEC.CANDIDATES.values()) == list(range(1, len(SPEC.CANDIDATES) + 1))
    with pytest.raises(SystemExit, match=r"--candidates: unknown \['huge'\]"):
        t.candidate_names(SPEC, "large,huge")


def test_the_tool_builds_the_base_and_each_candidate_again_under_a_raster():
    from ablate.job.variant import Variant

    t = tool()
    built = t.variants(SPEC, Variant("none", ()), ["large", "wide"], "swizzled")
    assert {v.name: v.macros for v in built[1:]} == {
        "candidate_large": {"ABLATE_GEMM_FORCE": "1"}, "candidate_wide": {"ABLATE_GEMM_FORCE": "7"},
        "candidate_chosen_swizzled": {"ABLATE_SEAM_RASTER": "Swizzled"},
        "candidate_large_swizzled": {"ABLATE_GEMM_FORCE": "1", "ABLATE_SEAM_RASTER": "Swizzled"},
        "candidate_wide_swizzled": {"ABLATE_GEMM_FORCE": "7", "ABLATE_SEAM_RASTER": "Swizzled"}}
    assert t.build_names(["large"], "swizzled") == ["large", "chosen_swizzled", "large_swizzled"]
    assert t.build_names(["large"]) == ["large"]
    source = (GEMM.dir / "base" / "seams.cuh").read_text()
    assert all(f"struct {raster} {{" in source for raster in t.RASTERS.values())
    with pytest.raises(SystemExit):
        t.main(["--raster", "tight"])


def test_every_candidate_is_a_configuration_of_the_kernel():
    """spec.CANDIDATES and base/cutlass_gemm.cu's Candidate<index> name the same configurations."""
    import re

    source = (GEMM.dir / "base" / "cutlass_gemm.cu").read_text()
    found = {name: int(i) for i, name in re.findall(r"^GEMM_CANDIDATE\((\d+),\s*(\w+),", source, re.M)}
    assert found == SPEC.CANDIDATES


def test_the_tools_matrix_names_the_best_candidate_and_what_the_table_loses_against_it():
    t = tool()
    results = {"odd": {"shape": {"m": 1000, "n": 1000, "k": 1000, "dtype": "fp16"}, "wave_efficiency": 48,
                       "choice": "streamk", "vs_cublas": {"chosen": 0.80, "large": 0.63, "streamk": 0.80, "skinny": 1.0}},
               "decode": {"shape": {"m": 1, "n": 4096, "k": 4096, "dtype": "bf16"}, "wave_efficiency": 24,
                          "choice": "skinny", "vs_cublas": {"chosen": 0.97, "skinny": 0.97}}}
    rows = t.matrix(SPEC, results, ["large", "skinny", "streamk"], "torch_matmul").splitlines()[-2:]
    assert rows[0] == "| decode | 1 | 24 | skinny | 0.970 | n/a | **0.970** | n/a | skinny | 1.000 |"
    assert rows[1] == "| odd | 1000 | 48 | streamk | 0.800 | 0.630 | **1.000** | 0.800 | skinny | 0.800 |"


@pytest.mark.parametrize("shape, opted_out", [("decode_m64", True), ("decode_m256_n4k", True), ("odd_m1000_n1000_k1000_bf16", True),
                                              ("odd_m3000_n3000_k1000", True), ("sq4k", False)])
def test_a_job_of_a_large_only_pathology_is_not_applicable_where_another_configuration_runs(shape, opted_out):
    from ablate.job.job import make_job

    cfg = plugins.compose("cutlass_gemm", ["pathology=cooperative", f"shape={shape}", "mode=static"])
    job = make_job(cfg, shape)
    assert ("cooperative" in job.opted_out) == opted_out


def test_split_k_instances_are_told_from_skinny_n128_by_their_fp32_output():
    """skinny_splitk's GEMM is skinny_n128's kernel writing FP32 partial sums (the epilogue's
    LinearCombination<float, ...>); its second kernel adds them. Names as the builds print them."""
    configs = [{"name": f"{d}_{c}"} for d in ("fp16", "bf16") for c in ("skinny_n128", "skinny_splitk")]
    head = "_ZN7cutlass13device_kernelINS_4gemm6kernel13GemmUniversalIN4cute5tupleIJiiiiEEE"
    split = head + "MMA_64x128x16_F32F16F16_SS" + "NS_8epilogue6fusion17LinearCombinationIffvfLNS_15FloatRoundStyleE2EEE"
    whole = head + "MMA_64x128x16_F32F16F16_SS" + "NS_8epilogue6fusion17LinearCombinationISH_fvfLNS_15FloatRoundStyleE2EEE"
    adder = "_ZN4gemm12sum_partialsIN7cutlass10bfloat16_tEEEvPKfPT_li"
    assert SPEC.config_of(split, configs) == "fp16_skinny_splitk"
    assert SPEC.config_of(whole, configs) == "fp16_skinny_n128"
    assert SPEC.config_of(adder, configs) == "bf16_skinny_splitk"
    shape = {"m": 1, "n": 4096, "k": 4096, "dtype": "bf16"}
    assert not SPEC.launched(adder, shape, configs)  # the GEMM's resources are the shape's


def test_swapped_instances_are_told_from_the_others_by_ds_column_major_strides():
    """swap_n64 and swap_n128 share skinny's and skinny_n128's rank-4 problem and wgmma atom; they
    write d^T column-major, whose strides (C<1>, n, m n) the epilogue's type carries. Names as the
    builds print them (mangled), shortened, and as c++filt writes them."""
    configs = [{"name": f"fp16_{c}"} for c in ("skinny", "skinny_n128", "swap_n64", "swap_n128")]
    head = "_ZN7cutlass13device_kernelINS_4gemm6kernel13GemmUniversalIN4cute5tupleIJiiiiEEE"
    row_major, column_major = "vNS5_IJlSC_lEEESJ_S1N_", "vNS5_IJSC_llEEESJ_S1N_"  # void C, its stride, D
    for atom, ours, swapped in (("64", "fp16_skinny", "fp16_swap_n64"), ("128", "fp16_skinny_n128", "fp16_swap_n128")):
        mma = f"MMA_64x{atom}x16_F32F16F16_SS"
        assert SPEC.config_of(head + mma + row_major, configs) == ours
        assert SPEC.config_of(head + mma + column_major, configs) == swapped
    readable = ("void cutlass::device_kernel<cutlass::gemm::kernel::GemmUniversal<cute::tuple<int, int, int, int>, "
                "cute::SM90::GMMA::MMA_64x128x16_F32F16F16_SS, void, cute::tuple<cute::C<1>, long, long>")
    assert SPEC.config_of(readable, configs) == "fp16_swap_n128"


def test_swap128_n160_is_told_from_swap_n160_by_the_tiles_rows():
    """The two (and swap128_n64 and swap_n64, swap128_n128 and swap_n128) share the rank-4 problem, the 64x160 atom, the 4x1 cluster and d^T's strides; the
    tile's M follows the kernel schedule in the name: 128 (cooperative) against 64 (ping-pong). The
    name as a CPU build of swap128_n160 prints it (-DABLATE_GEMM_FORCE=40, BF16), shortened."""
    configs = [{"name": f"bf16_{c}"} for c in ("swap_n160", "swap128_n160", "swap128_n144", "n160_coop", "swap_n64",
                                               "swap128_n64", "swap_n128", "swap128_n128")]
    head = ("_ZN7cutlass13device_kernelINS_4gemm6kernel13GemmUniversalIN4cute5tupleIJiiiiEEENS1_10collective13"
            "CollectiveMmaINS1_34MainloopSm90TmaGmmaWarpSpecializedILi5ENS5_IJNS4_1CILi4EEENSA_ILi1EEESC_EEENS1_35"
            "KernelTmaWarpSpecialized{schedule}EEENS5_IJNSA_ILi{m}EEENSA_ILi{n}EEENSA_ILi64EEEEEENS_10bfloat16_t"
            "ENS5_IJlSC_lEEESK_SL_NS4_8TiledMMAINS4_8MMA_AtomIJNS4_4SM904GMMA28MMA_64x{n}x16_F32BF16BF16_SS")
    tail = "NSA_ILi32EEEEEEvNS5_IJSC_llEEESK_S1P_NS1I_6fusion1"
    assert SPEC.config_of(head.format(schedule="Cooperative", m=128, n=160) + tail, configs) == "bf16_swap128_n160"
    assert SPEC.config_of(head.format(schedule="Pingpong", m=64, n=160) + tail, configs) == "bf16_swap_n160"
    assert SPEC.config_of(head.format(schedule="Cooperative", m=128, n=144) + tail, configs) == "bf16_swap128_n144"
    for n in (64, 128):
        assert SPEC.config_of(head.format(schedule="Cooperative", m=128, n=n) + tail, configs) == f"bf16_swap128_n{n}"
        assert SPEC.config_of(head.format(schedule="Pingpong", m=64, n=n) + tail, configs) == f"bf16_swap_n{n}"


def test_swap_n64_on_its_4x2_and_1x2_clusters_is_told_from_swap_n64_by_the_cluster():
    """Names as the builds print them (mangled; the H100 and CPU builds of a679d12 and b371878,
    shortened) and readable: the mainloop's second argument is the cluster, (4, 2, 1) and (1, 2, 1)
    against (4, 1, 1); a repeated C<> is a substitution (SB_: the C<1> before it)."""
    configs = [{"name": f"bf16_{c}"} for c in ("swap_n64", "swap_n64_4x2", "swap_n64_1x2", "swap_n32_4x1",
                                               "swap_n48_1x2")]
    head = ("_ZN7cutlass13device_kernelINS_4gemm6kernel13GemmUniversalIN4cute5tupleIJiiiiEEENS1_10collective13"
            "CollectiveMmaINS1_34MainloopSm90TmaGmmaWarpSpecializedILi13ENS5_IJNS4_1CILi{m}EEE")
    tail = "MMA_64x{n}x16_F32BF16BF16_SS" + "vNS5_IJSC_llEEESJ_S1N_"
    assert SPEC.config_of(head.format(m=4) + "NSA_ILi2EEENSA_ILi1EEEEEE" + tail.format(n=64), configs) == "bf16_swap_n64_4x2"
    assert SPEC.config_of(head.format(m=4) + "NSA_ILi1EEESC_EEE" + tail.format(n=64), configs) == "bf16_swap_n64"
    assert SPEC.config_of(head.format(m=4) + "NSA_ILi1EEESC_EEE" + tail.format(n=32), configs) == "bf16_swap_n32_4x1"
    assert SPEC.config_of(head.format(m=1) + "NSA_ILi2EEESB_EEE" + tail.format(n=64), configs) == "bf16_swap_n64_1x2"
    assert SPEC.config_of(head.format(m=1) + "NSA_ILi2EEESB_EEE" + tail.format(n=48), configs) == "bf16_swap_n48_1x2"
    assert SPEC.config_of(head.format(m=1) + "SB_SB_EEE" + tail.format(n=64), configs) == "bf16_swap_n64"  # cp_async's: unclustered
    readable = ("void cutlass::device_kernel<cutlass::gemm::kernel::GemmUniversal<cute::tuple<int, int, int, int>, "
                "cutlass::gemm::collective::CollectiveMma<cutlass::gemm::MainloopSm90TmaGmmaWarpSpecialized<13, "
                "cute::tuple<cute::C<4>, cute::C<{c}>, cute::C<1> >, cute::SM90::GMMA::MMA_64x64x16_F32BF16BF16_SS, "
                "void, cute::tuple<cute::C<1>, long, long>")
    assert SPEC.config_of(readable.format(c=2), configs) == "bf16_swap_n64_4x2"
    assert SPEC.config_of(readable.format(c=1), configs) == "bf16_swap_n64"
    assert SPEC.config_of(readable.replace("C<4>", "C<1>").format(c=2), configs) == "bf16_swap_n64_1x2"


_HEAD = "_ZN7cutlass13device_kernelINS_4gemm6kernel13GemmUniversalIN4cute5tupleIJiiiEEENS1_10collective13CollectiveMmaINS1_"
_READABLE = ("void cutlass::device_kernel<cutlass::gemm::kernel::GemmUniversal<cute::tuple<int, int, int>, "
             "cutlass::gemm::collective::CollectiveMma<cutlass::gemm::MainloopSm90TmaGmmaWarpSpecialized<9, "
             "cute::tuple<cute::C<2>, cute::C<1>, cute::C<1> >, cutlass::gemm::KernelTmaWarpSpecialized{schedule}>, "
             "cute::tuple<cute::C<{m}>, cute::C<128>, cute::C<64> >, cutlass::half_t, "
             "cute::TiledMMA<cute::MMA_Atom<cute::SM90::GMMA::MMA_64x128x16_F32F16F16_SS<")


@pytest.mark.parametrize("name, want", [
    # mangled, shortened from the H100 builds' (as cuobjdump prints them without c++filt)
    (_HEAD + "KernelTmaWarpSpecializedCooperativeEEENS5_IJNSA_ILi256EEENSA_ILi128EEENSA_ILi64EEEEEENS_6half_tE", "fp16_wide"),
    (_HEAD + "KernelTmaWarpSpecializedPingpongEEENS5_IJNSA_ILi128EEESF_NSA_ILi64EEEEEENS_6half_tE", "fp16_large"),
    (_HEAD + "KernelTmaWarpSpecializedPingpongEEENS5_IJNSA_ILi64EEENSA_ILi128EEESF_EEENS_6half_tE", "fp16_n128_2x1"),
    (_HEAD + "KernelCpAsyncWarpSpecializedPingpongEEENS5_IJNSA_ILi64EEENSA_ILi128EEESF_EEENS_6half_tE", "fp16_n128_2x1"),
    # demangled, where c++filt takes the name
    (_READABLE.format(schedule="Pingpong", m=64), "fp16_n128_2x1"),
    (_READABLE.format(schedule="Pingpong", m=128), "fp16_large"),
    (_READABLE.format(schedule="Cooperative", m=256), "fp16_wide"),
    (_READABLE.format(schedule="Pingpong", m=96), None)])  # a tile no configuration has: unknown
def test_rank3_instances_with_a_64x128_atom_are_told_apart_by_the_tiles_m(name, want):
    """large, wide and n128_2x1 are rank-3 data-parallel instances with the same wgmma atom (and a
    2x1 cluster for large under cluster_2x1 as for n128_2x1); the tile after the kernel schedule
    differs: 128, 256 and 64 rows."""
    configs = [{"name": f"fp16_{c}"} for c in ("large", "wide", "n128_2x1")]
    assert SPEC.config_of(name + ("MMA_64x128x16_F32F16F16_SS" if name.startswith("_Z") else ""), configs) == want


# ---- the pool's speeds against the committed readings (tools/gemm_fit.py) -------------------

def test_the_committed_readings_name_builds_of_the_plugin_at_shapes_the_table_hands_to_the_pool():
    import json

    f = tool("gemm_fit")
    data = json.loads(f.READINGS.read_text())
    assert [s["name"] for s in data["sets"]] == ["probe", "random", "pool", "rerun", "eighth", "heldout"]
    every = [r for s in data["sets"] for r in s["readings"]]
    assert all(set(r["speeds"]) <= set(SPEC.CANDIDATES) and 0.1 < min(r["speeds"].values()) for r in every)
    readings = f.load([f.READINGS])
    assert len(readings) == 247 and all(f.to_pool(r["shape"]) for r in readings)
    assert not f.to_pool({"m": 64, "n": 4096, "k": 4096, "dtype": "fp16"})  # skinny's row, not the pool's


def test_choice_defs_pool_speeds_are_where_a_fit_to_the_committed_readings_stops(capsys):
    """The speeds in base/choice.def are the fit's: searched from them, the fit gains less than
    0.2% of score (it moves wide's, n320's, n160_coop's and n224's speeds by a step or two, for
    0.11%: choice.def keeps the ninth and tenth sessions', which read 0.972 of the best at the 24
    shapes measured after them, the set "heldout"). A pool edited without
    fitting again, or a wave model changed under it, fails here. Large's on-line speed stays at
    100 with nothing held: the unswizzled speed (85) is what pulled it down before."""
    f = tool("gemm_fit")
    readings = f.load([f.READINGS])
    pool = SPEC.pool_table()
    here = f.score(readings, pool)[0]
    fitted = f.fit(readings, pool, {})
    assert here > 0.99 and 0 <= f.score(readings, fitted)[0] - here < 0.002
    f.main(["--fit", "--holdout", "eighth"])  # the fit without a set, both pools scored on it after
    out = capsys.readouterr().out
    assert "over 234 readings" in out and "held out (eighth), choice.def's pool" in out and "held out (eighth), fitted" in out
    speeds = {name: numbers[4:] for name, *numbers in fitted}
    assert speeds["large"] == [70, 80, 100, 85] and speeds["wide"][3] == 95


def test_the_fit_tool_reads_the_candidates_tools_json_and_names_bad_arguments(tmp_path, capsys):
    import json

    f = tool("gemm_fit")
    out = {"r3000": {"shape": {"m": 3000, "n": 3000, "k": 1000, "dtype": "fp16"},
                     "vs_cublas": {"large": 0.52, "n320": 0.83, "chosen": 0.83, "wide": 0.73}}}
    path = tmp_path / "p.json"
    path.write_text(json.dumps(out))
    readings = f.load([path])
    assert readings == [{"set": "p.json", "shape": out["r3000"]["shape"], "speeds": {"large": 0.52, "n320": 0.83, "wide": 0.73}}]
    f.main(["--readings", str(path), "--drop", "n224"])
    assert "choice.def's pool (changed by --add/--drop): 1.000" in capsys.readouterr().out
    for argv, message in [(["--add", "n288"], r"--add 'n288': expected NAME=TMxTN/CMxCN"),
                          (["--add", "huge=1x1/1x1"], r"'huge' is not one of spec.CANDIDATES"),
                          (["--hold", "large:up=90"], r"the class must be one of off, half, on"),
                          (["--drop", "skinny"], r"--drop \['skinny'\]: not in the pool"),
                          (["--grid", "0"], r"--grid 0: must be 1-50"),
                          (["--holdout", "nope"], r"--holdout \['nope'\]: no such set \(p.json\)")]:
        with pytest.raises(SystemExit, match=message):
            f.main(["--readings", str(path), *argv])


def test_the_fit_tool_keeps_new_readings_as_a_named_set(tmp_path, monkeypatch, capsys):
    import json
    import shutil

    f = tool("gemm_fit")
    kept = tmp_path / "pool_readings.json"
    shutil.copy(f.READINGS, kept)
    monkeypatch.setattr(f, "READINGS", kept)
    new = tmp_path / "p.json"
    new.write_text(json.dumps({"r3000": {"shape": {"m": 3000, "n": 3000, "k": 1000, "dtype": "fp16"},
                                         "vs_cublas": {"large": 0.52, "n320": 0.83, "chosen": 0.83}}}))
    f.main(["--readings", str(kept), str(new), "--keep", "next", "--measured", "H100, 2026-11-28, abc1234"])
    assert "kept 1 readings as the set 'next'" in capsys.readouterr().out
    sets = json.loads(kept.read_text())["sets"]
    assert sets[-1]["name"] == "next" and sets[-1]["measured"] == "H100, 2026-11-28, abc1234"
    assert sets[-1]["readings"] == [{"name": "r3000", "shape": {"m": 3000, "n": 3000, "k": 1000, "dtype": "fp16"},
                                     "speeds": {"large": 0.52, "n320": 0.83}}]
    assert len(f.load([kept])) == 248
    with pytest.raises(SystemExit, match=r"--keep 'next': .* has a set of that name already"):
        f.main(["--readings", str(new), "--keep", "next", "--measured", "x"])
    # where the table's pick ran only as the base ("chosen"), its reading is the pick's
    table = tmp_path / "table_readings.json"
    table.write_text(json.dumps({"sets": []}))
    new.write_text(json.dumps({"d96": {"shape": {"m": 96, "n": 4096, "k": 4096, "dtype": "fp16"},
                                       "vs_cublas": {"swap_n96": 0.95, "chosen": 0.97}}}))
    assert f.keep("rows", "H100, 2026-11-28, abc1234", [new], table) == 1
    assert json.loads(table.read_text())["sets"][0]["readings"][0]["speeds"] == {"swap_n96": 0.95, "swap_n48_1x2": 0.97}
    with pytest.raises(SystemExit, match=r"--keep needs --measured"):
        f.main(["--readings", str(new), "--keep", "other"])


# The rows at m 449-768 the eighteenth session set (H200 readings, sets m449_*), and the ones they replaced.
M449_ROWS = """GEMM_CHOICE(skinny_n128, 448, 1024, 50, any)
GEMM_CHOICE(swap_n128, 448, 2048, 50, off_line)
GEMM_CHOICE(skinny_n128, 448, 2048, 50, on_line)
GEMM_CHOICE(skinny_n128, 512, 1024, 50, on_line)
GEMM_CHOICE(swap_n96, 480, 1536, 50, any)
GEMM_CHOICE(swap_n128, 480, 1792, 50, any)
GEMM_CHOICE(swap_n160, 480, 2048, 50, any)
GEMM_CHOICE(swap_n96, 512, 1280, 50, any)
GEMM_CHOICE(swap_n128, 512, 1792, 50, any)
GEMM_CHOICE(n128_2x1, 512, 2048, 50, any)
GEMM_CHOICE(swap_n96, 576, 1280, 50, any)
GEMM_CHOICE(swap_n128, 576, 1536, 50, any)
GEMM_CHOICE(swap_n160, 576, 1792, 50, any)
GEMM_CHOICE(swap_n128, 672, 1024, 50, on_line)
GEMM_CHOICE(swap_n96, 672, 1024, 50, any)
GEMM_CHOICE(swap_n128, 640, 1536, 50, any)
GEMM_CHOICE(swap_n160, 640, 1792, 50, any)
GEMM_CHOICE(swap_n96, 768, 768, 50, any)
GEMM_CHOICE(swap_n128, 768, 1280, 50, any)
GEMM_CHOICE(swap_n160, 768, 1536, 50, any)
"""
# The rows at m 449-768 the nineteenth session set before them: skinny on lines where its 64x64 tiles
# make one wave (the rule stated before its 16 random shapes, m449_skinny, were drawn).
SKINNY_ONE_WAVE = """GEMM_CHOICE(skinny, 512, 872, 50, on_line)
GEMM_CHOICE(skinny, 576, 872, 50, on_line)
GEMM_CHOICE(skinny, 640, 832, 50, on_line)
GEMM_CHOICE(skinny, 704, 768, 50, on_line)
GEMM_CHOICE(skinny, 768, 704, 50, on_line)
"""
# The rows at m 129-160 the twentieth session set (after swap_n160's to n = 7680, before its last row).
SWAP128_ROWS = """GEMM_CHOICE(swap128_n144, 144, 15360, 100, any)
GEMM_CHOICE(swap128_n160, 160, 15360, 100, any)
"""
# The twenty-first session's: the 128-row tile at m 25-64 past swap_n64's one wave (before its last
# row), and at m 97-128 past half a wave with rows on lines (before swap_n128's last rows there).
TALL_M64_ROWS = """GEMM_CHOICE(swap_n64, 64, 7680, 100, any)
GEMM_CHOICE(swap128_n64, 64, 15360, 100, any)
"""
TALL_M128_ROWS = ("GEMM_CHOICE(swap128_n128, 127, 15360, 100, any)\n", "GEMM_CHOICE(swap128_n128, 128, 15360, 100, any)\n")
BEFORE_M449 = """GEMM_CHOICE(skinny_n128, 512, 1024, 50, any)
GEMM_CHOICE(skinny_n128, 640, 640, 50, any)
GEMM_CHOICE(swap_n128, 512, 2048, 50, off_line)
GEMM_CHOICE(skinny_n128, 512, 2048, 50, on_line)
"""


def test_the_tables_own_rows_read_near_the_best_build_at_the_kept_readings(capsys):
    """choice.def's rows where they pick (m <= 256, or up to half a wave) against the kept
    readings of the builds they choose among (base/table_readings.json: the eleventh session's
    probe and four random sets, each random set drawn after the rows it checks were set, and the
    twelfth's two sets with the swapped configurations measured, the thirteenth's two with the
    narrow ones and a random set drawn after its rows): their pick reads 0.98 of the best build,
    every set that measured it ten times or more above 0.95, where the eleventh session's rows
    read 0.925 and 0.886 on the twelfth's sets and the twelfth's 0.900 and 0.874 on the
    thirteenth's probes. A row moved without measuring it fails here; so does a table of one
    configuration. The fourteenth session's two sets (why_points, pairs_1x2) and the fifteenth's
    (probe_1x2) measured shapes no row was set from (m 65-128 at n = 3200-4096, m 160-224 at
    n = 6144-12288, m 288-640 at n = 1024-2048): the rows set from them (the 1x2 clusters at
    n = 3585-4096, large at m 193-224 while its tiles make one wave, skinny at m 257-448)
    lift each of the three sets by 0.8% or more: under the fourteenth
    session's rows they read 0.942, 0.932 and 0.878, under the fifteenth's 0.963, 0.975 and 0.975. On 26
    random shapes drawn after those rows (random_1x2, and five grid shapes) the pick reads 0.986
    of the best build: 0.913 of cuBLAS where the old rows' builds read 0.828.
    The eighteenth session's rows at m 449-768 (M449_ROWS; an H200 probe, m449_probe, with two random
    sets, m449_random drawn before the rows and m449_fresh after) lift its three sets from 0.82,
    0.82 and 0.79 to 0.980, 0.952 and 0.960 and lose nothing on the H100's sets there (why_points
    0.963 -> 0.988, random_1x2 0.986 -> 0.995). The nineteenth session's skinny rows before them
    (SKINNY_ONE_WAVE) lift the 16 random shapes drawn to test them (m449_skinny, H200) from 0.870
    to 0.957 and the three m449 sets by 0.7-2.7%, and leave every H100 set as it was. The twentieth
    session's rows at m 129-160 past n = 7680 (SWAP128_ROWS) lift the probe they were found at and
    the 16 random shapes drawn after they were stated (s128_probe, s128_held, H200) from 0.916 and
    0.934 to 1.000. The twenty-first session's at m 25-64 and 97-128 (TALL_M64_ROWS, TALL_M128_ROWS)
    lift theirs (t128_probe, t128_held, H200) from 0.968 and 0.891 to 0.993 and 0.981."""
    f = tool("gemm_fit")
    readings = f.load([f.TABLE_READINGS], pool=False)
    assert len(readings) == 617 and not any(f.to_pool(r["shape"]) for r in readings)
    by_set, total, _ = f.table_score(readings)
    unset = ("why_points", "pairs_1x2", "probe_1x2")  # measured where no row was set from (docstring)
    assert total > 0.975 and sorted(by_set) == ["m449_fresh", "m449_probe", "m449_random", "m449_skinny", "narrow_cliff", "narrow_low_wave",
                                                 "narrow_m24", "narrow_random", "pairs_1x2",
                                                 "probe", "probe_1x2", "random1", "random2", "random3", "random4", "random_1x2", "s128_held", "s128_probe", "swap_probe",
                                                 "swap_random", "t128_held", "t128_probe", "why_points"]
    # each set where the pick was measured at ten readings or more (the probe set measured none
    # of the swapped ones that now pick at 28 of its 32 shapes)
    # (swap_probe reads 0.972 since its on-line readings at m 225-256 past half a wave went to
    # the wave model's row, where the pool's readings score it)
    assert all(mean > 0.95 for name, (mean, n) in by_set.items() if n >= 10)
    text = SPEC.CHOICE_FILE.read_text()
    assert SKINNY_ONE_WAVE + "GEMM_CHOICE(skinny_n128, 512, 1024, 50, on_line)\n" in text  # ahead of M449_ROWS' exception
    eighteenth = text.replace(SKINNY_ONE_WAVE, "")
    without_skinny = f.table_score(readings, eighteenth)[0]
    assert by_set["m449_skinny"][0] > without_skinny["m449_skinny"][0] + 0.08, without_skinny
    assert all(by_set[name][0] > without_skinny[name][0] + 0.005 for name in ("m449_probe", "m449_random", "m449_fresh"))
    assert all(by_set[name][0] >= without_skinny[name][0] - 0.001 for name in by_set if not name.startswith("m449")), without_skinny
    assert M449_ROWS in eighteenth
    fifteenth = eighteenth.replace(M449_ROWS, BEFORE_M449)
    fifteenth_score = f.table_score(readings, fifteenth)[0]
    assert all(by_set[name][0] > fifteenth_score[name][0] + 0.1 for name in ("m449_probe", "m449_random", "m449_fresh")), fifteenth_score
    assert all(by_set[name][0] >= fifteenth_score[name][0] - 0.001 for name in (*unset, "random_1x2")), fifteenth_score
    for rows in (["GEMM_CHOICE(n128_2x1, 128, 0, 50, any)\n"],  # the band (the fourteenth session)
                 ["GEMM_CHOICE(large, 224, 8448, 100, on_line)\n"],
                 ["GEMM_CHOICE(skinny, 448, 1024, 50, on_line)\n"]):
        without = f.table_score(readings, "".join(line for line in text.splitlines(keepends=True) if line not in rows))[0]
        assert sum(without[name][0] < by_set[name][0] - 0.004 for name in unset) >= 2, rows
    old = fifteenth.replace("GEMM_CHOICE(n128_2x1, 128, 0, 50, any)\n", "").replace(
        "GEMM_CHOICE(large, 224, 8448, 100, on_line)\n", "").replace(
        "GEMM_CHOICE(skinny, 448, 1024, 50, on_line)\n", "").replace(
        "GEMM_CHOICE(swap_n128, 512, 2048, 50, off_line)\nGEMM_CHOICE(skinny_n128, 512, 2048, 50, on_line)\n", "").replace(
        "GEMM_CHOICE(swap_n48_1x2, 96, 0, 24, on_line)\nGEMM_CHOICE(swap_n64_1x2, 128, 0, 24, on_line)\n", "")
    before = f.table_score(readings, old)[0]
    assert all(fifteenth_score[name][0] > before[name][0] + 0.008 for name in unset), (before, fifteenth_score)
    # the twentieth session's rows at m 129-160 past n = 7680: the 128-row swapped tile lifts the probe it
    # was found at and the 16 random shapes drawn to test it (H200) from 0.916 and 0.934 to the best of
    # the builds measured, and changes no other set's pick (swap_probe and swap_random measured swap_n160, not
    # the new tile, at the four and two of their shapes the rows now give it: those readings drop out)
    assert SWAP128_ROWS in text
    without_swap128 = f.table_score(readings, text.replace(SWAP128_ROWS, ""))[0]
    assert all(by_set[name][0] > without_swap128[name][0] + 0.05 for name in ("s128_probe", "s128_held")), without_swap128
    assert all(by_set[name] == without_swap128[name] for name in by_set if name not in ("s128_probe", "s128_held", "swap_probe",
                                                                                        "swap_random")), without_swap128
    # the twenty-first session's rows past the 64-row tiles' one wave: the 128-row tile lifts its probe and
    # the 16 random shapes drawn after the rows were stated (H200); elsewhere only readings of the
    # H100's sets (swap_probe, swap_random, pairs_1x2) that measured the 64-row tiles alone drop out
    assert TALL_M64_ROWS in text and all(row in text for row in TALL_M128_ROWS)
    short = text.replace(TALL_M64_ROWS, "").replace(TALL_M128_ROWS[0], "").replace(TALL_M128_ROWS[1], "")
    without_tall = f.table_score(readings, short)[0]
    assert all(by_set[name][0] > without_tall[name][0] + 0.02 for name in ("t128_probe", "t128_held")), without_tall
    assert all(by_set[name] == without_tall[name] for name in by_set if name not in ("t128_probe", "t128_held", "swap_probe",
                                                                                     "swap_random", "pairs_1x2")), without_tall
    without = text.replace("GEMM_CHOICE(swap_n160, 160, 7680, 100, any)\n" + SWAP128_ROWS, "").replace(
        "GEMM_CHOICE(swap_n160, 160, 0, 100, any)\n", "")
    # the rows taken out: m 129-160 to skinny_n128, on the two sets swap_n160's row was set from
    assert all(f.table_score(readings, without)[0][name][0] < by_set[name][0] - 0.008 for name in ("swap_probe", "swap_random"))
    for row in ("GEMM_CHOICE(swap_n32_4x1, 24, 0, 45, any)\n", "GEMM_CHOICE(swap_n64_4x2, 128, 3584, 100, any)\n",
                "GEMM_CHOICE(swap_n48_1x2, 96, 0, 24, on_line)\n", "GEMM_CHOICE(swap_n64_1x2, 128, 0, 24, on_line)\n"):
        assert f.table_score(readings, text.replace(row, ""))[1] < total - 0.0002, row
    one = "GEMM_CHOICE(skinny, 0, 0, 100, any)\n" + "".join(
        line + "\n" for line in SPEC.CHOICE_FILE.read_text().splitlines() if line.startswith("GEMM_POOL("))
    assert f.table_score(readings, one)[1] < 0.9
    f.main(["--table"])
    assert "random4" in capsys.readouterr().out
    with pytest.raises(SystemExit, match="--choice"):
        f.main(["--table", "--choice", "no/such/choice.def"])


def test_the_gpu_tests_cases_are_shapes_the_kernel_takes():
    """tests/test_cutlass_gemm_gpu.py's CASES run only on a GPU; a case the kernel refuses (n or k
    not a multiple of 8) fails every pathology's test there, so it is caught here, on the CPU, too."""
    from pathlib import Path

    module = module_at(Path(__file__).with_name("test_cutlass_gemm_gpu.py"), "cutlass_gemm_gpu_cases")
    for m, n, k in module.CASES:
        for dtype in ("fp16", "bf16"):
            SPEC.validate_shape({"m": m, "n": n, "k": k, "dtype": dtype})
