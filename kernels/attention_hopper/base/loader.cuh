// The copy engine as loader: one thread (`tid` 0 of the warpgroup that loads) has TMA bring
// Q in once per query tile and K, V tile by tile into the ring, each stage waited empty
// before it is refilled; the copies of one tile are the layout's (T::Layout::load,
// base/layout.cuh). `slot` counts the key tiles that went through the ring before this one,
// over all of the block's query tiles; `j` is the key tile's index in its head.
#pragma once
#include "base/tma.cuh"

struct TmaLoader {
  static constexpr int kArrivals = 1;  // arrivals that fill a stage (with its bytes)

  // The query tile numbered `count` of the block, once the previous one's Q is released.
  template <class T, class Sh, class P>
  __device__ __forceinline__ static void load_q(const P& p, const Sh& sh, int row0, int bh,
                                                int count, int tid) {
    if (tid != 0) return;
    mbar_wait(sh.q_empty(), (count & 1) ^ 1);
    mbar_expect_bytes(sh.q_full(), T::kQBytes);
    T::Layout::template load<T, T::kBlockM>(sh.q(), &p.tm_q, sh.q_full(), row0, bh);
  }
  template <class T, class Sh, class P>
  __device__ __forceinline__ static void load_k(const P& p, const Sh& sh, int slot, int j, int bh,
                                                int tid) {
    const int st = slot % Sh::kStages;
    if (tid == 0)
      load_stage<T, Sh>(sh.k(st), &p.tm_k, sh.k_full(st), sh.k_empty(st), slot, j, bh);
  }
  template <class T, class Sh, class P>
  __device__ __forceinline__ static void load_v(const P& p, const Sh& sh, int slot, int j, int bh,
                                                int tid) {
    const int st = slot % Sh::kStages;
    if (tid == 0)
      load_stage<T, Sh>(sh.v(st), &p.tm_v, sh.v_full(st), sh.v_empty(st), slot, j, bh);
  }

  // One K or V tile into its stage, once the tile kStages before it has left.
  template <class T, class Sh>
  __device__ __forceinline__ static void load_stage(uint8_t* dst, const CUtensorMap* map,
                                                    uint64_t* full, uint64_t* empty, int slot,
                                                    int j, int bh) {
    mbar_wait(empty, ((slot / Sh::kStages) & 1) ^ 1);
    mbar_expect_bytes(full, T::kKVBytes);
    T::Layout::template load<T, T::kBlockN>(dst, map, full, j * T::kBlockN, bh);
  }
};
