"""C = A @ B for FP16 or BF16 A (M x K) and B (K x N), both row-major, FP32 accumulation, C in
the inputs' dtype: the Hopper-era Triton matmul, one output tile per program.

Its optimizations, each a constexpr or a compile option the pathologies override
(conf/pathology/*.yaml):
- grouped tile order (GROUP_M): programs walk the output in column strips GROUP_M tiles tall,
  so that the A rows and B columns a wave of programs reads stay in L2;
- TMA (USE_TMA): A and B tiles come through tensor descriptors made on the device
  (tl.make_tensor_descriptor: the copy engine, no address arithmetic in the threads, no masks),
  C leaves through one too (TMA_STORE); without them, pointer loads with masks (cp.async) and
  a pointer store;
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
WARP_SPECIALIZE (off in the base; spec.CANDIDATES' *_ws tuning builds) marks the K loop for
Triton's Hopper warp specialization, which splits a 4-warp program into a producer warpgroup
issuing the TMA loads and two consumer warpgroups (12 warps: cuBLAS's 384 threads). The pass
leaves a flattened loop alone, so the tile loop is not flattened then. Measured on the H100
(2026-11-27, docs/benchmarks.md): at most 1.3% faster than the base (decode_m256, sq2k), 3-5%
slower at prefill and sq8k.
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
def matmul_kernel(a, b, c, M, N, K,
                  stride_am, stride_ak, stride_bk, stride_bn, stride_cm, stride_cn,
                  BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr,
                  GROUP_M: tl.constexpr, USE_TMA: tl.constexpr, TMA_STORE: tl.constexpr,
                  PERSISTENT: tl.constexpr, NUM_SMS: tl.constexpr, WARP_SPECIALIZE: tl.constexpr = False):
    """Each program computes the tiles program_id, program_id + step, ...: with PERSISTENT
    the grid has NUM_SMS programs and the step is NUM_SMS, a constant, which lets Triton
    flatten the two loops into one pipeline (with a runtime step it leaves them apart);
    without, a program per tile and the loop runs once."""
    dtype = c.dtype.element_ty
    num_tiles = tl.cdiv(M, BLOCK_M) * tl.cdiv(N, BLOCK_N)
    k_tiles = tl.cdiv(K, BLOCK_K)
    if USE_TMA:
        a_desc = tl.make_tensor_descriptor(a, shape=[M, K], strides=[stride_am, stride_ak],
                                           block_shape=[BLOCK_M, BLOCK_K])
        b_desc = tl.make_tensor_descriptor(b, shape=[K, N], strides=[stride_bk, stride_bn],
                                           block_shape=[BLOCK_K, BLOCK_N])
    if TMA_STORE:
        c_desc = tl.make_tensor_descriptor(c, shape=[M, N], strides=[stride_cm, stride_cn],
                                           block_shape=[BLOCK_M, BLOCK_N])
    step = NUM_SMS if PERSISTENT else tl.num_programs(0)
    for tile in tl.range(tl.program_id(0), num_tiles, step, flatten=PERSISTENT and not WARP_SPECIALIZE):
        pid_m, pid_n = tile_of(tile, M, N, BLOCK_M, BLOCK_N, GROUP_M)
        off_m = pid_m * BLOCK_M
        off_n = pid_n * BLOCK_N
        acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
        if USE_TMA:
            for k in tl.range(0, k_tiles, warp_specialize=WARP_SPECIALIZE):
                x = a_desc.load([off_m, k * BLOCK_K])
                y = b_desc.load([k * BLOCK_K, off_n])
                acc = tl.dot(x, y, acc)
        else:
            rm = off_m + tl.arange(0, BLOCK_M)
            rn = off_n + tl.arange(0, BLOCK_N)
            rk = tl.arange(0, BLOCK_K)
            a_ptrs = a + rm[:, None] * stride_am + rk[None, :] * stride_ak
            b_ptrs = b + rk[:, None] * stride_bk + rn[None, :] * stride_bn
            for k in tl.range(0, k_tiles):
                k_left = K - k * BLOCK_K
                x = tl.load(a_ptrs, mask=(rm[:, None] < M) & (rk[None, :] < k_left), other=0.0)
                y = tl.load(b_ptrs, mask=(rk[:, None] < k_left) & (rn[None, :] < N), other=0.0)
                acc = tl.dot(x, y, acc)
                a_ptrs += BLOCK_K * stride_ak
                b_ptrs += BLOCK_K * stride_bk
        out = acc.to(dtype)
        if TMA_STORE:
            c_desc.store([off_m, off_n], out)
        else:
            rm = off_m + tl.arange(0, BLOCK_M)
            rn = off_n + tl.arange(0, BLOCK_N)
            tl.store(c + rm[:, None] * stride_cm + rn[None, :] * stride_cn, out,
                     mask=(rm[:, None] < M) & (rn[None, :] < N))
