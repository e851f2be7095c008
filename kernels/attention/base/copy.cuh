// Global -> shared copies of one tile, and the pipeline that overlaps them with compute.
#pragma once
#include <cuda_fp16.h>
#include <cstdint>
#include "mma.cuh"

// One 16-byte chunk, global -> shared. Rows past the end of the sequence are zero-filled
// (src-size 0), so masked keys never multiply garbage that could be NaN.
template <bool kAsync>
__device__ __forceinline__ void copy_chunk(half* dst, const half* src, bool valid) {
  if constexpr (kAsync) {
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n"
                 :: "r"(smem_u32(dst)), "l"(src), "r"(valid ? 16 : 0));
  } else {
    uint4 v = make_uint4(0u, 0u, 0u, 0u);
    if (valid) v = *reinterpret_cast<const uint4*>(src);
    *reinterpret_cast<uint4*>(dst) = v;
  }
}

// Lane i of the block takes chunk i of the tile in row-major order: a warp reads 512
// contiguous bytes (four 128-byte lines) with 16-byte accesses. A thread's chunks sit in
// one column, kThreads / kChunks rows apart, so their addresses differ by constants.
struct CoalescedRows {
  template <int kRows, int kChunks, int kThreads, class Layout, bool kAsync>
  __device__ __forceinline__ static void tile(half* smem, const half* gmem, int valid_rows,
                                              int tid) {
    constexpr int kRowStep = kThreads / kChunks;
    static_assert(kThreads % kChunks == 0 && kRows % kRowStep == 0, "whole rows per pass");
    const int row0 = tid / kChunks, chunk = tid % kChunks;
#pragma unroll
    for (int i = 0; i < kRows / kRowStep; ++i) {
      const int row = row0 + i * kRowStep;
      const bool valid = row < valid_rows;
      copy_chunk<kAsync>(smem + Layout::template offset<kChunks>(row, chunk),
                         gmem + (valid ? row : 0) * kChunks * 8 + chunk * 8, valid);
    }
  }
};

// Multi-stage ring of K/V tiles filled with cp.async: while the block computes on stage
// j % S, the loads of tile j + S - 1 are in flight. One barrier per tile.
struct AsyncRing {
  static constexpr bool kAsync = true;
  template <class T> static constexpr int stages() { return T::kStages; }

  __device__ __forceinline__ static void commit() { asm volatile("cp.async.commit_group;\n"); }
  template <int N> __device__ __forceinline__ static void wait() {
    asm volatile("cp.async.wait_group %0;\n" :: "n"(N));
  }

  // load_q(), load_kv(tile, stage): issue the copies of Q / of one K/V tile.
  template <int kStages, class LoadQ, class LoadKV>
  __device__ __forceinline__ static void prologue(int n_tiles, LoadQ load_q, LoadKV load_kv) {
    load_q();
    commit();
#pragma unroll
    for (int s = 0; s < kStages - 1; ++s) {
      if (s < n_tiles) load_kv(s, s);
      commit();
    }
    wait<kStages - 2>();
    __syncthreads();
  }
  template <int kStages, class LoadKV>
  __device__ __forceinline__ static void before_compute(int j, int n_tiles, LoadKV load_kv) {
    const int next = j + kStages - 1;
    if (next < n_tiles) load_kv(next, next % kStages);
    commit();
  }
  template <int kStages, class LoadKV>
  __device__ __forceinline__ static void after_compute(int, int, LoadKV) {
    wait<kStages - 2>();  // tile j + 1 has landed...
    __syncthreads();      // ...for every thread, and nobody still reads tile j's stage
  }
};
