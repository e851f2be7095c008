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
  template <class T, class Loader, class Sh, class P>  // Q and the first kStages K/V tiles
  __device__ __forceinline__ static void prefetch(const P& p, const Sh& sh, const Work& w,
                                                  int slot0, int count, int wg, int tid) {
    if (wg != 0) return;
    Loader::template load_q<T>(p, sh, w.row0, w.bh, count, tid);
    for (int j = w.j0; j < w.j1 && j < w.j0 + Sh::kStages; ++j) {
      Loader::template load_k<T>(p, sh, slot0 + j - w.j0, j, w.bh, tid);
      Loader::template load_v<T>(p, sh, slot0 + j - w.j0, j, w.bh, tid);
    }
    __syncwarp();
  }
  template <class T, class Loader, class Sh, class P>  // key tile j (before `end`) into the stage tile j - kStages left
  __device__ __forceinline__ static void refill_k(const P& p, const Sh& sh, int slot, int j,
                                                  int end, int bh, int wg, int tid) {
    if (wg == 0 && j < end) Loader::template load_k<T>(p, sh, slot, j, bh, tid);
    __syncwarp();
  }
  template <class T, class Loader, class Sh, class P>
  __device__ __forceinline__ static void refill_v(const P& p, const Sh& sh, int slot, int j,
                                                  int end, int bh, int wg, int tid) {
    if (wg == 0 && j < end) Loader::template load_v<T>(p, sh, slot, j, bh, tid);
    __syncwarp();
  }
};
#define ABLATE_SEAM_ROLES ConsumersLoad
#endif
