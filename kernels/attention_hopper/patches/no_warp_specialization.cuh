// no_warp_specialization: no producer warpgroup. The block is the two consumer warpgroups
// (256 threads); consumer 0 also loads: its loader thread fills the ring up front, and each
// time a stage is released refills it with the tile kStages ahead, once both consumers have
// released it, a wait that now sits in a compute warp. No setmaxnreg: one role, nothing to
// move registers to.
#pragma once
#ifdef ABLATE_NO_WARP_SPECIALIZATION
#ifdef ABLATE_SEAM_ROLES
#error "no_warp_specialization: another pathology already replaces the roles seam"
#endif
#include "base/tile.cuh"

struct ConsumersLoad {
  static constexpr int kProducers = 0;
  template <class T> static constexpr int threads() { return 128 * T::kConsumers; }
  __device__ __forceinline__ static bool producer(int) { return false; }
  template <class Registers>
  __device__ __forceinline__ static void consumer_registers() {}

  // The kernel's consumer C, with consumer 0 taking the producer's steps (Load): Q and the
  // first kStages K/V tiles ahead of C's constructor, which waits for Q; then, after each
  // release of tile j, tile j + kStages (while there is one) into the stage it left.
  template <class C, class Load>
  struct Consumer : C {
    using Sh = typename C::Sh;
    using C::p, C::sh, C::wg, C::tid, C::bh, C::j0, C::n_tiles, C::slot0;
    static constexpr int kStages = Sh::kStages;
    template <class P>
    __device__ __forceinline__ Consumer(const P& p, const Sh& sh, int wg, int tid, const Work& w,
                                        int slot0, int count)
        : C(first(p, sh, wg, tid, w, slot0, count), sh, wg, tid, w, slot0, count) {}
    template <class P>  // returns p, for C's constructor
    __device__ __forceinline__ static const P& first(const P& p, const Sh& sh, int wg, int tid,
                                                     const Work& w, int slot0, int count) {
      if (wg != 0) return p;
      const Load load{p, sh, tid};
      load.q(w, count);
      for (int j = w.j0; j < w.j1 && j < w.j0 + kStages; ++j) {
        load.k(Sh::State::at(slot0 + j - w.j0), j, w.bh);
        load.v(Sh::State::at(slot0 + j - w.j0), j, w.bh);
      }
      __syncwarp();
      return p;
    }
    __device__ __forceinline__ void release_k(int j) { C::release_k(j), refill<false>(j); }
    __device__ __forceinline__ void release_v(int j) { C::release_v(j), refill<true>(j); }
    template <bool kV>
    __device__ __forceinline__ void refill(int j) const {
      const int slot = slot0 + j + kStages, jn = j0 + j + kStages;
      const Load load{p, sh, tid};
      if (wg == 0 && jn < j0 + n_tiles)
        kV ? load.v(Sh::State::at(slot), jn, bh) : load.k(Sh::State::at(slot), jn, bh);
      __syncwarp();
    }
  };
};
#define ABLATE_SEAM_ROLES ConsumersLoad
#endif
