// The producer's step on one stage of a ring, whichever the loader: wait for the stage empty,
// have the loader move the tile in, mark the stage full (base/pipeline.cuh). The loader only
// moves bytes; it says how many of the producer's threads copy (each arrives once on full)
// and whether its copies complete the full barrier themselves.
#pragma once
#include <cuda_fp16.h>
#include "base/pipeline.cuh"
#include "base/tma.cuh"

// A (B*H, S, D) tensor as either kind of loader reads it: the layout's tensor map for the
// copy engine, the data itself for thread copies.
struct Source {
  const CUtensorMap* map;
  const half* data;
  int seq_len;
};

// kRows rows of the tensor from row i * kStride of head `bh` into stage `s`, by each of the
// loader's threads: Q gives its first row (kStride 1), K and V their key tile's index
// (kStride kRows), multiplied once the stage is empty, as the loaders did before (multiplied
// ahead of the wait, no_warp_specialization's SASS differs).
template <class Loader, class T, int kRows, int kStride>
__device__ __forceinline__ void fill(const Stage& s, const Source& src, int i, int bh, int tid) {
  wait_empty(s);
  if (Loader::kCopyEngine) arrive_full(s, kRows * T::kHeadDim * 2);
  Loader::template copy<T, kRows>(s, src, i * kStride, bh, tid);
  if (!Loader::kCopyEngine) arrive_full(s);
}

// The copy engine as loader: one thread (`tid` 0 of the warpgroup that loads) has TMA bring
// the tile in, with the layout's copies (T::Layout::load, base/layout.cuh), which complete
// the stage's full barrier as their bytes land.
struct TmaLoader {
  static constexpr int kArrivals = 1;        // threads that copy and arrive on full
  static constexpr bool kCopyEngine = true;  // the arrival arms full with the tile's bytes
  template <class T, int kRows>
  __device__ __forceinline__ static void copy(const Stage& s, const Source& src, int row0, int bh,
                                              int) {
    T::Layout::template load<T, kRows>(s.data, src.map, s.full, row0, bh);
  }
};
