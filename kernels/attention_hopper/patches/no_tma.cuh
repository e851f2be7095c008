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

  // The loader's steps (TmaLoader's), every thread of the producer warpgroup copying.
  template <class T, class Sh, class P>
  __device__ __forceinline__ static void load_q(const P& p, const Sh& sh, int row0, int bh,
                                                int count, int tid) {
    mbar_wait(sh.q_empty(), (count & 1) ^ 1);
    tile<T, T::kBlockM>(sh.q(), p.q + static_cast<int64_t>(bh) * p.seq_len * T::kHeadDim, row0,
                        p.seq_len, tid);
    mbar_arrive(sh.q_full());
  }
  template <class T, class Sh, class P>
  __device__ __forceinline__ static void load_k(const P& p, const Sh& sh, int slot, int j, int bh,
                                                int tid) {
    const int st = slot % Sh::kStages;
    load_stage<T, Sh>(sh.k(st), p.k, sh.k_full(st), sh.k_empty(st), slot, j, bh, p.seq_len, tid);
  }
  template <class T, class Sh, class P>
  __device__ __forceinline__ static void load_v(const P& p, const Sh& sh, int slot, int j, int bh,
                                                int tid) {
    const int st = slot % Sh::kStages;
    load_stage<T, Sh>(sh.v(st), p.v, sh.v_full(st), sh.v_empty(st), slot, j, bh, p.seq_len, tid);
  }
  template <class T, class Sh>
  __device__ __forceinline__ static void load_stage(uint8_t* dst, const half* src, uint64_t* full,
                                                    uint64_t* empty, int slot, int j, int bh,
                                                    int seq, int tid) {
    mbar_wait(empty, ((slot / Sh::kStages) & 1) ^ 1);
    tile<T, T::kBlockN>(dst, src + static_cast<int64_t>(bh) * seq * T::kHeadDim, j * T::kBlockN,
                        seq, tid);
    mbar_arrive(full);
  }
};
#define ABLATE_SEAM_LOADER ThreadCopies
#endif
