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
  // Load: the producer's steps (hopper_attention.cu). Q and the first kStages K/V tiles:
  template <class T, class Load, class Sh, class P>
  __device__ __forceinline__ static void prefetch(const P& p, const Sh& sh, const Work& w,
                                                  int slot0, int count, int wg, int tid) {
    if (wg != 0) return;
    const Load load{p, sh, tid};
    load.q(w, count);
    for (int j = w.j0; j < w.j1 && j < w.j0 + Sh::kStages; ++j) {
      load.k(Sh::State::at(slot0 + j - w.j0), j, w.bh);
      load.v(Sh::State::at(slot0 + j - w.j0), j, w.bh);
    }
    __syncwarp();
  }
  template <class T, class Load, class Sh, class P>  // key tile j (before `end`) into the stage tile j - kStages left
  __device__ __forceinline__ static void refill_k(const P& p, const Sh& sh, int slot, int j,
                                                  int end, int bh, int wg, int tid) {
    if (wg == 0 && j < end) Load{p, sh, tid}.k(Sh::State::at(slot), j, bh);
    __syncwarp();
  }
  template <class T, class Load, class Sh, class P>
  __device__ __forceinline__ static void refill_v(const P& p, const Sh& sh, int slot, int j,
                                                  int end, int bh, int wg, int tid) {
    if (wg == 0 && j < end) Load{p, sh, tid}.v(Sh::State::at(slot), j, bh);
    __syncwarp();
  }
};
#define ABLATE_SEAM_ROLES ConsumersLoad
#endif
