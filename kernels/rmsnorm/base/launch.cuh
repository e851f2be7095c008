// The launch seam: per hidden bucket, how many threads a row gets, how many rows a block
// holds and how many 16-byte vectors of the row each thread keeps in registers; one table for
// many rows (bandwidth) and one for few rows (latency). The library holds one kernel instance
// per (dtype, bucket, table); a call runs the smallest bucket >= hidden, from the few-rows
// table while all the rows fit in one wave of its blocks (rmsnorm.cu, dispatch).
//
// Many rows (throughput): 4 vectors (64 bytes of x, 16 registers) per thread, the row's
// vectors dealt round-robin over bucket / 32 threads, 256 threads a block (512 at 16384):
//
//   bucket  threads/row  rows/block  threads  x bytes/block  regs  blocks/SM  x in flight/SM
//     256         8          32        256        16 KB        48        5          80 KB
//    1024        32           8        256        16 KB        48        5          80 KB
//    2048        64           4        256        16 KB        48        5          80 KB
//    4096       128           2        256        16 KB        48        5          80 KB
//    8192       256           1        256        16 KB        48        5          80 KB
//   16384       512           1        512        32 KB        50        2          64 KB
//
// (regs: ptxas on sm_90, FP16 and BF16 alike.) Little's law asks ~3 TB/s x ~1 us = ~3 MB in
// flight over 132 SMs, ~24 KB per SM; only a block in its load phase has reads in flight, so
// several blocks per SM at different phases are needed, and 5 of 16 KB give ~3x the minimum.
// Measured on the H100: 2960-3020 GB/s at 16384 x 8192, 65536 x 4096, 262144 x 1024,
// 8192 x 16384 and 2097152 x 128, within 1.5% of torch.compile's Triton kernel either way,
// and no faster when registers were capped at 40 for 6 blocks/SM (not done: it makes most
// pathologies spill, muddling what they measure). Rows of at most 1024 elements fit in a
// warp (or an 8-lane group at 256), so several rows share a block and reduce with shuffles
// alone; one row per block would leave 2-4 KB blocks, and an SM holds at most 32 blocks.
// Below the bucket size a thread holds fewer valid vectors (hidden 5120 in the 8192 bucket:
// 2 or 3 of 4); no thread is idle unless hidden < 8 x threads/row.
//
// Few rows (latency): while every row fits in one wave of blocks, time is one row's critical
// path: a DRAM round trip plus each thread's serial instructions. So each thread takes one
// vector (two at 16384, where a block would otherwise need 2048 threads), each block one row,
// bucket / 8 threads a row (32 to 1024 threads, 24-32 registers: full occupancy, 32 blocks/SM
// at most). Measured on the H100, in CUDA graphs: 16 x 1024 in 1.42 us and 16 x 4096 in
// 1.62 us, against 1.66 and 1.93 us with the many-rows table; 16 x 8192 in 2.03 us against
// 1.96 (a wash); 16 x 16384 in 2.66 us. torch.compile's Triton kernel: 1.40, 1.75-1.90, 2.40
// and 4.28 us. Two vectors a thread, or forcing w's loads ahead of x's first use, changed
// nothing beyond the ~0.05 us noise.
#pragma once
#include <cuda_runtime.h>
#include <type_traits>

template <int kLanes_, int kRows_, int kVecs_>
struct Shape {
  static constexpr int kLanes = kLanes_;  // threads per row (a power of two)
  static constexpr int kRows = kRows_;    // rows per block
  static constexpr int kVecs = kVecs_;    // 8-element (16-byte) vectors per thread
  static constexpr int kThreads = kLanes * kRows;
  static constexpr int kElems = kVecs * 8;  // elements per thread
  static constexpr int kMaxHidden = kLanes * kElems;
  static_assert(kLanes > 0 && (kLanes & (kLanes - 1)) == 0, "threads per row: a power of two");
  static_assert(kThreads % 32 == 0 && kThreads <= 1024, "whole warps, at most 1024 threads");
};

// The tables' constants, as macros a tuning build (and the spec's TUNABLES: ablate's generated
// neighbours, tune_*) can set; the defaults are the base's, its machine code unchanged by them.
#ifndef RMSNORM_VECS            // many rows: 16-byte vectors a thread keeps (4: 64 bytes of x)
#define RMSNORM_VECS 4
#endif
#ifndef RMSNORM_THREADS         // many rows: the fewest threads a block (256; 512 at 16384 by its lanes)
#define RMSNORM_THREADS 256
#endif
#ifndef RMSNORM_FEW_ROWS_VECS   // few rows: vectors a thread (1; twice that above 8192)
#define RMSNORM_FEW_ROWS_VECS 1
#endif

template <int kBucket, bool kFewRows,
          int kVecs = kFewRows ? (kBucket > 8192 ? 2 * RMSNORM_FEW_ROWS_VECS : RMSNORM_FEW_ROWS_VECS) : RMSNORM_VECS,
          int kLanes = kBucket / (8 * kVecs),
          int kThreads = kFewRows ? (kLanes < 32 ? 32 : kLanes) : (kLanes < RMSNORM_THREADS ? RMSNORM_THREADS : kLanes)>
struct BaseLaunch : Shape<kLanes, kThreads / kLanes, kVecs> {};

// The buckets every launch table is instantiated at (their names are the configs' names).
template <int... kMax>
struct HiddenBuckets {
  // f(std::integral_constant<int, bucket>) for the smallest bucket >= hidden.
  template <class F>
  static cudaError_t dispatch(int hidden, F&& f) {
    cudaError_t err = cudaErrorInvalidValue;
    bool done = false;
    ((!done && hidden <= kMax ? (done = true, err = f(std::integral_constant<int, kMax>{})) : err),
     ...);
    return err;
  }
  template <class F>
  static void for_each(F&& f) { (f(std::integral_constant<int, kMax>{}), ...); }
};
using Buckets = HiddenBuckets<256, 1024, 2048, 4096, 8192, 16384>;
