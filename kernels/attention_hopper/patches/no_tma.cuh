// no_tma: the producer warpgroup copies Q, K and V itself, 16 bytes a thread through
// registers (global loads, then shared stores at the tiles' layout's addresses, made visible
// to the tensor cores with a proxy fence), instead of one thread handing each tile to the
// copy engine. 128 threads with 24 registers each now spend issue slots and registers on
// every byte.
#pragma once
#ifdef ABLATE_NO_TMA
#ifdef ABLATE_SEAM_LOADER
#error "no_tma: another pathology already replaces the loader seam"
#endif
#include "base/loader.cuh"

struct ThreadCopies {
  static constexpr int kArrivals = 128;       // every producer thread copies, then arrives
  static constexpr bool kCopyEngine = false;
  // kRows rows of D halves from row `row0` of a head, zeros past the sequence end, where TMA
  // would have written them (the tiles' layout, T::Layout).
  template <class T, int kRows>
  __device__ __forceinline__ static void copy(const Stage& s, const Source& src, int row0, int bh,
                                              int tid) {
    constexpr int kChunks = T::kHeadDim / 8;
    const half* head = src.data + static_cast<int64_t>(bh) * src.seq_len * T::kHeadDim;
    for (int i = tid; i < kRows * kChunks; i += 128) {
      const int r = i / kChunks, c = i % kChunks;
      uint4 v = make_uint4(0, 0, 0, 0);
      if (row0 + r < src.seq_len)
        v = *reinterpret_cast<const uint4*>(head + static_cast<int64_t>(row0 + r) * T::kHeadDim + c * 8);
      *reinterpret_cast<uint4*>(T::Layout::template at<kRows>(s.data, r, c)) = v;
    }
    fence_async_smem();
  }
};
#define ABLATE_SEAM_LOADER ThreadCopies
#endif
