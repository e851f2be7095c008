"""The CUTLASS GEMM's spec: d = a b^T on Hopper, built from CUTLASS 3.x's collective builders.

a is (m, k), b is (n, k) (an nn.Linear weight: both operands K-major, the layout Hopper's
TMA and wgmma take without a transpose), d is (m, n); all FP16 or all BF16, FP32
accumulation. A thin spec (ablate/job/plugins.py): the C ABI is base/ablate_gemm.h's
prototype. CUTLASS is the `nvidia-cutlass` package's headers, found where it is installed
(INCLUDE_DIRS). The peer is torch.matmul (cuBLAS/cuBLASLt) on the same tensors.
"""
import importlib.util
import re
from pathlib import Path

SOURCE = "base/cutlass_gemm.cu"
SYMBOL = "ablate_cutlass_gemm"
ARCH = "sm_90a"  # wgmma, TMA multicast and setmaxnreg: the H100/H200 chip only
DTYPES = {"fp16": 0, "bf16": 1}  # the ABI's dtype codes
WORK = "fp16_tensor"
PARAMS = {"dtype": lambda shape: DTYPES[shape["dtype"]]}
ALIGN = 8  # elements per 16 bytes: TMA needs 16-byte aligned row strides (k for a and b, n for d)
SMS = 132  # the SM count spec.choice assumes (H100 SXM, H200); the kernel reads its GPU's own

# CUTLASS's headers want these (its own CMake passes them): constexpr host functions called in
# device code, and its debug asserts off.
FLAGS = ["--expt-relaxed-constexpr", "-DNDEBUG"]


def INCLUDE_DIRS():
    """CUTLASS's and CuTe's headers, from the installed nvidia-cutlass wheel (its Python
    package is cutlass_library; the headers lie in its source/include)."""
    found = importlib.util.find_spec("cutlass_library")
    if found is None or not found.submodule_search_locations:
        raise RuntimeError("the nvidia-cutlass package is not installed (pip install nvidia-cutlass): "
                           "the kernel is built from its CUTLASS headers")
    include = Path(next(iter(found.submodule_search_locations))) / "source" / "include"
    if not (include / "cutlass" / "cutlass.h").is_file():
        raise RuntimeError(f"the nvidia-cutlass package has no CUTLASS headers at {include}")
    return [include]


def _multiple_of_align(field):
    def check(value):
        if isinstance(value, bool) or not isinstance(value, int) or not 1 <= value <= 2**31 - 1:
            raise ValueError(f"{field} must be an integer >= 1, got {value!r}")
        if value % ALIGN:
            raise ValueError(f"{field}={value}: must be a multiple of {ALIGN} (TMA needs 16-byte aligned "
                             f"rows of FP16/BF16); the kernel refuses other {field}")
        return value
    return check


SHAPE = {"m": range(1, 2**31), "n": _multiple_of_align("n"), "k": _multiple_of_align("k"),
         "dtype": tuple(DTYPES)}
TENSORS = {"a": ("in", "m, k", "dtype"), "b": ("in", "n, k", "dtype"), "d": ("out", "m, n", "dtype")}
FLOPS = "2 * m * n * k"


def tolerance(shape):
    """||d - ref|| / ||ref|| against an FP64 product: the output's rounding (unit roundoff
    2^-11 for FP16, 2^-8 for BF16; norm-wise about half of it) with room for FP32 sums over k."""
    return 2e-3 if shape["dtype"] == "fp16" else 8e-3


def reference(inputs, shape):
    return inputs["a"].double() @ inputs["b"].double().t()


def label(shape):
    return f"m={shape['m']} n={shape['n']} k={shape['k']} {shape['dtype']}"


# The small shapes compute-sanitizer runs every variant on: each configuration of the table
# (base/choice.def; tests/test_cutlass_gemm.py holds that every one is reached) with m, n, k off
# every tile size (odd m; n, k multiples of 8 only): swap_n32_4x1 (m = 9 of its tile's 32 columns)
# in FP16 at n = 264 (five 64-row tiles of the weight, the grid padded to 8 by the 4x1 cluster)
# and in BF16 at n = 4360 (69 tiles, 25%), swap_n64 (m = 37, n = 200: four 64-row tiles, one 4x1
# cluster, 8 of the last tile's rows inside n) with a long k, swap_n96 (m = 133, n = 1352: two
# tiles of 96 columns, the second 37 of them inside m), swap_n64 at m = 245 (four tiles of 64
# columns; n = 1000, rows on 128-byte lines, k = 320), swap_n128 at m = 200 (n = 2200, k = 320) in
# both dtypes; with rows off lines (k = 328), swap_n64_4x2 (m = 83, n = 2072: 33 tiles of the
# weight padded to 36, two of m's, the second 19 of its 64 columns inside m), swap_n128 at m = 331
# (n = 1416: three tiles of 128 columns, the third 75 of them inside m), large (m = 1289, n = 1416:
# 132 tiles, one whole wave), n128_2x1 (m = 777, n = 1000: 13 rows of
# 64-row tiles, the last cluster half outside m), swap_n128 (m = 100, n = 4360: 69 tiles padded to
# 72, 100 of the tile's 128 columns inside m), n160_coop (m = 641, n = 2824: 6 x 18 tiles of
# 128x160), wide (m = 777, n = 4000), n320 (m = 777, n = 5000) and n224 (m = 1677, n = 1288: 14 x 6
# tiles of 128x224, 13 of the last tile row's 128 rows inside m); with rows on lines (k = 320),
# n192_1x2 (m = 1665, n = 1288: 14 x 7 tiles of 128x192, the last cluster half outside n) and large
# at a whole wave; skinny_n128 at m = 13, n = 8200 in BF16 (49% of a wave, where swap_n32_4x1's
# clusters of four would pass the 30 the H100 holds at once), skinny at m = 128, n = 4104 (33 tiles, 25%),
# swap_n160 at m = 133, n = 4104 (65 tiles of the weight padded to 68); with rows on lines (k = 320),
# swap_n48_1x2 in BF16 at m = 77, n = 3720 (two tiles of 48 columns on a 1x2 cluster, the second 29 of
# them inside m; 59 tiles of the weight, 8 of the last one's rows inside n) and swap_n64_1x2 at m = 113,
# n = 4040 (two tiles of 64 columns, the second 49 inside m; 64 tiles of the weight). At m 449-768
# (rows off lines, k = 328): swap_n160 at m = 705, n = 1288 in BF16 (five tiles of 160 columns, the
# fifth 65 of them inside m; 21 tiles of the weight padded to 24) and swap_n96 at m = 745, n = 584
# (eight tiles of 96 columns, the eighth 73 inside m; 10 of the weight padded to 12); with rows on
# lines (k = 320), skinny in BF16 at m = 684, n = 568 (11 x 9 tiles of 64x64, the last tile row 44
# rows inside m, the last column 56 inside n); swap128_n144 in FP16 at m = 137, n = 8712 (69 tiles
# 128 rows of the weight tall, the last 8 rows inside n; m 7 columns short of the tile's 144) and
# swap128_n160 in BF16 at m = 153, n = 7752 (61 tiles, the last 72 rows inside n); swap128_n64 in
# BF16 at m = 45, n = 8200 (rows off lines; 65 tiles, the last 8 rows inside n) and swap128_n128 in
# BF16 at m = 117, n = 9224 (73 tiles, the last 8 rows inside n), m short of each tile's columns.
SANITIZE_SHAPES = [{"m": 9, "n": 264, "k": 1032, "dtype": "fp16"},
                   {"m": 9, "n": 4360, "k": 1032, "dtype": "bf16"},
                   {"m": 37, "n": 200, "k": 1032, "dtype": "fp16"},
                   {"m": 133, "n": 1352, "k": 1032, "dtype": "fp16"},
                   {"m": 245, "n": 1000, "k": 320, "dtype": "fp16"},
                   {"m": 83, "n": 2072, "k": 328, "dtype": "bf16"},
                   {"m": 200, "n": 2200, "k": 320, "dtype": "fp16"},
                   {"m": 200, "n": 2200, "k": 320, "dtype": "bf16"},
                   {"m": 331, "n": 1416, "k": 328, "dtype": "bf16"},
                   {"m": 777, "n": 1000, "k": 328, "dtype": "fp16"},
                   {"m": 100, "n": 4360, "k": 328, "dtype": "bf16"},
                   {"m": 641, "n": 2824, "k": 328, "dtype": "bf16"},
                   {"m": 1289, "n": 1416, "k": 328, "dtype": "fp16"},
                   {"m": 777, "n": 4000, "k": 328, "dtype": "bf16"},
                   {"m": 777, "n": 5000, "k": 328, "dtype": "fp16"},
                   {"m": 1677, "n": 1288, "k": 328, "dtype": "bf16"},
                   {"m": 1665, "n": 1288, "k": 320, "dtype": "bf16"},
                   {"m": 1289, "n": 1416, "k": 320, "dtype": "fp16"},
                   {"m": 13, "n": 8200, "k": 1032, "dtype": "bf16"},
                   {"m": 128, "n": 4104, "k": 328, "dtype": "fp16"},
                   {"m": 133, "n": 4104, "k": 1032, "dtype": "fp16"},
                   {"m": 77, "n": 3720, "k": 320, "dtype": "bf16"},
                   {"m": 113, "n": 4040, "k": 320, "dtype": "fp16"},
                   {"m": 705, "n": 1288, "k": 328, "dtype": "bf16"},
                   {"m": 745, "n": 584, "k": 328, "dtype": "fp16"},
                   {"m": 684, "n": 568, "k": 320, "dtype": "bf16"},
                   {"m": 137, "n": 8712, "k": 328, "dtype": "fp16"},
                   {"m": 153, "n": 7752, "k": 320, "dtype": "bf16"},
                   {"m": 45, "n": 8200, "k": 328, "dtype": "bf16"},
                   {"m": 117, "n": 9224, "k": 320, "dtype": "bf16"}]


def _matmul(shape):
    import torch

    def run(inputs):  # into the kernel's own output tensor: no allocation, as the kernel has none
        torch.matmul(inputs["a"], inputs["b"].t(), out=inputs["d"])
    return run


PEERS = {"torch_matmul": _matmul}


# ---- which configuration a shape runs --------------------------------------------------------
# base/choice.def is the table (the kernel compiles it into its dispatch); choice() reads it.
# CANDIDATES: every configuration base/cutlass_gemm.cu defines, by the index a tuning build
# forces (-DABLATE_GEMM_FORCE=<index>: that one alone, at every shape; tools/gemm_candidates.py
# times each against cuBLAS). The table may name any of them; the base compiles those it names
# and those of its pool (GEMM_POOL: what the `fastest` row chooses among).
# Measured and left out of the table (docs/benchmarks.md, "The fourth session"): large_1x2 and
# large_2x2 (large's tile on clusters: 0.54-0.57 of cuBLAS where rows are off lines at k ~ 1000,
# 0.87-0.92 at the large shapes), n192 (no cluster: 1.05-1.09 at m = 3072 with k = 1024 and 1056,
# where large reads 0.85-0.97, but 0.90-0.92 at the large shapes) and n192_2x1 (B multicast:
# 0.77-0.98 at m = 1500 and 6000, 0.27-0.33 at m = 777; it would compile to n192_1x2's kernel
# under cp_async, where no cluster multicasts, and the two could not be told apart), swap_n16
# and swap_n32 (d^T = b a^T, Operands::ba, as cuBLAS's kernels at m <= 64: 64x16 and 64x32 tiles
# on 1x2 clusters multicasting the weight; 0.76 and 0.63 of cuBLAS at m = 32, where skinny reads
# 0.85: 128 blocks as cuBLAS's, but twice its L2 sectors, DRAM at 48% of its peak against 62%;
# "The fifth session"), and n144 (ping-pong 128x144, no cluster: one wave of 132 tiles at
# m = 1500, n = 1496, as cuBLAS's 128x136 makes; 0.44 there against wide's 0.60 and large's 0.47,
# with CuTe's 64x144 wgmma; its epilogue works in 16-column pieces where the others' take 32; under
# the swizzle of 8 the base had then), and n160 (n160_coop's tile under ping-pong: within 3% of it, a little
# below; "The seventh session"), streamk_n64 (the row at m = 129-256 above 25% until the sixth session:
# 0.35-0.96 there, below skinny_n128 or large at every shape measured, but at decode_m256_n4k in
# the five processes of thirteen where skinny_n128 read 0.81-0.92; 0.31-0.92 at m = 384-1024)
# and streamk (its fix-up costs more than the idle SMs it fills: base/choice.def); n288
# (cooperative 128x288 on a 2x1 cluster, two 64x144 atoms, 48-column epilogue pieces: two waves of
# tiles at m = n = 3000 where n320 takes two of larger ones, yet 0.820 there against n320's 0.825)
# and n176_coop (128x176 on a 1x2 cluster): in the pool beside n224 they lifted the wave model's
# pick by 0.2-0.6% of the best candidate's speed over 101 shapes ("The ninth session").
# Of the swapped ones with the tile's N fitted to m on a 4x1 cluster (the twelfth session), four
# entered the table (swap_n64, swap_n96, swap_n128, swap_n160); swap_n80 (1-2% above swap_n96 at
# m 65-80), swap_n192 (above skinny_n128 at half the on-line shapes of m 161-192), swap_n96_2x1 and
# swap128_n96 (a 2x1 cluster; 128-row tiles: 5-18% above swap_n96 at k near 1000) stay out: each
# configuration the table names compiles into every build of the base and its pathologies.
# Of the thirteenth session's (narrower tiles of m, for few tiles of the weight), swap_n32_4x1 and
# swap_n64_4x2 entered the table, skinny_splitk left it; swap_n48 (64x48 on 4x1: 1-4% above
# swap_n64 at m = 72 and 150, n <= 2040) stays out. 64x40 and 64x56 tiles on a 4x2 cluster (cuBLAS's
# at m = 200 and 100, n = 1000-2040) do not compile: a static assertion of CuTe's ("Stride
# Divisibility Condition") in the mainloop's parameters, with nvcc 13.0; why was not looked into.
# The fourteenth session's tuning builds, the swapped tile on a 1x2 cluster (the weight's tile
# multicast to two column tiles of m, cuBLAS's form at m = 96 and 512: nvjet 64x48 and 64x64 1x2
# _TNT): swap_n48_1x2 read 0.967-0.983 at m = 72-96, n = 4096 where swap_n96 reads 0.942-0.953, and
# swap_n64_1x2 0.979 at m = 112, n = 4096 (swap_n128 0.915); the fifteenth session put both in the
# table (m 65-128, n 3585-4096, rows on lines: base/choice.def). swap_n128_1x2 (0.87-0.89 at m = 512,
# n = 2048, where the row's skinny_n128 reads 0.64-0.73) and swap_n96_2x1 (0.89-0.95 at m 65-96,
# 46-50% of a wave with rows off lines, where swap_n96 reads 0.78-0.83; 0.81-0.83 past 50%) stay out:
# one shape, and a band of rows off lines that models' k (a multiple of 64) does not make.
# skinny_1x2 and skinny_2x1 (the seventeenth session: skinny's 64x64 on 1x2 and 2x1 clusters, one
# operand multicast, for prefill_m512_n1k, where skinny's 128 blocks lose to cuBLAS by a rate per k,
# not a cost per launch): 0.819 and 0.830 there against skinny's 0.802 and swap_n96's 0.867 (H200);
# 0.878 at m = 512, n = 1024, k = 2048 (skinny_n128 0.747), but 0.58-0.86 where skinny reads 0.90-1.11
# at m 305-448; under ncu skinny_2x1 made more L2 requests than skinny, not fewer (the nineteenth
# session: 35% more sectors at m = 512, n = 1024, k = 4096, where cuBLAS's kernel of the same tile,
# stages and cluster reads 11-13% fewer, and free of ncu's clock lock time follows sectors). They stay out.
# swap128_n144 and swap128_n160 (the twentieth session, H200: the swapped tile 128 rows of n tall,
# cooperative, 4x1 clusters) for m 129-160 where swap_n160's clusters of four do not fit one wave
# (n > 7680) and theirs do (n <= 15360): the rule stated before 16 random shapes were drawn, the
# pick read 0.80-1.22 of cuBLAS where swap_n160 reads 0.72-1.07, the best of the three builds at 16
# of 16 (docs/benchmarks.md). base/choice.def's rows name them since the twenty-first session,
# after the GPU tests and compute-sanitizer ran over them (H200).
# swap128_n128, swap128_n192, swap128_n64 (the same tall tile at other m) and swap_n160_splitk,
# swap128_n160_splitk (the swapped tiles with k split over the batch mode, as skinny_splitk) are the
# twenty-first session's (base/cutlass_gemm.cu cites what each read).

CANDIDATES = {"large": 1, "skinny": 2, "streamk": 3, "skinny_n32": 4, "skinny_n128": 5, "streamk_n64": 6,
              "wide": 7, "large_1x2": 8, "large_2x2": 9, "n192": 10, "n192_1x2": 11, "n192_2x1": 12,
              "skinny_splitk": 13, "swap_n16": 14, "swap_n32": 15, "n144": 16, "n128_2x1": 17,
              "n320": 18, "n160": 19, "n160_coop": 20, "n288": 21, "n224": 22,
              "n176_coop": 23, "swap_n64": 24, "swap_n80": 25, "swap_n96": 26, "swap_n128": 27,
              "swap_n160": 28, "swap_n192": 29, "swap_n96_2x1": 30, "swap128_n96": 31,
              "swap_n32_4x1": 32, "swap_n48": 33, "swap_n64_4x2": 34,
              "swap_n48_1x2": 35, "swap_n64_1x2": 36, "swap_n128_1x2": 37,
              "skinny_1x2": 38, "skinny_2x1": 39,
              "swap128_n160": 40, "swap128_n144": 41, "swap128_n128": 42, "swap128_n192": 43,
              "swap128_n64": 44, "swap_n160_splitk": 45, "swap128_n160_splitk": 46}
# The memory one compile of base/cutlass_gemm.cu takes at its peak, for ablate.build.compile's cap
# on compiles at once: the table's configurations, all in one translation unit, grow it. Measured
# alone on a machine like CI's (2 cores, 23 GiB; `/usr/bin/time -v`, maximum resident set, the
# branch swap128-more's table, 2026-11-29): 12.8 GiB in FP16 alone (tests/conftest.py's narrowed
# build, 3 min 9 s) and 13.6 GiB in both types (3 min 47 s); two at once on that machine crawled for
# an hour.
BUILD_MEMORY_GIB = 14
FORCE_MACRO = "ABLATE_GEMM_FORCE"
CHOICE_FILE = Path(__file__).parent / "base" / "choice.def"
ROWS = ("any", "off_line", "on_line")  # the table's rows column (base/cutlass_gemm.cu's Rows)
_ROW = re.compile(r"^GEMM_CHOICE\((\w+),\s*(\d+),\s*(\d+),\s*(\d+),\s*(\w+)\)[ \t]*$", re.M)
_POOL = re.compile(r"^GEMM_POOL\((\w+)((?:,\s*\d+){8})\)[ \t]*$")
FASTEST = "fastest"  # a row's configuration chosen by the wave model among the pool (base/choice.def)
# The seams each configuration takes (base/cutlass_gemm.cu's Candidate): large all, the others
# have their own tile, cluster and schedule. A pathology whose seam does not reach the
# configuration a shape runs is not applicable at that shape (not_applicable).
SEAMS = ("schedule", "mainloop", "cluster", "stages", "tile", "epilogue", "raster")
SEAMS_OF = {name: SEAMS if name == "large" else ("mainloop", "stages", "epilogue", "raster")
            for name in CANDIDATES}


def _matched_rows(text, macro, pattern, usage):
    """(line, match) of each `macro` row of base/choice.def (or of `text`); ValueError naming the
    file and a row `pattern` cannot read."""
    text = CHOICE_FILE.read_text() if text is None else text
    for line in text.splitlines():
        if line.startswith(macro):
            if (match := pattern.match(line)) is None:
                raise ValueError(f"{CHOICE_FILE}: cannot read the row {line!r} ({usage})")
            yield line, match


def choice_table(text=None):
    """[(configuration, m at most or 0, n at most or 0, wave efficiency at most in %, rows)] of
    base/choice.def (or of `text`); ValueError naming the file and the row at fault."""
    rows = []
    for line, match in _matched_rows(text, "GEMM_CHOICE", _ROW, "GEMM_CHOICE(name, max_m, max_n, max_efficiency, rows)"):
        name, lines = match.group(1), match.group(5)
        max_m, max_n, efficiency = (int(match.group(i)) for i in (2, 3, 4))
        if name not in CANDIDATES and name != FASTEST:
            raise ValueError(f"{CHOICE_FILE}: row {line!r} names {name!r}, not one of {', '.join(CANDIDATES)} "
                             f"or {FASTEST}")
        if lines not in ROWS:
            raise ValueError(f"{CHOICE_FILE}: row {line!r}: rows must be one of {', '.join(ROWS)}, got {lines!r}")
        rows.append((name, max_m, max_n, efficiency, lines))
    if not rows or rows[-1][1:] != (0, 0, 100, "any"):
        raise ValueError(f"{CHOICE_FILE}: the last row must hold at every shape (GEMM_CHOICE(name, 0, 0, 100, any)), "
                         f"got {rows[-1] if rows else 'no rows'}")
    if any(name == FASTEST for name, *_ in rows) and not pool_table(text):
        raise ValueError(f"{CHOICE_FILE}: a row names {FASTEST} but no GEMM_POOL row says what it chooses among")
    return rows


def pool_table(text=None):
    """[(configuration, tile M, tile N, cluster M, cluster N, speed %: rows off 64-byte half-lines,
    on a half-line but off a 128-byte line, on a line, on a line where the base's raster leaves
    the tiles unswizzled)] of base/choice.def's GEMM_POOL rows (or of `text`): what `fastest`
    chooses among."""
    pool = []
    usage = ("GEMM_POOL(name, tile_m, tile_n, cluster_m, cluster_n, speed_off, speed_half, speed_on, "
             "speed_on_unswizzled)")
    for line, match in _matched_rows(text, "GEMM_POOL", _POOL, usage):
        name, numbers = match.group(1), [int(x) for x in match.group(2).split(",")[1:]]
        if name not in CANDIDATES:
            raise ValueError(f"{CHOICE_FILE}: row {line!r} names {name!r}, not one of {', '.join(CANDIDATES)}")
        if min(numbers) < 1:
            raise ValueError(f"{CHOICE_FILE}: row {line!r}: tiles, clusters and speeds must be at least 1")
        pool.append((name, *numbers))
    return pool


def configurations(text=None):
    """The configurations the base compiles: those the table's rows name and the pool's."""
    text = CHOICE_FILE.read_text() if text is None else text
    names = [name for name, *_ in choice_table(text) if name != FASTEST] + [name for name, *_ in pool_table(text)]
    return list(dict.fromkeys(names))


def wave_efficiency(m, n, sms=SMS):
    """floor(100 * tiles / (waves * sms)) of 128x128 output tiles, the last wave counted whole
    (base/cutlass_gemm.cu's wave_efficiency)."""
    tiles = -(-m // 128) * -(-n // 128)
    waves = -(-tiles // sms)
    return tiles * 100 // (waves * sms)


def row_class(k):
    """0, 1 or 2: A's and B's rows (k elements of 2 bytes) start off 64-byte half-lines, on a
    half-line but off a 128-byte line, on a line (the pool's speeds by class: fastest)."""
    row_bytes = k * 2
    return 2 if row_bytes % 128 == 0 else 1 if row_bytes % 64 == 0 else 0


def off_line(k):
    """Whether A's and B's rows (k elements of 2 bytes) start off 128-byte lines (base/cutlass_gemm.cu's off_line)."""
    return k * 2 % 128 != 0


def _log_swizzle(blocks_m, blocks_n, max_swizzle):
    """CUTLASS's PersistentTileSchedulerSm90Params::get_log_swizzle_size."""
    shorter = min(blocks_m, blocks_n)
    return (3 if max_swizzle >= 8 and shorter >= 6 else 2 if max_swizzle >= 4 and shorter >= 3
            else 1 if max_swizzle >= 2 and shorter >= 2 else 0)


def fitted_swizzle(tiles_m, tiles_n, cluster_m, cluster_n):
    """The swizzle the base's raster (base/seams.cuh: Fitted) runs a grid of tiles_m x tiles_n
    output tiles under: the largest allowed (8, 4, 2, 1) that launches no padded tile, as
    CUTLASS's scheduler then takes it (1: the tiles walked unswizzled)."""
    blocks_m, blocks_n = -(-tiles_m // cluster_m) * cluster_m, -(-tiles_n // cluster_n) * cluster_n

    def launched(most):
        s = 1 << _log_swizzle(blocks_m, blocks_n, most)
        return -(-blocks_m // (s * cluster_m)) * s * cluster_m * (-(-blocks_n // (s * cluster_n)) * s * cluster_n)
    most = 8
    while most > 1 and launched(most) > launched(1):
        most //= 2
    return 1 << _log_swizzle(blocks_m, blocks_n, most)


def fastest(shape, sms=SMS, pool=None):
    """The pool's configuration whose waves of tiles take least time at `shape`: tiles of
    ceil(m / tile M) x ceil(n / tile N), each side rounded up to the cluster's, run in waves of
    `sms`, a wave taking tile M x tile N / speed, the speed by where A's and B's rows of k * 2
    bytes start (off 64-byte half-lines, on one but off a 128-byte line, on a line, and there by
    whether the base's raster swizzles the tiles: fitted_swizzle); the first of equals
    (base/cutlass_gemm.cu's fastest_config, which compares the same fractions)."""
    m, n, rows_class = shape["m"], shape["n"], row_class(shape["k"])
    best = None
    for name, tile_m, tile_n, cluster_m, cluster_n, *speeds in pool_table() if pool is None else pool:
        rows, cols = -(-m // tile_m), -(-n // tile_n)
        tiles = -(-rows // cluster_m) * cluster_m * (-(-cols // cluster_n) * cluster_n)
        work = -(-tiles // sms) * tile_m * tile_n
        speed = speeds[rows_class]
        if rows_class == 2 and fitted_swizzle(rows, cols, cluster_m, cluster_n) == 1:
            speed = speeds[3]
        if best is None or work * best[2] < best[1] * speed:
            best = (name, work, speed)
    return best[0]


def choice(shape, sms=SMS, table=None, pool=None):
    """The configuration `shape` runs on a GPU of `sms` SMs: the first row of the table whose
    bounds hold (m at most max_m and n at most max_n, 0 for any; the wave efficiency at most
    max_efficiency; rows off 128-byte lines where the row says off_line, on them where it says
    on_line); a row naming `fastest`
    gives the pool's pick."""
    m, n, off = shape["m"], shape["n"], off_line(shape["k"])
    efficiency = wave_efficiency(m, n, sms)
    text = CHOICE_FILE.read_text() if table is None or pool is None else None  # read once for both
    for name, max_m, max_n, max_efficiency, rows in choice_table(text) if table is None else table:
        if ((max_m == 0 or m <= max_m) and (max_n == 0 or n <= max_n) and efficiency <= max_efficiency
                and (rows == "any" or (rows == "off_line") == off)):
            return fastest(shape, sms, pool_table(text) if pool is None else pool) if name == FASTEST else name
    raise ValueError(f"{CHOICE_FILE}: no row holds at {label(shape)}")


def _seam(pathology):
    path = Path(__file__).parent / "conf" / "pathology" / f"{pathology}.yaml"
    if not path.is_file():
        return None  # a generic pathology: it changes the whole build or launch, every configuration
    import yaml
    return (yaml.safe_load(path.read_text()).get(pathology) or {}).get("seam")


def not_applicable(pathology, shape):
    """Why `pathology` does not apply at `shape`: its seam does not reach the configuration the
    shape runs (that configuration's code is the base's); None where it applies. (A build whose
    instance cannot launch at all, as no_launch_bounds' n192_1x2 with 218 registers a thread
    under 384 threads, ablate finds from the build itself: pipeline.cannot_fit.)"""
    seam, config = _seam(pathology), choice(shape)
    if seam is None or seam in SEAMS_OF[config]:
        return None
    return (f"the {seam} seam it replaces is the large configuration's; {label(shape)} runs the "
            f"{config} configuration (base/choice.def), whose {seam} is its own: its code is the base's")


# ---- which compiled instance is which ------------------------------------------------------
# Each configuration is an instance of cutlass::device_kernel<GemmUniversal<ProblemShape, ...,
# TileScheduler>>: large and the stream-K ones with a rank-3 problem shape
# (cute::tuple<int, int, int>), the skinny ones with rank 4; the stream-K ones under
# StreamKScheduler; the wgmma atom (MMA_64x<N>x16_F32F16F16 or _F32BF16BF16) names the tile's N
# and the element type. Among the rank-3 data-parallel instances with a 64x128 atom, the tile's M
# (the tile shape follows the kernel schedule, ...Pingpong or ...Cooperative, in every instance
# the builds make, cp_async's included) tells wide (256 rows) and n128_2x1 (64) from large (128;
# large's tile seam gives it 64x64, whose atom is 64x64); n192_1x2, n160_coop and n224 are the ones
# whose atoms are 64x192, 64x160 and 64x224 (n320: 64x160 across a tile 320 wide); each
# swap128_n<N> is swap_n<N>'s atom in a tile 128 rows tall (the tile's M, as above). Names come demangled where c++filt takes them, mangled otherwise (tupleIJiiiEE /
# tupleIJiiiiEE, ILi128E for C<128>): both are read.
_RANK = {"cute::tuple<int, int, int>,": 3, "tupleIJiiiEE": 3, "cute::tuple<int, int, int, int>": 4,
         "tupleIJiiiiEE": 4}
_MMA = re.compile(r"MMA_64x(\d+)x16_F32(BF16|F16)")
_TILE = re.compile(r"(?:Pingpong|Cooperative)(?:EEENS\w*?_IJNS\w*?_ILi|>, cute::tuple<cute::C<)(\d+)"
                   r"(?:(?:EEENS\w*?_ILi|>, cute::C<)(\d+))?")  # the tile's M, and N unless a back-reference
_TILE_M_NAMES = {"256": "wide", "128": "large", "64": "n128_2x1"}
# skinny_splitk's GEMM writes FP32 (its epilogue's LinearCombination<float, ...>, mangled Iff;
# the others write the element type), and its second kernel, gemm::sum_partials<Element>, adds them
_FLOAT_OUT = re.compile(r"LinearCombination<float,|LinearCombinationIff")
_SUM = re.compile(r"sum_partials.*?(bfloat16_t|half_t)")
# the swapped ones (Operands::ba) write d^T column-major: the epilogue's strides (C<1>, n, m n),
# mangled tuple<S.._, long, long> (the others' are (n, C<1>, m n): tuple<long, S.._, long>)
_SWAPPED = re.compile(r"IJS[0-9A-Z]*_llEE|cute::tuple<cute::C<1>, long, long>")
# the cluster (M, N), the mainloop's second template argument: mangled ...WarpSpecializedILi13ENS5_IJNS4_1CILi4EEENSA_ILi2EEE
# for (4, 2) (a repeated C<> is a substitution, S<id>_: the C<M> before it, the only one yet), readable
# ...WarpSpecialized<13, cute::tuple<cute::C<4>, cute::C<2>, ...>. The configurations that share a tile
# and a form (swap_n64's three, skinny's three) are told apart by it alone (_CLUSTERED); under cp_async, whose blocks are unclustered, each is
# its 4x1 one's kernel.
_CLUSTER = re.compile(r"WarpSpecializedILi\d+ENS[0-9A-Z]*_IJNS[0-9A-Z]*_1CILi(\d+)EEE(?:NS[0-9A-Z]*_ILi(\d+)EEE|S[0-9A-Z]*_)"
                      r"|WarpSpecialized<\d+, cute::tuple<cute::C<(\d+)>, cute::C<(\d+)>")
_CLUSTERED = {("swap_n64", (4, 2)): "swap_n64_4x2", ("swap_n64", (1, 2)): "swap_n64_1x2",
              ("skinny", (1, 2)): "skinny_1x2", ("skinny", (2, 1)): "skinny_2x1"}
# (rank, stream-K, MMA N, swapped) of each configuration but the rank-3 data-parallel ones with a 64x128 atom
_SIGNATURE = {"skinny": (4, False, 64, False), "skinny_n32": (4, False, 32, False),
              "skinny_n128": (4, False, 128, False), "streamk": (3, True, 128, False),
              "streamk_n64": (3, True, 64, False), "n192_1x2": (3, False, 192, False),
              "n160_coop": (3, False, 160, False), "n224": (3, False, 224, False),  # n160 (ping-pong) too: a tuning build only, never beside it
              "swap_n64": (4, False, 64, True), "swap_n96": (4, False, 96, True),
              "swap_n128": (4, False, 128, True), "swap_n160": (4, False, 160, True),
              "swap_n32_4x1": (4, False, 32, True),  # swap_n32 (a 1x2 cluster) too: a tuning build only
              "swap_n48_1x2": (4, False, 48, True),  # swap_n48 (4x1) too: a tuning build only
              "swap128_n144": (4, False, 144, True)}


def _cluster(kernel_name):
    """The mainloop's cluster (M, N), or None where the name does not say."""
    found = _CLUSTER.search(kernel_name)
    if found is None:
        return None
    m, n, readable_m, readable_n = found.groups()
    return (int(readable_m), int(readable_n)) if readable_m else (int(m), int(n or m))


def _config(kernel_name):
    if summed := _SUM.search(kernel_name):
        return f"{'bf16' if summed.group(1) == 'bfloat16_t' else 'fp16'}_skinny_splitk"
    ranks = {rank for text, rank in _RANK.items() if text in kernel_name}
    atoms = set(_MMA.findall(kernel_name))
    if len(ranks) != 1 or len({dtype for _, dtype in atoms}) != 1:
        return None
    rank, streamk = ranks.pop(), "StreamKScheduler" in kernel_name
    dtype = {"F16": "fp16", "BF16": "bf16"}[next(iter(atoms))[1]]
    if rank == 3 and not streamk and {n for n, _ in atoms} == {"64"}:
        return f"{dtype}_large"  # large under tile_64x64
    if rank == 3 and not streamk and {n for n, _ in atoms} == {"128"}:
        tile = _TILE.search(kernel_name)
        name = _TILE_M_NAMES.get(tile.group(1)) if tile else None
        return None if name is None else f"{dtype}_{name}"
    if len(atoms) != 1:
        return None
    signature = (rank, streamk, int(next(iter(atoms))[0]), bool(_SWAPPED.search(kernel_name)))
    if signature == _SIGNATURE["skinny_n128"] and _FLOAT_OUT.search(kernel_name):
        return f"{dtype}_skinny_splitk"
    name = next((n for n, s in _SIGNATURE.items() if s == signature), None)
    if name == "n160_coop" and (tile := _TILE.search(kernel_name)) and tile.group(2) == "320":
        name = "n320"  # two 64x160 atoms across its 320 columns
    if name and name.startswith("swap_n") and (tile := _TILE.search(kernel_name)) and tile.group(1) == "128":
        name = f"swap128_{name.removeprefix('swap_')}"  # the tile 128 rows tall: one 64xN atom per consumer warpgroup
    name = _CLUSTERED.get((name, _cluster(kernel_name)), name)
    return None if name is None else f"{dtype}_{name}"


def config_of(kernel_name, configs):
    name = _config(kernel_name)
    return name if name in {c["name"] for c in configs} else None


def launched(kernel_name, shape, configs):
    """Whether the shape runs this instance: its configuration's GEMM (skinny_splitk's second
    kernel, which adds the partial sums, runs too, but the GEMM's resources are the shape's)."""
    return not _SUM.search(kernel_name) and config_of(kernel_name, configs) == f"{shape['dtype']}_{choice(shape)}"
