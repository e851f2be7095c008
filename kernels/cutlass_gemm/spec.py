"""The CUTLASS GEMM's spec: d = a b^T on Hopper, built from CUTLASS 3.x's collective builders.

a is (m, k), b is (n, k) (an nn.Linear weight: both operands K-major, the layout Hopper's
TMA and wgmma take without a transpose), d is (m, n); all FP16 or all BF16, FP32
accumulation. A thin spec (ablate/job/plugins.py): the C ABI is base/ablate_gemm.h's
prototype. CUTLASS is the `nvidia-cutlass` package's headers, found where it is installed
(INCLUDE_DIRS). The peer is torch.matmul (cuBLAS/cuBLASLt) on the same tensors.
"""
import importlib.util
from pathlib import Path

SOURCE = "base/cutlass_gemm.cu"
SYMBOL = "ablate_cutlass_gemm"
ARCH = "sm_90a"  # wgmma, TMA multicast and setmaxnreg: the H100/H200 chip only
DTYPES = {"fp16": 0, "bf16": 1}  # the ABI's dtype codes
WORK = "fp16_tensor"
PARAMS = {"dtype": lambda shape: DTYPES[shape["dtype"]]}
ALIGN = 8  # elements per 16 bytes: TMA needs 16-byte aligned row strides (k for a and b, n for d)
SMS = 132  # the SM count the wave model of `candidates` assumes (H100 SXM, H200); the kernel reads its GPU's own

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


# The small shapes compute-sanitizer runs every variant on (a build holds one configuration: the
# shape's, CANDIDATES; `python -m ablate.tools.sanitize --candidates` runs each of them): m, n, k
# off every tile (odd m; n, k multiples of 8 only, rows off 128-byte lines), skinny, middling and
# past a wave of 128x128 tiles, in both dtypes.
SANITIZE_SHAPES = [{"m": 9, "n": 264, "k": 1032, "dtype": "fp16"},
                   {"m": 133, "n": 1352, "k": 328, "dtype": "bf16"},
                   {"m": 1289, "n": 1416, "k": 328, "dtype": "fp16"}]


def _matmul(shape):
    import torch

    def run(inputs):  # into the kernel's own output tensor: no allocation, as the kernel has none
        torch.matmul(inputs["a"], inputs["b"].t(), out=inputs["d"])
    return run


PEERS = {"torch_matmul": _matmul}


# ---- which configuration a shape runs ----------------------------------------------------------
# The base at a shape is the fastest of CANDIDATES there: on a GPU ablate builds each candidate
# that `candidates(shape)` keeps (FORCE_MACRO=<index>: base/cutlass_gemm.cu compiles that
# configuration alone and runs it at every shape), checks and times them at the shape in the GPU
# worker, alternated, and builds the base and every variant of the job on the fastest; the pick is
# kept per GPU model, shape and plugin sources (ablate/gpu/autotune.py; docs/design.md,
# "Configurations by measurement"). Static mode builds DEFAULT_CANDIDATE(shape).
FORCE_MACRO = "ABLATE_GEMM_FORCE"
# Every configuration base/cutlass_gemm.cu defines, by its index (Candidate<I>). What each read
# where, and why most were left out of the table that chose by shape until 2026-12-02:
# docs/history/2026-12-02-gemm-tables.md (the reasons as the table kept them).
INDEX = {"large": 1, "skinny": 2, "streamk": 3, "skinny_n32": 4, "skinny_n128": 5, "streamk_n64": 6,
         "wide": 7, "large_1x2": 8, "large_2x2": 9, "n192": 10, "n192_1x2": 11, "n192_2x1": 12,
         "skinny_splitk": 13, "swap_n16": 14, "swap_n32": 15, "n144": 16, "n128_2x1": 17,
         "n320": 18, "n160": 19, "n160_coop": 20, "n288": 21, "n224": 22,
         "n176_coop": 23, "swap_n64": 24, "swap_n80": 25, "swap_n96": 26, "swap_n128": 27,
         "swap_n160": 28, "swap_n192": 29, "swap_n96_2x1": 30, "swap128_n96": 31,
         "swap_n32_4x1": 32, "swap_n48": 33, "swap_n64_4x2": 34,
         "swap_n48_1x2": 35, "swap_n64_1x2": 36, "swap_n128_1x2": 37,
         "skinny_1x2": 38, "skinny_2x1": 39,
         "swap128_n160": 40, "swap128_n144": 41, "swap128_n128": 42, "swap128_n192": 43,
         "swap128_n64": 44, "swap_n160_splitk": 45, "swap128_n160_splitk": 46,
         "large_coop": 47, "coop_n64": 48}
# Each one's output tile and cluster as the wave model of `candidates` reads them: (rows of d a tile
# covers, its columns, the cluster along rows, along columns); a swapped one (d^T = b a^T) covers
# m along its tile's N, so its tile is (N, 64 or 128) of d.
TILES = {"large": (128, 128, 1, 1), "skinny": (64, 64, 1, 1), "streamk": (128, 128, 1, 1),
         "skinny_n128": (64, 128, 1, 1), "wide": (256, 128, 1, 2), "n192": (128, 192, 1, 1),
         "n192_1x2": (128, 192, 1, 2), "n128_2x1": (64, 128, 2, 1), "n320": (128, 320, 2, 1),
         "n160_coop": (128, 160, 1, 2), "n224": (128, 224, 2, 1), "skinny_2x1": (64, 64, 2, 1),
         "swap_n32_4x1": (32, 64, 1, 4), "swap_n48": (48, 64, 1, 4), "swap_n64": (64, 64, 1, 4),
         "swap_n80": (80, 64, 1, 4), "swap_n96": (96, 64, 1, 4), "swap_n128": (128, 64, 1, 4),
         "swap_n160": (160, 64, 1, 4), "swap_n192": (192, 64, 1, 4), "swap_n64_4x2": (64, 64, 2, 4),
         "swap_n48_1x2": (48, 64, 2, 1), "swap_n64_1x2": (64, 64, 2, 1), "swap128_n64": (64, 128, 1, 4),
         "swap128_n96": (96, 128, 1, 4), "swap128_n128": (128, 128, 1, 4), "swap128_n144": (144, 128, 1, 4),
         "swap128_n160": (160, 128, 1, 4), "skinny_splitk": (64, 128, 1, 1), "large_coop": (128, 128, 1, 1),
         "coop_n64": (128, 64, 1, 1)}
# The candidates timed: those the measured table named until 2026-12-02 (each the best at some
# region of its grid), and those within a few percent of them where measured (n192 at m = 3072,
# k = 1024; swap_n48, swap_n80, swap_n192, swap128_n96 at skinny m; streamk and skinny_2x1 where the
# tiles leave SMs idle): TILES' keys, by index. Since issue 62's random check (H200, 2026-12-02:
# 0.917 of cuBLAS's speed, geometric mean of 24 shapes, min 0.758), three more where its misses
# point, each a prediction until a GPU run times it:
# - skinny_splitk (k split, SPLIT_K below) where few tiles leave most SMs idle over a long k: at
#   m = 704, n = 240, k = 5472 (0.758, the minimum) skinny ran 44 tiles of 64x64 on 132 SMs, 86 k
#   steps each; skinny_splitk's 22 tiles of 64x128 in 6 chunks make 132 blocks of 15 k steps, a
#   third of skinny's MMAs per SM, for 4 MB of FP32 partial sums (in L2) and a second kernel. The
#   k split lost 10-30% to swap_n160 at m 136-160, n 3072-7168, k 4096 (docs/history/2026-11-28-29.md),
#   where the unsplit tiles filled 48-84% of a wave; at 33% and 86 k steps the idle SMs are more.
# - large_coop, coop_n64 (base/cutlass_gemm.cu, 47 and 48): large's and streamk_n64's tiles under
#   the cooperative kernel and the data-parallel scheduler, for grids of about one wave, where the
#   ping-pong kernel has one tile an SM and nothing to hide its epilogue under (large 0.798 at
#   m = 800, n = 1776, k = 768; at short k, k <= 256: streamk 0.814 at m = 336, n = 3984, k = 144,
#   n128_2x1 0.866 at m = 496, n = 1632, k = 144).
CANDIDATES = {name: INDEX[name] for name in TILES}
WAVE_CUT = 4  # candidates whose waves of tiles take more than this many times the fewest are not timed
# The configurations that split k (base/cutlass_gemm.cu's run: FP32 partial sums, a second kernel
# adds them), as many chunks as `_splits` says.
SPLIT_K = ("skinny_splitk", "swap_n160_splitk", "swap128_n160_splitk")
K_STEP = 64  # every configuration's tile K: a block's k loop is ceil(k / K_STEP) steps


def _tiles(shape, name):
    """`name`'s output tiles at `shape`, the grid padded to whole clusters."""
    rows, cols, cluster_rows, cluster_cols = TILES[name]
    return (-(-(-(-shape["m"] // rows)) // cluster_rows) * cluster_rows
            * (-(-(-(-shape["n"] // cols)) // cluster_cols) * cluster_cols))


def _splits(shape, name):
    """The chunks a split-k configuration cuts k into at `shape`, as base/cutlass_gemm.cu's
    split_count: as many as its tiles (unpadded) leave SMs for, at most 8, each chunk a multiple
    of 8 elements; 1 for the others."""
    if name not in SPLIT_K:
        return 1
    rows, cols = TILES[name][:2]
    tiles = -(-shape["m"] // rows) * -(-shape["n"] // cols)
    splits = min(8, max(1, SMS // tiles))
    while splits > 1 and shape["k"] % (splits * 8):
        splits -= 1
    return splits


def _waves_of_tiles(shape, name):
    """The wave model: waves of `name`'s blocks over SMS SMs times a block's work, a tile's area
    times its k steps, the time of one SM's work if every block ran at one speed. A split-k
    configuration launches each tile once per chunk (tiles x splits blocks), each block the
    chunk's k steps; the partial sums' traffic and second kernel are not in the model (the timing
    pays them). Stream-K shares the last wave's work, so its waves are not rounded up."""
    rows, cols = TILES[name][:2]
    tiles, splits = _tiles(shape, name), _splits(shape, name)
    waves = tiles / SMS if name == "streamk" else -(-(tiles * splits) // SMS)
    return waves * rows * cols * -(-(shape["k"] // splits) // K_STEP)


def candidates(shape):
    """The candidates worth timing at `shape`: the swapped ones (m along the tile's N) where m <= 256,
    the 64-row ones where m <= 1024, the 128- and 256-row ones where m > 64 (outside those a tile
    holds mostly padding of m: the grid of 2026-11-26 to 29 never found one the best there), a
    split-k one where it splits k at all (in one chunk it is its tile's configuration plus a second
    kernel), and of those, the ones whose waves of tiles take at most WAVE_CUT times the fewest
    (_waves_of_tiles). A cheap prune: the timing picks among what is left."""
    m = shape["m"]

    def fits(name):
        rows = TILES[name][0]
        if name in SPLIT_K and _splits(shape, name) == 1:
            return False
        if name.startswith("swap"):
            return m <= 256
        return m <= 1024 if rows == 64 else m > 64
    kept = [n for n in CANDIDATES if fits(n)]
    cost = {n: _waves_of_tiles(shape, n) for n in kept}
    least = min(cost.values())
    return [n for n in kept if cost[n] <= WAVE_CUT * least]


def DEFAULT_CANDIDATE(shape):
    """Static mode's guess (no GPU to time the candidates): the regions of m where one configuration
    was the best of the grid most often (docs/history/, the twelfth and thirteenth sessions): the
    swapped tile whose N fits m to m = 160, skinny_n128 to 256, large beyond (the fastest at the
    large shapes, 1.02-1.04 of cuBLAS)."""
    m = shape["m"]
    for most, name in ((24, "swap_n32_4x1"), (64, "swap_n64"), (96, "swap_n96"), (128, "swap_n128"),
                       (160, "swap_n160"), (256, "skinny_n128")):
        if m <= most:
            return name
    return "large"


# The memory one compile of base/cutlass_gemm.cu takes at its peak, for ablate.build.compile's cap
# on compiles at once: one configuration in both types. Measured on the 2-core CPU machine (23 GiB;
# `/usr/bin/time`, maximum resident set, large and its pathologies, nvcc 13.0, 2026-12-02): 3.5 GB,
# 3.6 GB at most; ~3 minutes of a core each (the table's ~20 in one unit took 13.6 GiB).
BUILD_MEMORY_GIB = 4
# The seams each configuration takes (base/cutlass_gemm.cu's Candidate): large all, the others
# have their own tile, cluster and schedule. A pathology whose seam does not reach the
# configuration a shape runs is not applicable at that shape (not_applicable).
SEAMS = ("schedule", "mainloop", "cluster", "stages", "tile", "epilogue", "raster", "launch")
SEAMS_OF = {name: SEAMS if name == "large" else ("mainloop", "stages", "epilogue", "raster", "launch")
            for name in INDEX}


def _seam(pathology):
    path = Path(__file__).parent / "conf" / "pathology" / f"{pathology}.yaml"
    if not path.is_file():
        return None  # a generic pathology: it changes the whole build or launch, every configuration
    import yaml
    return (yaml.safe_load(path.read_text()).get(pathology) or {}).get("seam")


def not_applicable(pathology, shape, candidate=None):
    """Why `pathology` does not apply at `shape`, whose base runs `candidate` (the pick of the
    timing on a GPU; DEFAULT_CANDIDATE where None): its seam does not reach that configuration (its
    code there is the base's); None where it applies. (A build whose instance cannot launch at
    all, as no_launch_bounds' n192_1x2 with 218 registers a thread under 384 threads, ablate finds
    from the build itself: pipeline.cannot_fit.)"""
    seam, config = _seam(pathology), candidate or DEFAULT_CANDIDATE(shape)
    if seam is None or seam in SEAMS_OF[config]:
        return None
    return (f"the {seam} seam it replaces is the large configuration's; {label(shape)} runs the "
            f"{config} configuration, whose {seam} is its own: its code is the base's")


# ---- which compiled instance is which ------------------------------------------------------
# A build holds one configuration (FORCE_MACRO) in FP16 and BF16: cutlass::device_kernel<...> of
# each type, and, for a split-k one, gemm::sum_partials<Element> beside it. An instance's type is in
# its name, demangled (cutlass::bfloat16_t, cutlass::half_t) or mangled (13bfloat16_t, 6half_t).
def _dtype(kernel_name):
    return "bf16" if "bfloat16_t" in kernel_name else "fp16" if "half_t" in kernel_name else None


def config_of(kernel_name, configs):
    """The variant info's config of that type (fp16_large, bf16_large, ...)."""
    dtype = _dtype(kernel_name)
    return next((c["name"] for c in configs if c.get("dtype") == dtype), None) if dtype else None


def launched(kernel_name, shape, configs):
    """Whether the shape runs this instance: the GEMM of its type (a split-k configuration's second
    kernel, which adds the partial sums, runs too, but the GEMM's resources are the shape's)."""
    return "sum_partials" not in kernel_name and _dtype(kernel_name) == shape["dtype"] \
        and config_of(kernel_name, configs) is not None
