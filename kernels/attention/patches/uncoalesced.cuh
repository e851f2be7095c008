// uncoalesced: the lanes of a warp walk down a column of the tile (lane i takes row i),
// so one 16-byte-per-lane request touches 32 rows = 32 different 128-byte lines
// instead of four.
#pragma once
#ifdef ABLATE_UNCOALESCED
#ifdef ABLATE_SEAM_GMEM_LOAD
#error "uncoalesced: another pathology already replaces the gmem_load seam"
#endif
#include "base/copy.cuh"
struct ColumnWalk {
  template <int kRows, int kChunks, int kThreads, class Layout, bool kAsync>
  __device__ __forceinline__ static void tile(half* smem, const half* gmem, int valid_rows,
                                              int tid) {
    static_assert((kRows * kChunks) % kThreads == 0, "whole passes");
#pragma unroll
    for (int i = 0; i < kRows * kChunks / kThreads; ++i) {
      const int id = tid + i * kThreads;
      const int row = id % kRows, chunk = id / kRows;
      const bool valid = row < valid_rows;
      copy_chunk<kAsync>(smem + Layout::template offset<kChunks>(row, chunk),
                         gmem + (valid ? row : 0) * kChunks * 8 + chunk * 8, valid);
    }
  }
};
#define ABLATE_SEAM_GMEM_LOAD ColumnWalk
#endif
