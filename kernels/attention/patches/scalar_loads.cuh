// scalar_loads: 2-byte global loads, one half at a time, in place of 16-byte cp.async:
// eight times the load instructions, and each value passes through a register
// (cp.async cannot move fewer than 4 bytes), so the copies are synchronous.
#pragma once
#ifdef ABLATE_SCALAR_LOADS
#ifdef ABLATE_SEAM_GMEM_LOAD
#error "scalar_loads: another pathology already replaces the gmem_load seam"
#endif
#include <cuda_fp16.h>
struct ScalarLoads {
  template <int kRows, int kChunks, int kThreads, class Layout, bool kAsync>
  __device__ __forceinline__ static void tile(half* smem, const half* gmem, int valid_rows,
                                              int tid) {
    constexpr int kCols = kChunks * 8;
    const auto* src = reinterpret_cast<const unsigned short*>(gmem);
    static_assert((kRows * kCols) % kThreads == 0, "whole passes");
#pragma unroll 8
    for (int i = 0; i < kRows * kCols / kThreads; ++i) {
      const int id = tid + i * kThreads;
      const int row = id / kCols, col = id % kCols;
      const unsigned short v = row < valid_rows ? src[row * kCols + col] : 0;
      *reinterpret_cast<unsigned short*>(smem + Layout::template offset<kChunks>(row, col / 8) +
                                         col % 8) = v;
    }
  }
};
#define ABLATE_SEAM_GMEM_LOAD ScalarLoads
#endif
