// The two matrix products of a tile, on mma.sync m16n8k16 with operands from ldmatrix.
#pragma once
#include "mma.cuh"

// A fragments of this warp's Q rows for k-step ks (one ldmatrix.x4 per m16 tile).
template <class T, class Layout>
__device__ __forceinline__ void load_q_frags(uint32_t (&qa)[T::kMTiles][4], const half* sQ,
                                             int warp_row0, int ks, int lane) {
#pragma unroll
  for (int mi = 0; mi < T::kMTiles; ++mi) {
    const int row = warp_row0 + mi * 16 + (lane & 7) + ((lane >> 3) & 1) * 8;
    ldmatrix_x4(qa[mi], sQ + Layout::template offset<T::kChunks>(row, ks * 2 + (lane >> 4)));
  }
}

// Q fragments: held in registers for the whole key loop (kQInRegs), or re-read from shared
// memory at each k-step when registers are short.
template <class T, class Layout, bool kInRegs = T::kQInRegs>
struct QFrags {
  uint32_t held[T::kKSteps][T::kMTiles][4];
  __device__ __forceinline__ void preload(const half* sQ, int warp_row0, int lane) {
#pragma unroll
    for (int ks = 0; ks < T::kKSteps; ++ks) load_q_frags<T, Layout>(held[ks], sQ, warp_row0, ks, lane);
  }
  __device__ __forceinline__ void get(uint32_t (&qa)[T::kMTiles][4], const half*, int, int ks, int) const {
#pragma unroll
    for (int mi = 0; mi < T::kMTiles; ++mi)
#pragma unroll
      for (int i = 0; i < 4; ++i) qa[mi][i] = held[ks][mi][i];
  }
};
template <class T, class Layout>
struct QFrags<T, Layout, false> {
  __device__ __forceinline__ void preload(const half*, int, int) {}
  __device__ __forceinline__ void get(uint32_t (&qa)[T::kMTiles][4], const half* sQ, int warp_row0,
                                      int ks, int lane) const {
    load_q_frags<T, Layout>(qa, sQ, warp_row0, ks, lane);
  }
};

// S = Q K^T for one key tile. Each ldmatrix.x4 of K feeds two n8 tiles, for every m16 tile.
template <class T, class Layout, class Barrier, class Acc, class Q>
__device__ __forceinline__ void scores_qk(Acc (&s)[T::kMTiles][T::kNTiles], const Q& q,
                                          const half* sQ, const half* sK, int warp_row0, int lane) {
#pragma unroll
  for (int mi = 0; mi < T::kMTiles; ++mi)
#pragma unroll
    for (int nt = 0; nt < T::kNTiles; ++nt) s[mi][nt].zero();
#pragma unroll
  for (int ks = 0; ks < T::kKSteps; ++ks) {
    uint32_t qa[T::kMTiles][4];
    q.get(qa, sQ, warp_row0, ks, lane);
#pragma unroll
    for (int np = 0; np < T::kNTiles / 2; ++np) {
      const int key = np * 16 + (lane & 7) + (lane >> 4) * 8;
      uint32_t kb[4];
      ldmatrix_x4(kb, sK + Layout::template offset<T::kChunks>(key, ks * 2 + ((lane >> 3) & 1)));
#pragma unroll
      for (int mi = 0; mi < T::kMTiles; ++mi) {
        s[mi][2 * np].mma(qa[mi], kb[0], kb[1]);
        s[mi][2 * np + 1].mma(qa[mi], kb[2], kb[3]);
      }
      Barrier::sync();
    }
  }
}

// O += P V for one key tile. P comes straight from the score registers (the accumulator
// layout of two n8 tiles is the A layout of one k16 step); V via ldmatrix.trans.
template <class T, class Layout, class Barrier>
__device__ __forceinline__ void accumulate_pv(float (&o)[T::kMTiles][T::kDTiles][4],
                                              const uint32_t (&p)[T::kMTiles][T::kNTiles][2],
                                              const half* sV, int lane) {
#pragma unroll
  for (int kk = 0; kk < T::kBlockN / 16; ++kk) {
#pragma unroll
    for (int dp = 0; dp < T::kDTiles / 2; ++dp) {
      const int key = kk * 16 + (lane & 7) + ((lane >> 3) & 1) * 8;
      uint32_t vb[4];
      ldmatrix_x4_trans(vb, sV + Layout::template offset<T::kChunks>(key, dp * 2 + (lane >> 4)));
#pragma unroll
      for (int mi = 0; mi < T::kMTiles; ++mi) {
        const uint32_t a[4] = {p[mi][2 * kk][0], p[mi][2 * kk][1], p[mi][2 * kk + 1][0],
                               p[mi][2 * kk + 1][1]};
        mma_f32(o[mi][2 * dp], a, vb[0], vb[1]);
        mma_f32(o[mi][2 * dp + 1], a, vb[2], vb[3]);
      }
      Barrier::sync();
    }
  }
}
