// Shared-memory layout of a tile: rows of head-dim halves, addressed in 16-byte chunks.
#pragma once

// XOR swizzle: chunk c of row r lives at chunk c ^ (r % 8). The 8 rows that one ldmatrix
// phase reads (same logical chunk, consecutive rows) land on 8 different 16-byte bank
// groups, so they are served in one pass instead of eight.
struct SwizzledLayout {
  template <int kChunks>
  __device__ __forceinline__ static int offset(int row, int chunk) {  // in halves
    return (row * kChunks + (chunk ^ (row & 7))) * 8;
  }
};
