"""matmul_triton: C = A @ B, FP16 or BF16, a Triton kernel (base/matmul.py), its optimizations
as meta-parameters that the pathologies override (conf/pathology/*.yaml).

A Triton plugin's spec (docs/design.md, "Triton kernels"): TRITON names the @triton.jit
function, META the base's constexprs and compile options, grid(shape, meta) its launch, and
INSTANCES one shape of each specialization the compiled library holds. The function's
arguments are bound by name: a, b, c are the tensors, M, N, K and the strides come from PARAMS.

The base at a shape is the fastest of CANDIDATES there, timed on the GPU (ablate/job/candidates.py;
docs/design.md, "Configurations by measurement"); without a GPU, the one `choose(shape)` names (the
measured rules below it: DEFAULT_CANDIDATE). META is the configuration of the large shapes (`wide`),
each candidate what it changes of it. The split-K candidates (SPLIT_K > 1) use the tensors ws and
locks as workspace, which every other candidate and the peers leave alone.
"""
TRITON = "base/matmul.py:matmul_kernel"
META = {"BLOCK_M": 128, "BLOCK_N": 256, "BLOCK_K": 64, "GROUP_M": 8, "USE_TMA": True, "TMA_STORE": True,
        "PERSISTENT": True, "NUM_SMS": 132, "num_warps": 8, "num_stages": 3,
        "USE_GDC": True, "launch_pdl": True,  # programmatic dependent launch (base/matmul.py): every candidate
        # A's, B's and C's TMA descriptors made by the host (`descriptors`), every TMA candidate: measured
        # faster than the same candidate making them on the device at each of the 24 random shapes and
        # every tile (H200, 2026-12-03: 0.55-0.92 of the time under 8 us, 0.84-1.00 over 30 us;
        # docs/history/2026-12-03.md); the pathology device_descriptors makes them on the device
        "HOST_TMA": True}
# One shape of each specialization the shapes take (Triton's JIT specializes an integer
# argument by whether it is a multiple of 16, and 1 as a constant): every dimension a multiple
# of 16; m = 1 (decode of one token); m, n and k all 8 mod 16 (off the tile grid; 8, so that
# the rows stay 16-byte aligned, as the TMA descriptors need). A shape of another mix (m = 8
# with n and k multiples of 16, say) is refused by the launch, naming the instances.
INSTANCES = {"fp16": {"m": 256, "n": 256, "k": 256, "dtype": "fp16"},
             "bf16": {"m": 256, "n": 256, "k": 256, "dtype": "bf16"},
             "fp16_m1": {"m": 1, "n": 256, "k": 256, "dtype": "fp16"},
             "bf16_m1": {"m": 1, "n": 256, "k": 256, "dtype": "bf16"},
             "fp16_odd": {"m": 264, "n": 264, "k": 264, "dtype": "fp16"},
             "bf16_odd": {"m": 264, "n": 264, "k": 264, "dtype": "bf16"}}
WORK = "fp16_tensor"  # the H100's BF16 tensor-core rate is the FP16 one
SHAPE = {"m": int, "n": int, "k": int, "dtype": ("fp16", "bf16")}


def descriptors(meta):
    """The host-side descriptors of a HOST_TMA configuration (ablate/build/triton_aot.py,
    with_descriptors): A's, B's and C's tiles; none (None) for the others."""
    host = meta.get("HOST_TMA", False)
    return {"a_host": ("a", (meta["BLOCK_M"], meta["BLOCK_K"])) if host and meta["USE_TMA"] else None,
            "b_host": ("b", (meta["BLOCK_K"], meta["BLOCK_N"])) if host and meta["USE_TMA"] else None,
            "c_host": ("c", (meta["BLOCK_M"], meta["BLOCK_N"])) if host and meta["TMA_STORE"] else None,
            "s_host": ("b", (meta["BLOCK_K"], meta["STRIP_N"])) if host and meta["USE_TMA"] and meta.get("STRIP_N")
            else None}


def workspace_size(shape):
    """FP32 elements of the split-K workspace (`ws`): SPLIT_K (at most 8) partial tiles of the
    output padded to 64 x 64 tiles, at most 2^22 (16 MiB); a multiple of 16 at every shape, so
    that the argument takes one specialization (INSTANCES)."""
    return min(8 * -(-shape["m"] // 64) * 64 * -(-shape["n"] // 64) * 64, 2 ** 22)


def lock_count(shape):
    """Counters of the split-K programs' arrivals (`locks`): one per output tile (enough for tiles
    of 16 x 16), at most 2^16; a multiple of 16 above the count, never 1 (one specialization)."""
    return min(-(-shape["m"] // 16) * -(-shape["n"] // 16) // 16 * 16 + 16, 2 ** 16)


# ws and locks: the split-K candidates' workspace (base/matmul.py, split_k_program), zeros as made;
# the kernel leaves every counter 0 after a launch, so one set of inputs serves every launch. The
# other candidates never read them, the peers never see them, and the check compares c alone.
TENSORS = {"a": ("in", "m, k", "dtype"), "b": ("in", "k, n", "dtype"), "c": ("out", "m, n", "dtype"),
           "ws": ("in", (workspace_size,), "fp32", "zeros"), "locks": ("in", (lock_count,), "int32", "zeros")}
PARAMS = {"M": "m", "N": "n", "K": "k", "stride_am": "k", "stride_ak": 1, "stride_bk": "n", "stride_bn": 1,
          "stride_cm": "n", "stride_cn": 1, "WS_SIZE": workspace_size, "LOCKS_SIZE": lock_count}
# the traffic of A, B and C: the workspace is scratch, not the GEMM's bytes (the byte model and
# the rotation of input sets past L2 read this)
BYTES = "2 * (m * k + k * n + m * n)"
FLOPS = "2 * m * n * k"
# ||C - ref|| / ||ref||: the output's rounding (FP16 2^-11, BF16 2^-8) over FP32 accumulation
TOLERANCE = {"fp16": 1e-3, "bf16": 8e-3}
# small, with partial tiles in N (384 = 256 + 128) and a K tail (208 = 3 * 64 + 16); then the
# instances of m = 1 and of m, n, k off the grid (392 = 256 + 136, 200 = 3 * 64 + 8)
SANITIZE_SHAPES = [{"m": 256, "n": 384, "k": 208, "dtype": "fp16"}, {"m": 256, "n": 384, "k": 208, "dtype": "bf16"},
                   {"m": 1, "n": 384, "k": 208, "dtype": "bf16"}, {"m": 264, "n": 392, "k": 200, "dtype": "fp16"}]


# ---- the configuration by shape ----------------------------------------------------------------
# Each candidate: what it changes of META (BLOCK_M x BLOCK_N x BLOCK_K, num_warps, num_stages,
# PERSISTENT). Shared memory per program is (BLOCK_M + BLOCK_N) x BLOCK_K x 2 bytes a stage
# plus the C tile for its TMA store, within the H100's 227 KiB: wide 3 x 48 + 64 = 208 KiB.
# On a GPU each is built for the shape and timed there (ablate/gpu/autotune.py), the fastest the
# base; tools/gemm_candidates.py --kernel matmul_triton times every one of them and cuBLAS at any
# shapes (the figures that set the rules of `choose`, RULES, static mode's guess, came from its
# predecessor in this folder).
CANDIDATES = {
    # the large shapes' (META): 128 x 256 on 2 warpgroups, measured 0.98-1.01x of cuBLAS at
    # sq4k, sq8k and prefill (docs/benchmarks.md)
    "wide": {},
    "wide_tiles": {"PERSISTENT": False},  # the same, a program per tile
    # (the warp-specialized candidates, *_ws until 2026-12-03, retired: never the fastest at the 24
    # random shapes or the 24 shipped ones on the H200, compute-sanitizer's racecheck reports a
    # shared-memory hazard in each, and Triton 3.6's pass fails on host-made descriptors;
    # docs/history/2026-12-03.md)
    # 128 x 128: twice the tiles of `wide`, for shapes where wide's tiles fill few waves
    "square": {"BLOCK_N": 128, "num_stages": 4},                               # 4 x 32 + 32 KiB
    "square_w4": {"BLOCK_N": 128, "num_warps": 4, "num_stages": 4},
    "square_k128": {"BLOCK_N": 128, "BLOCK_K": 128, "num_stages": 3},            # 3 x 64 + 32 KiB
    # skinny m (decode): one tile row of 64, B streamed from DRAM once, deep pipelines
    "m64": {"BLOCK_M": 64, "BLOCK_N": 128, "BLOCK_K": 128, "num_warps": 4, "num_stages": 4},   # 4 x 48 + 16
    "m64_n64": {"BLOCK_M": 64, "BLOCK_N": 64, "BLOCK_K": 128, "num_warps": 4, "num_stages": 6},  # 6 x 32 + 8
    # a program per tile, shallower: 2 programs fit an SM (3 x 32 + 8 KiB), so that all 224
    # tiles of a decode up-projection are in flight at once instead of 1.7 persistent waves
    "m64_tiles": {"BLOCK_M": 64, "BLOCK_N": 64, "BLOCK_K": 128, "num_warps": 4, "num_stages": 3,
                  "PERSISTENT": False},
    # m <= 16: 16-row tiles (mma.sync, not wgmma: a warpgroup's wgmma is 64 rows)
    "m16": {"BLOCK_M": 16, "BLOCK_N": 64, "BLOCK_K": 128, "num_warps": 4, "num_stages": 6},   # 6 x 20 + 2
    "m16_n128": {"BLOCK_M": 16, "BLOCK_N": 128, "BLOCK_K": 128, "num_warps": 4, "num_stages": 5},  # 5 x 36 + 4
    "m16_n32": {"BLOCK_M": 16, "BLOCK_N": 32, "BLOCK_K": 256, "num_warps": 4, "num_stages": 6},    # 6 x 24 + 1
    "m16_tiles": {"BLOCK_M": 16, "BLOCK_N": 64, "BLOCK_K": 128, "num_warps": 4, "num_stages": 4,  # 4 x 20 + 2,
                  "PERSISTENT": False},                                                          # 2 an SM
    # Issue 62's random check (H200, 2026-12-02; 24 shapes, m, n, k in [128, 8192]): 0.726 of
    # cuBLAS's speed (geometric mean), every one of the above timed at each shape; at short k
    # (k <= 256) the base trails cuBLAS by 2.2-2.8 us whatever the shape's size (m = 320, n = 464:
    # 5.42 us against 3.24; m = 512, n = 2640: 7.24 against 4.63; m = 5408, n = 496: 8.60 against
    # 5.89), and cutlass_gemm's base by 1.5-2.2 us at the same shapes, so a cost of the launch more
    # than of the tiles. Every candidate above made its TMA descriptors on the device then (META's
    # HOST_TMA since), three a program (a write to global scratch and a tensormap fence before the
    # first load). These two make none (USE_TMA, TMA_STORE off: masked pointer loads through
    # cp.async and a pointer store), a program per tile (the pointer path pipelines A and B there,
    # not in the fused persistent loop: docs/history/matmul-triton.md, no_tma), K steps of 64
    # (k = 144 in 3 steps of 64, not 2 of 128 with 112 of zeros), and few enough stages that 2-3
    # programs share an SM. A prediction, not measured: faster than every candidate above where
    # k <= 256; slower past k ~ 1024, where the descriptors' cost is amortized and TMA's cheaper
    # loads pay (no_tma: 2.9x at prefill).
    "m64_ptr": {"BLOCK_M": 64, "BLOCK_N": 64, "BLOCK_K": 64, "num_warps": 4, "num_stages": 4,  # 4 x 16 + 0,
                "USE_TMA": False, "TMA_STORE": False, "PERSISTENT": False},                   # 3 an SM
    "square_ptr": {"BLOCK_N": 128, "BLOCK_K": 64, "num_warps": 4, "num_stages": 3,           # 3 x 32 + 0,
                   "USE_TMA": False, "TMA_STORE": False, "PERSISTENT": False},              # 2 an SM
    # Long k over few tiles: at m = 704, n = 240, k = 5472 m64_n64's 44 tiles of 64 x 64 left 88 SMs
    # idle for 43 K steps (0.585 of cuBLAS), at m = 608, n = 432, k = 4272 its 70 tiles 62 (0.789).
    # 64 x 32 tiles make twice the programs, each half the MMAs of a K step over the same A tile. A
    # prediction, not measured: faster than m64_n64 where its tiles fill at most half the SMs and
    # k >= 2048; m64_n64 ahead wherever 64 x 32's tiles pass a wave.
    "m64_n32": {"BLOCK_M": 64, "BLOCK_N": 32, "BLOCK_K": 128, "num_warps": 4, "num_stages": 6},  # 6 x 24 + 4
    # The tail split (base/matmul.py, tail_splits), the approach changed after the random check's
    # fourth miss (H200, 2026-12-02: at the 8 shapes over 30 us the speed is 0.90-1.05 x the fill of
    # the pick's last wave; 1616 x 2864 x 3296, 299 tiles of 128 x 128 in 3 waves of 132, 0.681 of
    # cuBLAS): the full waves a tile a program, then each of the last wave's tiles split over up to
    # TAIL_SPLIT programs in equal K ranges (there 35 tiles x 3 splits: 105 programs for a third of
    # the K steps each). A stream-K of 132 shares, each starting at its own K step, ran its shared
    # steps at ~0.6 of the waves' rate (docs/history/2026-12-02.md); these start together.
    # Measured (H200, 2026-12-03; docs/history/2026-12-03-tail.md): picked at 3 of the 24 random
    # shapes; at 1616 x 2864 x 3296 wide_tail 64.4 us against wide's 74.2 and cuBLAS's 46.0, its
    # shares' K steps at the full waves' rate and ~9.4 us in the partials' round trips (the store
    # behind the atomic's fence, the sum a slot at a time), which neither the sum spread over the
    # splits nor column strips without partials recovered; no exchange at all would give 0.85.
    "square_tail": {"BLOCK_N": 128, "num_warps": 4, "num_stages": 4, "TAIL_SPLIT": 4},
    "wide_tail": {"TAIL_SPLIT": 4},
    # Tiles of a power of two and a strip (base/matmul.py, STRIP_N), the approach changed after the
    # tail split's sixth miss: no partials to exchange, the wave filled by the tile's width instead.
    # cuBLAS at 1616 x 2864 x 3296 runs one wave of 130 tiles 288 wide (its 288 x 128 tile, cluster
    # 2; ncu, docs/history/2026-12-03-tail.md), where wide makes 156 tiles, a wave and a tail of 24.
    # Measured (H200, 2026-12-03; docs/history/2026-12-03-strip.md): 128 x (256 + 32) there 60-63 us
    # (wide_tail 62-64, cuBLAS 44-47), a wave of its tiles at 0.71 of wide's rate a FLOP (ncu: warps
    # twice as long at the barriers, the 64 x 32 wgmma); 128 x (256 + 64) on K steps of 32 at 0.95
    # of it, one wave of 117 tiles at 1616 x 2864. Shared memory 5 stages of 28 KiB and C's TMA
    # store, 208 936 B, the tile loop apart from the K loop (flattened, its wgmma serialize:
    # base/matmul.py). C leaves by pointers (TMA_STORE off; 143 400 B): measured faster at each of 4
    # shapes, 1616 x 2864 x 3296 53.7 us against 60.4 (0.869 of cuBLAS against 0.772; H200, 2026-12-03,
    # docs/history/2026-12-03-lrc.md), with the same K loop: ncu reads the same 346 MB into the SMs from
    # 36% fewer L2 reads (the L2 request coalescer's sectors out per sector read 1.46 against 1.12) and
    # the tensor pipes 84.8% busy against 77.8%; why the coalescing changes is not settled. More
    # stages in the freed memory (7, 8) were slower (55.2, 55.5 us).
    "wide_strip": {"STRIP_N": 64, "BLOCK_K": 32, "num_stages": 5, "TMA_STORE": False},
    # Split K (base/matmul.py, split_k_program). Issue 62's check again (H200, 2026-12-02; 24 random
    # shapes): 0.816 of cuBLAS's speed (geometric mean), the worst shapes few output tiles over a long
    # k: 704 x 240 x 5472 0.632, 784 x 288 x 2448, 208 x 1328 x 1712, 880 x 496 x 1664 and 896 x 1008 x
    # 3808 0.64-0.69, where the picks (64 x 64 and 64 x 32 tiles) launch 44-112 programs for the 132
    # SMs. cuBLAS at 704 x 240 x 5472 runs a split-K kernel of 64 x 64 tiles (132 CTAs) and a reduce
    # kernel (torch.profiler). These split each tile's K steps over SPLIT_K programs (tiles x SPLIT_K
    # of them), each adding its FP32 partial tile to the workspace, the last of a tile's programs to
    # arrive summing them into C (a pointer store: TMA_STORE is not read there). A prediction, not
    # measured: faster than every candidate above where 64 x 64 tiles fill less than a wave and k >=
    # 1024, the workspace's round trip through L2 (SPLIT_K x 8 bytes per output element) small
    # against the K loop's loads there; timed where they fill less than two (`candidates`). Few
    # enough stages that 2-3 programs share an SM, so that tiles x SPLIT_K past the SMs still make
    # one wave (704 x 240: 176 programs of splitk4 in 264 places).
    "splitk2": {"BLOCK_M": 64, "BLOCK_N": 64, "BLOCK_K": 128, "num_warps": 4, "num_stages": 3,  # 3 x 32 + 0,
                "TMA_STORE": False, "PERSISTENT": False, "SPLIT_K": 2},                         # 2 an SM
    # Measured after (H200, 2026-12-02; docs/history/2026-12-02.md, "Why split-K missed"): picked at 1 of
    # the 7 shapes where timed (704 x 240 x 5472, splitk3, 0.639 -> 0.728 of cuBLAS), slower than the
    # same tile unsplit at the others. At 3 stages the pipeline is too shallow where the split programs
    # fit one wave (704 x 240: 44 tiles x 3 = 132): splitk3 at 5 stages 13.34 us, at 3 14.54 (in the
    # tuning; cuBLAS 11.36). Where they do not fit one wave (208 x 1328: 168 programs), more stages cost the
    # second program an SM and the time rose by a third, so splitk2 keeps 3. And the TMA descriptors each
    # program makes cost more than the split saves at 784 x 288 x 2448: pointer loads 9.88 us against
    # 11.20 (splitk2_ptr; m64_n64 11.04, cuBLAS 7.59).
    "splitk3": {"BLOCK_M": 64, "BLOCK_N": 64, "BLOCK_K": 128, "num_warps": 4, "num_stages": 5,  # 5 x 32 + 0,
                "TMA_STORE": False, "PERSISTENT": False, "SPLIT_K": 3},                         # 1 an SM
    "splitk2_ptr": {"BLOCK_M": 64, "BLOCK_N": 64, "BLOCK_K": 128, "num_warps": 4, "num_stages": 3,  # 3 x 32 + 0,
                    "USE_TMA": False, "TMA_STORE": False, "PERSISTENT": False, "SPLIT_K": 2},      # 2 an SM
    "splitk4": {"BLOCK_M": 64, "BLOCK_N": 64, "BLOCK_K": 128, "num_warps": 4, "num_stages": 3,
                "TMA_STORE": False, "PERSISTENT": False, "SPLIT_K": 4},
    "splitk8": {"BLOCK_M": 64, "BLOCK_N": 64, "BLOCK_K": 64, "num_warps": 4, "num_stages": 4,   # 4 x 16 + 0,
                "TMA_STORE": False, "PERSISTENT": False, "SPLIT_K": 8},                         # 3 an SM
    "splitk2_n128": {"BLOCK_M": 64, "BLOCK_N": 128, "BLOCK_K": 64, "num_warps": 4, "num_stages": 4,  # 4 x 24 + 0,
                     "TMA_STORE": False, "PERSISTENT": False, "SPLIT_K": 2},                         # 2 an SM
    "splitk4_n128": {"BLOCK_M": 64, "BLOCK_N": 128, "BLOCK_K": 64, "num_warps": 4, "num_stages": 4,
                     "TMA_STORE": False, "PERSISTENT": False, "SPLIT_K": 4},
    # Not here: large tiles split in K with every split summing one band of its tile (each waiting for
    # its tile's others), measured at 896 x 1008 x 3808 (H200, 2026-12-04; docs/history/2026-12-04-bands.md):
    # 128 x 128 split 2 19.2 us, 128 x 256 split 4 23.3 (~12 us of K loop, ~8 of exchange); nor split 0
    # running 6 fewer K steps and handing its partial to split 1 (17.8-18.2 us: a poll and a load in series
    # after split 1's loop; taken inside that loop, slower again); m64 17.0-17.4, cuBLAS 13.2-13.5.
}
SPLIT_K_MIN_K = 1024  # k below this is not split (a prediction: too few K steps to share)
# SPLIT_K is no META entry but a default of the function (1), as TAIL_SPLIT is: an integer power
# of two in META gets neighbours (ablate/job/tunables.py), and tune_split_k_2 would split the wide
# base's tiles at every shape, where the workspace holds no such split (the kernel's fallback then).


def tiles(shape, meta):
    """Output tiles of `meta`'s block at `shape` (BLOCK_N + STRIP_N columns each)."""
    return -(-shape["m"] // meta["BLOCK_M"]) * -(-shape["n"] // (meta["BLOCK_N"] + meta.get("STRIP_N", 0)))


def split_fits(shape, meta):
    """Whether the workspace holds `meta`'s split at `shape` (the kernel's own test: where it does
    not, split 0 runs the whole K loop alone)."""
    count = tiles(shape, meta)
    return (count <= workspace_size(shape) // (meta["SPLIT_K"] * meta["BLOCK_M"] * meta["BLOCK_N"])
            and count <= lock_count(shape))


def tail_split(shape, meta):
    """How many ways `meta`'s tail-split kernel splits each tile past its full waves at `shape`
    (base/matmul.py, tail_splits; 1: none, every tile a program's alone)."""
    count, sms = tiles(shape, meta), meta["NUM_SMS"]
    whole = count // sms * sms
    tail = max(count - whole, 1)
    k_tiles = -(-shape["k"] // meta["BLOCK_K"])
    splits = min(sms // tail, meta.get("TAIL_SPLIT", 1), k_tiles,
                 workspace_size(shape) // (meta["BLOCK_M"] * meta["BLOCK_N"]) // tail)
    return 1 if splits < 2 or count == whole or count - whole > lock_count(shape) else splits


def candidates(shape):
    """The candidates timed at `shape`: every one, but the split-K ones only where the 64 x 64 tiles
    fill less than two waves of the SMs (896 x 1008 x 3808, one of the worst: 224 tiles of 64 x 64,
    112 of 64 x 128), k >= SPLIT_K_MIN_K and the workspace holds the split; the tail-split ones only
    where they split a tail (elsewhere each computes what its twin without TAIL_SPLIT does) and
    k >= SPLIT_K_MIN_K."""
    few = tiles(shape, {"BLOCK_M": 64, "BLOCK_N": 64}) < 2 * META["NUM_SMS"] and shape["k"] >= SPLIT_K_MIN_K
    return [name for name, c in CANDIDATES.items()
            if ("SPLIT_K" not in c or few and split_fits(shape, base_meta_of(name)))
            and ("TAIL_SPLIT" not in c or shape["k"] >= SPLIT_K_MIN_K and tail_split(shape, base_meta_of(name)) > 1)]


# The choice, as data: for the first row whose `m` bound holds the shape's m, the first
# candidate whose output tiles at the shape number at least its `waves` of NUM_SMS programs
# (the last one of the row where none does). Set from every candidate timed against cuBLAS
# over the grid (this folder's tools/candidates.py until 2026-12-02; H100 80GB HBM3, 2026-11-26; time / cuBLAS's,
# lower is faster; docs/benchmarks.md, "matmul_triton by shape"):
# - m <= 16: 16 x 128 tiles where they make 0.8 of a wave (n = 14336: 112 programs; m = 1
#   0.989-0.997, m = 16 0.966, against 16 x 64's 1.013-1.030), else 16 x 64 (n = 4096, k =
#   14336: 1.044, against 1.110 for 16 x 128 and 1.151 for 16 x 32);
# - m <= 64: 64 x 128 where 0.8 of a wave (m = 64, n = 14336: 1.053-1.060 against 64 x 64's
#   1.110), else 64 x 64;
# - m <= 128: 128 x 128 on one warpgroup where 0.8 of a wave (m = 128, n = 14336: 1.024 against
#   64 x 128's 1.063), else 64 x 64 (m = 128, n = 4096, k = 14336: 0.894, cuBLAS beaten);
# - above: `wide` (META), the fastest of the twelve at every other point (m = 256: 1.118-1.128
#   against 128 x 128's 1.273-1.289; 2048^3: 1.100-1.102 against 1.236-1.260; the odd shapes:
#   1.363-1.585, every candidate slower still).
# The dtype does not enter: the H100's BF16 and FP16 tensor-core rates are one.
RULES = [
    {"m": 16, "try": [("m16_n128", 0.8), ("m16", 0)]},
    {"m": 64, "try": [("m64", 0.8), ("m64_n64", 0)]},
    {"m": 128, "try": [("square_w4", 0.8), ("m64_n64", 0)]},
    {"m": None, "try": [("wide", 0)]},
]


def choose(shape):
    """The name of the candidate that is the base at `shape` (m, n, k, dtype): RULES."""
    sms = META["NUM_SMS"]
    row = next(r for r in RULES if r["m"] is None or shape["m"] <= r["m"])
    for name, waves in row["try"]:
        if tiles(shape, {**META, **CANDIDATES[name]}) >= waves * sms:
            return name
    return row["try"][-1][0]


DEFAULT_CANDIDATE = choose  # the base where nothing is timed (static mode)


def base_meta_of(candidate):
    """The base's META on `candidate`: its overrides over META."""
    return {**META, **CANDIDATES[candidate]}


# Pathologies whose meaning needs something of the configuration that not every candidate has.
def not_applicable(pathology, shape, candidate=None):
    """Why `pathology` does not apply at `shape`, whose base runs `candidate` (the fastest timed
    there; choose(shape)'s without a GPU), or None: the base there lacks what it switches off, or a
    META neighbour (tune_NAME_VALUE, named after META's value) stands beside another base value."""
    candidate = candidate or choose(shape)
    meta = base_meta_of(candidate)
    if pathology in ("not_persistent", "no_tma_store") and meta.get("SPLIT_K", 1) > 1:
        return (f"the base at this shape splits K ({candidate}): a program per tile and split, C stored by "
                "pointers, whatever PERSISTENT and TMA_STORE say")
    if pathology == "not_persistent" and meta["PERSISTENT"] and meta.get("TAIL_SPLIT", 1) > 1:
        return (f"the base at this shape splits its last wave's tiles over the persistent programs ({candidate}: "
                "TAIL_SPLIT): without them there is no tail to split, so it would switch off two things")
    if pathology == "device_descriptors" and not meta["USE_TMA"]:
        return f"the base at this shape makes no TMA descriptors ({candidate}: USE_TMA false, A and B by pointers)"
    if pathology == "no_tma" and not meta["USE_TMA"]:
        return f"the base at this shape loads A and B by pointers already ({candidate}: USE_TMA false)"
    if pathology == "no_tma_store" and not meta["TMA_STORE"]:
        return f"the base at this shape stores C by pointers already ({candidate}: TMA_STORE false)"
    if pathology == "not_persistent" and not meta["PERSISTENT"]:
        return "the base at this shape is a program per tile already (not persistent)"
    if pathology == "no_grouping" and -(-shape["m"] // meta["BLOCK_M"]) == 1:
        return (f"one row of output tiles (m {shape['m']} <= BLOCK_M {meta['BLOCK_M']}): grouped and row-major "
                "order are the same order")
    if pathology == "small_tiles" and meta["BLOCK_M"] * meta["BLOCK_N"] <= 64 * 128:
        return (f"the base's tile at this shape is {meta['BLOCK_M']} x {meta['BLOCK_N']}, no larger than twice "
                "64 x 64")
    if pathology.startswith("tune_") and not pathology.startswith("tune_config_"):
        name = next((k for k in META if pathology.startswith(f"tune_{k.lower()}_")), None)
        if name is not None and meta[name] != META[name]:
            return (f"a neighbour of META's {name} = {META[name]}; the base at this shape has {name} = "
                    f"{meta[name]} (candidate {candidate})")
    return None


def grid(shape, meta):
    """One program per output tile; PERSISTENT: NUM_SMS programs (the H100 SXM's 132 SMs, a
    constant so that Triton fuses the kernel's loops; right on any GPU, one wave only where it
    has that many SMs), fewer when there are fewer tiles, each looping over its share; SPLIT_K > 1:
    SPLIT_K programs per output tile, persistent or not."""
    count = tiles(shape, meta)
    if meta.get("SPLIT_K", 1) > 1:
        return (count * meta["SPLIT_K"],)
    if meta["PERSISTENT"] and meta.get("TAIL_SPLIT", 1) > 1:  # the idle programs split the tail's tiles
        return (meta["NUM_SMS"],)
    return (min(count, meta["NUM_SMS"]),) if meta["PERSISTENT"] else (count,)


def label(shape):
    return f"{shape['m']}x{shape['n']}x{shape['k']} {shape['dtype']}"


def tolerance(shape):
    return TOLERANCE[shape["dtype"]]


def reference(inputs, shape):
    import torch

    # FP32 products and sums, never TF32, whatever the process set
    old = torch.backends.cuda.matmul.allow_tf32
    torch.backends.cuda.matmul.allow_tf32 = False
    try:
        return inputs["a"].float() @ inputs["b"].float()
    finally:
        torch.backends.cuda.matmul.allow_tf32 = old


def _cublas(shape):
    import torch

    def run(inputs):
        torch.matmul(inputs["a"], inputs["b"], out=inputs["c"])
    return run


PEERS = {"cublas": _cublas}
