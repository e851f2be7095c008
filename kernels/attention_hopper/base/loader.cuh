// The producer: one thread of the producer warpgroup has the copy engine load Q once, then
// K and V tile by tile into the ring, each stage waited empty before it is refilled. The
// copies of one tile are the layout's (T::Layout::load, base/layout.cuh).
#pragma once
#include "base/tma.cuh"

struct TmaLoader {
  static constexpr int kArrivals = 1;  // arrivals that fill a stage (with its bytes)

  template <class T, class Sh, class P>
  __device__ __forceinline__ static void run(const P& p, const Sh& sh, int row0, int bh,
                                             int n_tiles, int tid) {
    if (tid != 0) return;
    constexpr int kStages = Sh::kStages;
    mbar_expect_bytes(sh.q_full(), T::kQBytes);
    T::Layout::template load<T, T::kBlockM>(sh.q(), &p.tm_q, sh.q_full(), row0, bh);
    for (int j = 0; j < n_tiles; ++j) {
      const int st = j % kStages;
      const uint32_t phase = (j / kStages) & 1;
      mbar_wait(sh.k_empty(st), phase ^ 1);
      mbar_expect_bytes(sh.k_full(st), T::kKVBytes);
      T::Layout::template load<T, T::kBlockN>(sh.k(st), &p.tm_k, sh.k_full(st), j * T::kBlockN, bh);
      mbar_wait(sh.v_empty(st), phase ^ 1);
      mbar_expect_bytes(sh.v_full(st), T::kKVBytes);
      T::Layout::template load<T, T::kBlockN>(sh.v(st), &p.tm_v, sh.v_full(st), j * T::kBlockN, bh);
    }
  }

  // The same copies one at a time, for roles without a producer: thread `tid` of the
  // warpgroup that loads calls load_q once, then load_k and load_v for each tile j, which wait
  // until tile j - kStages has left the stage.
  template <class T, class Sh, class P>
  __device__ __forceinline__ static void load_q(const P& p, const Sh& sh, int row0, int bh, int tid) {
    if (tid != 0) return;
    mbar_expect_bytes(sh.q_full(), T::kQBytes);
    T::Layout::template load<T, T::kBlockM>(sh.q(), &p.tm_q, sh.q_full(), row0, bh);
  }
  template <class T, class Sh, class P>
  __device__ __forceinline__ static void load_k(const P& p, const Sh& sh, int j, int bh, int tid) {
    if (tid != 0) return;
    const int st = j % Sh::kStages;
    mbar_wait(sh.k_empty(st), ((j / Sh::kStages) & 1) ^ 1);
    mbar_expect_bytes(sh.k_full(st), T::kKVBytes);
    T::Layout::template load<T, T::kBlockN>(sh.k(st), &p.tm_k, sh.k_full(st), j * T::kBlockN, bh);
  }
  template <class T, class Sh, class P>
  __device__ __forceinline__ static void load_v(const P& p, const Sh& sh, int j, int bh, int tid) {
    if (tid != 0) return;
    const int st = j % Sh::kStages;
    mbar_wait(sh.v_empty(st), ((j / Sh::kStages) & 1) ^ 1);
    mbar_expect_bytes(sh.v_full(st), T::kKVBytes);
    T::Layout::template load<T, T::kBlockN>(sh.v(st), &p.tm_v, sh.v_full(st), j * T::kBlockN, bh);
  }
};
