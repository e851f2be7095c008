"""C = A @ B for FP16 or BF16 A (M x K) and B (K x N), both row-major, FP32 accumulation, C in
the inputs' dtype: the Hopper-era Triton matmul, one output tile per program.

Its optimizations, each a constexpr or a compile option the pathologies override
(conf/pathology/*.yaml):
- grouped tile order (GROUP_M): programs walk the output in column strips GROUP_M tiles tall,
  so that the A rows and B columns a wave of programs reads stay in L2;
- TMA (USE_TMA): A and B tiles come through tensor descriptors (the copy engine, no address
  arithmetic in the threads, no masks), C leaves through one too (TMA_STORE); without them,
  pointer loads with masks (cp.async) and a pointer store;
- descriptors made by the host (HOST_TMA): the kernel takes A's, B's and C's as parameters
  (a_host, b_host, c_host; Triton's launcher encodes them at each launch, on the host's time,
  which a CUDA graph's replay does not repeat), instead of each program making three on the
  device (tl.make_tensor_descriptor: stores to global scratch, an exchange, the descriptor
  cache's line invalidated, two barriers) before its first load. Measured on the
  H200 (2026-12-03, docs/history/2026-12-03.md): the same tile 0.55-0.92 of the time at the
  random check's shapes under 8 us, 0.84-1.00 over 30 us;
- the block (BLOCK_M x BLOCK_N x BLOCK_K): a 128 x 256 tile reuses each A and B element
  256 and 128 times from shared memory;
- software pipelining (the compile option num_stages): the K loop keeps num_stages - 1 tiles
  in flight while the tensor cores (wgmma) work on the current one;
- num_warps: two warpgroups share the 128 x 256 accumulator;
- a persistent grid (PERSISTENT): one program per SM (NUM_SMS of them) walks its share of
  the tiles, and with the step a constant Triton fuses the tile loop into the K loop: one
  software pipeline runs across tiles, the next tile's first loads issued before this tile's
  epilogue. Measured on the H100 (Triton's JIT, 2026-11-25; docs/benchmarks.md): a program
  per tile 1490 us at the BF16 prefill shape, persistent with a runtime step (the loops not
  fused, as the TTGIR shows) 1535 us, fused 1358 us against cuBLAS's 1350 us.
- programmatic dependent launch (USE_GDC, with the compile option launch_pdl): the launch may
  start while the one before it in the stream is finishing; each program waits for it
  (`gdc_wait`: its writes visible) before it touches memory, and a program per tile at once lets
  the next launch start (`gdc_launch_dependents`), so that one launch's start overlaps the
  other's end. Measured on the H200 (2026-12-02, docs/history/2026-12-02.md): 0.23-0.65 us off
  each launch of a program per tile at five shapes of 3-11 us (320 x 464 x 208: 3.07 -> 2.73 us,
  cuBLAS 2.85); a persistent program lets the next launch start only as it ends (its programs
  would hold an SM's resources while this one's still loop: m64 at 256 x 6832 x 400 ran 0.92 us
  slower with the early release). Measured between launches of itself; after another kernel
  the overlap is what that kernel allows (without its own early release, its programs' ends).
STRIP_N (0 in the base; spec.CANDIDATES' wide_strip) widens each tile by a strip of STRIP_N
columns past its BLOCK_N (`strip_steps`): each K step's A tile feeds two products, so that a tile
of BLOCK_N + STRIP_N columns (256 + 64 = 320) fills a wave where the powers of two leave one wave
and a tail (1616 x 2864: 117 tiles of 128 x 320 against 156 of 128 x 256); the strip's columns
leave by a pointer store, the tile loop not flattened into the K loop.
SPLIT_K (1 in the base; spec.CANDIDATES' splitk* builds) splits each tile's K steps over
SPLIT_K programs (`split_k_program`), for shapes of few tiles and a long K: each adds its
partial sums to a workspace (`ws`, FP32), and the last of a tile's programs to arrive (a counter
per tile in `locks`) sums them into C. The kernel keeps the invariant the workspace needs:
every counter is 0 before and after each launch (the last program resets its tile's).
"""
import triton
import triton.language as tl


@triton.jit
def tile_of(pid, M, N, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, GROUP_M: tl.constexpr):
    """The (row, column) tile of program `pid`: grouped order, GROUP_M tiles down each strip
    (GROUP_M = 1: row-major order, one row of tiles after another)."""
    num_pid_m = tl.cdiv(M, BLOCK_M)
    num_pid_n = tl.cdiv(N, BLOCK_N)
    if GROUP_M == 1:
        return pid // num_pid_n, pid % num_pid_n
    else:
        in_group = GROUP_M * num_pid_n
        group = pid // in_group
        first_m = group * GROUP_M
        size_m = min(num_pid_m - first_m, GROUP_M)
        return first_m + (pid % in_group) % size_m, (pid % in_group) // size_m


@triton.jit
def k_steps(acc, a_src, b_src, off_m, off_n, k_lo, k_hi, M, N, K, stride_am, stride_ak, stride_bk, stride_bn,
            BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr, USE_TMA: tl.constexpr):
    """`acc` plus the products of K steps k_lo <= k < k_hi of the tile at (off_m, off_n): A and B
    through their descriptors (a_src, b_src; USE_TMA) or pointers with masks."""
    if USE_TMA:
        for k in tl.range(k_lo, k_hi):
            x = a_src.load([off_m, k * BLOCK_K])
            y = b_src.load([k * BLOCK_K, off_n])
            acc = tl.dot(x, y, acc)
    else:
        rm = off_m + tl.arange(0, BLOCK_M)
        rn = off_n + tl.arange(0, BLOCK_N)
        rk = tl.arange(0, BLOCK_K)
        a_ptrs = a_src + rm[:, None] * stride_am + (k_lo * BLOCK_K + rk[None, :]) * stride_ak
        b_ptrs = b_src + (k_lo * BLOCK_K + rk[:, None]) * stride_bk + rn[None, :] * stride_bn
        for k in tl.range(k_lo, k_hi):
            k_left = K - k * BLOCK_K
            x = tl.load(a_ptrs, mask=(rm[:, None] < M) & (rk[None, :] < k_left), other=0.0)
            y = tl.load(b_ptrs, mask=(rk[:, None] < k_left) & (rn[None, :] < N), other=0.0)
            acc = tl.dot(x, y, acc)
            a_ptrs += BLOCK_K * stride_ak
            b_ptrs += BLOCK_K * stride_bk
    return acc


@triton.jit
def strip_steps(acc, acc_s, a_src, b_src, s_src, off_m, off_n, k_lo, k_hi, M, N, K, stride_am, stride_ak, stride_bk,
                stride_bn, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr,
                STRIP_N: tl.constexpr, USE_TMA: tl.constexpr):
    """k_steps for a tile of BLOCK_N + STRIP_N columns: each K step's A tile feeds `acc` (the
    BLOCK_N columns from off_n) and `acc_s` (the STRIP_N columns after them; B's block through
    s_src with USE_TMA, else by pointers like the rest)."""
    if USE_TMA:
        for k in tl.range(k_lo, k_hi):
            x = a_src.load([off_m, k * BLOCK_K])
            y = b_src.load([k * BLOCK_K, off_n])
            z = s_src.load([k * BLOCK_K, off_n + BLOCK_N])
            acc = tl.dot(x, y, acc)
            acc_s = tl.dot(x, z, acc_s)
    else:
        rm = off_m + tl.arange(0, BLOCK_M)
        rn = off_n + tl.arange(0, BLOCK_N)
        rs = off_n + BLOCK_N + tl.arange(0, STRIP_N)
        rk = tl.arange(0, BLOCK_K)
        a_ptrs = a_src + rm[:, None] * stride_am + (k_lo * BLOCK_K + rk[None, :]) * stride_ak
        b_ptrs = b_src + (k_lo * BLOCK_K + rk[:, None]) * stride_bk + rn[None, :] * stride_bn
        s_ptrs = b_src + (k_lo * BLOCK_K + rk[:, None]) * stride_bk + rs[None, :] * stride_bn
        for k in tl.range(k_lo, k_hi):
            k_left = K - k * BLOCK_K
            x = tl.load(a_ptrs, mask=(rm[:, None] < M) & (rk[None, :] < k_left), other=0.0)
            y = tl.load(b_ptrs, mask=(rk[:, None] < k_left) & (rn[None, :] < N), other=0.0)
            z = tl.load(s_ptrs, mask=(rk[:, None] < k_left) & (rs[None, :] < N), other=0.0)
            acc = tl.dot(x, y, acc)
            acc_s = tl.dot(x, z, acc_s)
            a_ptrs += BLOCK_K * stride_ak
            b_ptrs += BLOCK_K * stride_bk
            s_ptrs += BLOCK_K * stride_bk
    return acc, acc_s


@triton.jit
def store_tile(c, out, off_m, off_n, M, N, stride_cm, stride_cn, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr):
    """The tile `out` at (off_m, off_n) of C by a pointer store, masked to M x N."""
    rm = off_m + tl.arange(0, BLOCK_M)
    rn = off_n + tl.arange(0, BLOCK_N)
    tl.store(c + rm[:, None] * stride_cm + rn[None, :] * stride_cn, out,
             mask=(rm[:, None] < M) & (rn[None, :] < N))


@triton.jit
def add_partial(acc, slots, lock, s, splits, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, UNROLL: tl.constexpr):
    """Split `s` of `splits` of a tile: its FP32 partial `acc` stored to slot s of the tile's
    `splits` slots at `slots` (side by side); then one atomic on the tile's counter `lock`,
    acquire-release at GPU scope after a barrier (every thread's stores done first). Returns
    (C's tile in FP32, True) to the split that finds splits - 1 there, the last to arrive, which
    sums the partials in order (read through L2, `.cg`: the other programs' stores are not in this
    SM's L1) and sets the counter back to 0; (acc, False) to the others, which store nothing. No
    program waits for another. UNROLL: `splits` is a constexpr, the sum unrolled."""
    tile_slots = slots + tl.arange(0, BLOCK_M)[:, None] * BLOCK_N + tl.arange(0, BLOCK_N)[None, :]
    tl.store(tile_slots + s * BLOCK_M * BLOCK_N, acc)
    tl.debug_barrier()
    last = tl.atomic_add(lock, 1, sem="acq_rel", scope="gpu") == splits - 1
    if last:
        acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
        if UNROLL:
            for j in tl.static_range(splits):
                acc += tl.load(tile_slots + j * BLOCK_M * BLOCK_N, cache_modifier=".cg")
        else:
            for j in range(splits):
                acc += tl.load(tile_slots + j * BLOCK_M * BLOCK_N, cache_modifier=".cg")
        tl.atomic_xchg(lock, 0, sem="relaxed", scope="gpu")
    return acc, last


@triton.jit
def split_k_program(a_src, b_src, c, ws, locks, M, N, K, WS_SIZE, LOCKS_SIZE,
                    stride_am, stride_ak, stride_bk, stride_bn, stride_cm, stride_cn,
                    BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr, GROUP_M: tl.constexpr,
                    USE_TMA: tl.constexpr, SPLIT_K: tl.constexpr):
    """Program (tile, s) = divmod(program_id, SPLIT_K) of a grid of tiles x SPLIT_K: K steps
    [s * per, (s + 1) * per) of its tile (per = cdiv(K steps, SPLIT_K)) into an FP32 partial tile,
    added to the tile's others in `ws` (the SPLIT_K slots of a tile side by side) by `add_partial`,
    whose last to arrive stores C. Where the workspace is too small for the shape (WS_SIZE
    elements, LOCKS_SIZE counters), split 0 runs every K step and stores C alone, the others store
    nothing: correct, and slow, so that the timing never picks a split-K candidate there."""
    num_tiles = tl.cdiv(M, BLOCK_M) * tl.cdiv(N, BLOCK_N)
    k_tiles = tl.cdiv(K, BLOCK_K)
    tile = tl.program_id(0) // SPLIT_K
    s = tl.program_id(0) % SPLIT_K
    fits = (num_tiles <= WS_SIZE // (SPLIT_K * BLOCK_M * BLOCK_N)) & (num_tiles <= LOCKS_SIZE)
    per = k_tiles
    if fits:
        per = tl.cdiv(k_tiles, SPLIT_K)
    pid_m, pid_n = tile_of(tile, M, N, BLOCK_M, BLOCK_N, GROUP_M)
    off_m = pid_m * BLOCK_M
    off_n = pid_n * BLOCK_N
    acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
    acc = k_steps(acc, a_src, b_src, off_m, off_n, s * per, tl.minimum(s * per + per, k_tiles), M, N, K,
                  stride_am, stride_ak, stride_bk, stride_bn, BLOCK_M, BLOCK_N, BLOCK_K, USE_TMA)
    last = s == 0
    if fits:
        acc, last = add_partial(acc, ws + tile * SPLIT_K * BLOCK_M * BLOCK_N, locks + tile, s, SPLIT_K,
                                BLOCK_M, BLOCK_N, True)
    if last:
        store_tile(c, acc.to(c.dtype.element_ty), off_m, off_n, M, N, stride_cm, stride_cn, BLOCK_M, BLOCK_N)


@triton.jit
def tail_splits(num_tiles, k_tiles, WS_SIZE, LOCKS_SIZE, TILE: tl.constexpr, NUM_SMS: tl.constexpr,
                TAIL_SPLIT: tl.constexpr):
    """(whole, splits): the persistent programs compute tiles 0 <= t < whole alone, the full waves,
    then split each of the other tiles' K steps in `splits` equal ranges over the programs the
    last wave leaves idle: as many as fit in NUM_SMS programs, at most TAIL_SPLIT and k_tiles,
    and the workspace (WS_SIZE FP32 elements, TILE a split; LOCKS_SIZE counters). A split's
    programs start at the same K step, so that a group's tiles read the same slices of A and B
    (a stream-K of 132 shares starting at 132 K steps ran its shared K steps at ~0.6 of the full
    waves' rate: docs/history/2026-12-02.md). splits = 1, whole = num_tiles where none fits or
    the last wave is more than half full: every tile a program's alone."""
    whole = num_tiles // NUM_SMS * NUM_SMS
    tail = tl.maximum(num_tiles - whole, 1)
    splits = tl.minimum(tl.minimum(NUM_SMS // tail, TAIL_SPLIT), tl.minimum(k_tiles, WS_SIZE // TILE // tail))
    if (splits < 2) | (num_tiles - whole > LOCKS_SIZE):
        whole = num_tiles
        splits = 1
    return whole, splits


@triton.jit
def matmul_kernel(a, b, c, M, N, K,
                  stride_am, stride_ak, stride_bk, stride_bn, stride_cm, stride_cn,
                  ws, locks, WS_SIZE, LOCKS_SIZE,
                  BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr,
                  GROUP_M: tl.constexpr, USE_TMA: tl.constexpr, TMA_STORE: tl.constexpr,
                  PERSISTENT: tl.constexpr, NUM_SMS: tl.constexpr,
                  SPLIT_K: tl.constexpr = 1, USE_GDC: tl.constexpr = False, TAIL_SPLIT: tl.constexpr = 1,
                  HOST_TMA: tl.constexpr = False, a_host=None, b_host=None, c_host=None,
                  STRIP_N: tl.constexpr = 0, s_host=None):
    """Each program computes the tiles program_id, program_id + step, ...: with PERSISTENT
    the grid has NUM_SMS programs and the step is NUM_SMS, a constant, which lets Triton
    flatten the two loops into one pipeline (with a runtime step it leaves them apart);
    without, a program per tile and the loop runs once. SPLIT_K > 1: a program per tile and
    split (`split_k_program`; PERSISTENT and TMA_STORE are not read there). TAIL_SPLIT > 1 (with
    PERSISTENT): the tiles past the last full wave are split over the programs the full waves
    leave idle (`tail_splits`). ws and locks are read only by those two. USE_GDC: launched
    dependent on the launch before it (the module's notes). HOST_TMA (with USE_TMA): A, B and C's
    descriptors come made by the host (a_host, b_host, c_host: spec.descriptors), kernel
    parameters, instead of three made on the device by each program before its first load.
    STRIP_N > 0 (not with SPLIT_K or TAIL_SPLIT): tiles of BLOCK_N + STRIP_N columns
    (`strip_steps`; s_host: B's descriptor of the strip's block with HOST_TMA)."""
    tl.static_assert(STRIP_N == 0 or (SPLIT_K == 1 and TAIL_SPLIT == 1), "STRIP_N with SPLIT_K or TAIL_SPLIT")
    if USE_GDC:
        tl.extra.cuda.gdc_wait()
        if SPLIT_K > 1 or not PERSISTENT:
            tl.extra.cuda.gdc_launch_dependents()
    dtype = c.dtype.element_ty
    WIDTH: tl.constexpr = BLOCK_N + STRIP_N  # a tile's columns
    num_tiles = tl.cdiv(M, BLOCK_M) * tl.cdiv(N, WIDTH)
    k_tiles = tl.cdiv(K, BLOCK_K)
    s_src = b
    if USE_TMA and HOST_TMA:
        a_src = a_host
        b_src = b_host
        if STRIP_N > 0:
            s_src = s_host
    elif USE_TMA:
        a_src = tl.make_tensor_descriptor(a, shape=[M, K], strides=[stride_am, stride_ak],
                                          block_shape=[BLOCK_M, BLOCK_K])
        b_src = tl.make_tensor_descriptor(b, shape=[K, N], strides=[stride_bk, stride_bn],
                                          block_shape=[BLOCK_K, BLOCK_N])
        if STRIP_N > 0:
            s_src = tl.make_tensor_descriptor(b, shape=[K, N], strides=[stride_bk, stride_bn],
                                              block_shape=[BLOCK_K, STRIP_N])
    else:
        a_src = a
        b_src = b
    if SPLIT_K > 1:
        split_k_program(a_src, b_src, c, ws, locks, M, N, K, WS_SIZE, LOCKS_SIZE,
                        stride_am, stride_ak, stride_bk, stride_bn, stride_cm, stride_cn,
                        BLOCK_M, BLOCK_N, BLOCK_K, GROUP_M, USE_TMA, SPLIT_K)
    else:
        if TMA_STORE and HOST_TMA:
            c_desc = c_host
        elif TMA_STORE:
            c_desc = tl.make_tensor_descriptor(c, shape=[M, N], strides=[stride_cm, stride_cn],
                                               block_shape=[BLOCK_M, BLOCK_N])
        step = NUM_SMS if PERSISTENT else tl.num_programs(0)
        whole = num_tiles  # the tiles a program computes alone
        splits = 1
        if PERSISTENT and TAIL_SPLIT > 1:
            whole, splits = tail_splits(num_tiles, k_tiles, WS_SIZE, LOCKS_SIZE, BLOCK_M * BLOCK_N, NUM_SMS,
                                        TAIL_SPLIT)
        # a strip's tiles keep the loops apart: flattened, the two accumulators' K loop compiles to
        # wgmma serialized one at a time (ptxas C7515: 8 WARPGROUP.DEPBAR a K step against 3; a 32-column
        # strip at 2.0x wide's time at 1088 x 4848 x 3984, H200, 2026-12-03), apart to the pipelined one
        for tile in tl.range(tl.program_id(0), whole, step, flatten=PERSISTENT and STRIP_N == 0):
            pid_m, pid_n = tile_of(tile, M, N, BLOCK_M, WIDTH, GROUP_M)
            off_m = pid_m * BLOCK_M
            off_n = pid_n * WIDTH
            acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
            if STRIP_N > 0:
                acc_s = tl.zeros((BLOCK_M, STRIP_N), dtype=tl.float32)
                acc, acc_s = strip_steps(acc, acc_s, a_src, b_src, s_src, off_m, off_n, 0, k_tiles, M, N, K,
                                         stride_am, stride_ak, stride_bk, stride_bn, BLOCK_M, BLOCK_N, BLOCK_K,
                                         STRIP_N, USE_TMA)
                store_tile(c, acc_s.to(dtype), off_m, off_n + BLOCK_N, M, N, stride_cm, stride_cn, BLOCK_M, STRIP_N)
            else:
                acc = k_steps(acc, a_src, b_src, off_m, off_n, 0, k_tiles, M, N, K, stride_am, stride_ak,
                              stride_bk, stride_bn, BLOCK_M, BLOCK_N, BLOCK_K, USE_TMA)
            out = acc.to(dtype)
            if TMA_STORE:
                c_desc.store([off_m, off_n], out)
            else:
                store_tile(c, out, off_m, off_n, M, N, stride_cm, stride_cn, BLOCK_M, BLOCK_N)

        if PERSISTENT and TAIL_SPLIT > 1:
            # the tail: program p takes split p % splits of tile whole + p // splits, its share of
            # the K steps, and the tile's last split to arrive stores it (add_partial)
            part = tl.program_id(0)
            if part < (num_tiles - whole) * splits:
                t = part // splits
                s = part % splits
                per = tl.cdiv(k_tiles, splits)
                pid_m, pid_n = tile_of(whole + t, M, N, BLOCK_M, BLOCK_N, GROUP_M)
                off_m = pid_m * BLOCK_M
                off_n = pid_n * BLOCK_N
                acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
                acc = k_steps(acc, a_src, b_src, off_m, off_n, s * per, tl.minimum(s * per + per, k_tiles), M, N,
                              K, stride_am, stride_ak, stride_bk, stride_bn, BLOCK_M, BLOCK_N, BLOCK_K, USE_TMA)
                acc, last = add_partial(acc, ws + t * splits * BLOCK_M * BLOCK_N, locks + t, s, splits,
                                        BLOCK_M, BLOCK_N, False)
                if last:
                    if TMA_STORE:
                        c_desc.store([off_m, off_n], acc.to(dtype))
                    else:
                        store_tile(c, acc.to(dtype), off_m, off_n, M, N, stride_cm, stride_cn, BLOCK_M, BLOCK_N)
