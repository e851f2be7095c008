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
#include <cuda_fp16.h>
#include "base/tma.cuh"

struct ThreadCopies {
  static constexpr int kArrivals = 128;  // every producer thread arrives after its copies

  // kRows rows of D halves from row `row0` of a head, zeros past the sequence end, where TMA
  // would have written them (the tiles' layout, T::Layout).
  template <class T, int kRows>
  __device__ __forceinline__ static void tile(uint8_t* dst, const half* head, int row0, int seq,
                                              int tid) {
    constexpr int kChunks = T::kHeadDim / 8;
    for (int i = tid; i < kRows * kChunks; i += 128) {
      const int r = i / kChunks, c = i % kChunks;
      uint4 v = make_uint4(0, 0, 0, 0);
      if (row0 + r < seq)
        v = *reinterpret_cast<const uint4*>(head + static_cast<int64_t>(row0 + r) * T::kHeadDim + c * 8);
      *reinterpret_cast<uint4*>(T::Layout::template at<kRows>(dst, r, c)) = v;
    }
    fence_async_smem();
  }

  template <class T, class Sh, class P>
  __device__ __forceinline__ static void run(const P& p, const Sh& sh, int row0, int bh,
                                             int n_tiles, int tid) {
    constexpr int kStages = Sh::kStages;
    const int64_t head = static_cast<int64_t>(bh) * p.seq_len * T::kHeadDim;
    tile<T, T::kBlockM>(sh.q(), p.q + head, row0, p.seq_len, tid);
    mbar_arrive(sh.q_full());
    for (int j = 0; j < n_tiles; ++j) {
      const int st = j % kStages;
      const uint32_t phase = (j / kStages) & 1;
      mbar_wait(sh.k_empty(st), phase ^ 1);
      tile<T, T::kBlockN>(sh.k(st), p.k + head, j * T::kBlockN, p.seq_len, tid);
      mbar_arrive(sh.k_full(st));
      mbar_wait(sh.v_empty(st), phase ^ 1);
      tile<T, T::kBlockN>(sh.v(st), p.v + head, j * T::kBlockN, p.seq_len, tid);
      mbar_arrive(sh.v_full(st));
    }
  }

  // The same copies one at a time, for roles without a producer (every thread of the
  // warpgroup that loads calls each, as TmaLoader's load_q, load_k, load_v).
  template <class T, class Sh, class P>
  __device__ __forceinline__ static void load_q(const P& p, const Sh& sh, int row0, int bh, int tid) {
    tile<T, T::kBlockM>(sh.q(), p.q + static_cast<int64_t>(bh) * p.seq_len * T::kHeadDim, row0,
                        p.seq_len, tid);
    mbar_arrive(sh.q_full());
  }
  template <class T, class Sh, class P>
  __device__ __forceinline__ static void load_k(const P& p, const Sh& sh, int j, int bh, int tid) {
    const int st = j % Sh::kStages;
    mbar_wait(sh.k_empty(st), ((j / Sh::kStages) & 1) ^ 1);
    tile<T, T::kBlockN>(sh.k(st), p.k + static_cast<int64_t>(bh) * p.seq_len * T::kHeadDim,
                        j * T::kBlockN, p.seq_len, tid);
    mbar_arrive(sh.k_full(st));
  }
  template <class T, class Sh, class P>
  __device__ __forceinline__ static void load_v(const P& p, const Sh& sh, int j, int bh, int tid) {
    const int st = j % Sh::kStages;
    mbar_wait(sh.v_empty(st), ((j / Sh::kStages) & 1) ^ 1);
    tile<T, T::kBlockN>(sh.v(st), p.v + static_cast<int64_t>(bh) * p.seq_len * T::kHeadDim,
                        j * T::kBlockN, p.seq_len, tid);
    mbar_arrive(sh.v_full(st));
  }
};
#define ABLATE_SEAM_LOADER ThreadCopies
#endif
