// no_swizzle: plain row-major shared memory. The 8 rows one ldmatrix phase reads share a
// logical chunk, so with 128-byte (D=64) or 256-byte (D=128) rows they hit the same four
// banks: an 8-way conflict on every K, V and Q fragment.
#pragma once
#ifdef ABLATE_NO_SWIZZLE
#ifdef ABLATE_SEAM_SMEM_LAYOUT
#error "no_swizzle: another pathology already replaces the smem_layout seam"
#endif
struct RowMajorLayout {
  template <int kChunks>
  __device__ __forceinline__ static int offset(int row, int chunk) {
    return (row * kChunks + chunk) * 8;
  }
};
#define ABLATE_SEAM_SMEM_LAYOUT RowMajorLayout
#endif
