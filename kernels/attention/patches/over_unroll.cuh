// over_unroll: the Q K^T loops of a key tile unrolled with every K fragment loaded ahead
// of the first MMA: kKSteps x kBlockN/16 x 4 = 128 registers more live at once, on top of
// the base's 255 (its scores, O and P already fill the register file), so ptxas spills
// to local memory, which the loop then stores and reloads on every key tile.
#pragma once
#ifdef ABLATE_OVER_UNROLL
#ifdef ABLATE_SEAM_QK_LOOP
#error "over_unroll: another pathology already replaces the qk_loop seam"
#endif
#include "base/gemm.cuh"
struct WholeTileAhead {
  template <class T, class Layout, class Barrier, class KV, class Acc, class Q>
  __device__ __forceinline__ static void scores(Acc (&s)[T::kMTiles][T::kNTiles], const Q& q,
                                                const half* sQ, const half* sK, const half* gK,
                                                int valid, int warp_row0, int lane) {
    uint32_t qa[T::kKSteps][T::kMTiles][4], kb[T::kKSteps][T::kNTiles / 2][4];
#pragma unroll
    for (int ks = 0; ks < T::kKSteps; ++ks) {
      q.get(qa[ks], sQ, warp_row0, ks, lane);
#pragma unroll
      for (int np = 0; np < T::kNTiles / 2; ++np)
        KV::template k_frag<T, Layout>(kb[ks][np], sK, gK, valid, ks, np, lane);
    }
    // Without a fence ptxas sinks each load back next to its MMAs (undoing the unroll: no
    // extra spills at D=64; __syncwarp() is dropped as a no-op); loads cannot cross this one.
    asm volatile("fence.acq_rel.cta;" ::: "memory");
#pragma unroll
    for (int mi = 0; mi < T::kMTiles; ++mi)
#pragma unroll
      for (int nt = 0; nt < T::kNTiles; ++nt) s[mi][nt].zero();
#pragma unroll
    for (int ks = 0; ks < T::kKSteps; ++ks) {
#pragma unroll
      for (int np = 0; np < T::kNTiles / 2; ++np) {
#pragma unroll
        for (int mi = 0; mi < T::kMTiles; ++mi) {
          s[mi][2 * np].mma(qa[ks][mi], kb[ks][np][0], kb[ks][np][1]);
          s[mi][2 * np + 1].mma(qa[ks][mi], kb[ks][np][2], kb[ks][np][3]);
        }
        Barrier::sync();
      }
    }
  }
};
#define ABLATE_SEAM_QK_LOOP WholeTileAhead
#endif
