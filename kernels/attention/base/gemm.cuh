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

// Where the MMAs find their K and V fragments. The base stages each K/V tile in shared
// memory once per block (load_kv) and every warp reads it from there with ldmatrix.
// gK / gV (the tile in global memory) and valid (keys of it inside the sequence) are for
// sources that read global memory; np/ks and kk/dp name the fragment.
struct StagedKV {
  static constexpr bool kStaged = true;  // load_kv copies K and V into shared memory
  template <class T, class Layout>
  __device__ __forceinline__ static void k_frag(uint32_t (&kb)[4], const half* sK, const half*, int,
                                                int ks, int np, int lane) {
    const int key = np * 16 + (lane & 7) + (lane >> 4) * 8;
    ldmatrix_x4(kb, sK + Layout::template offset<T::kChunks>(key, ks * 2 + ((lane >> 3) & 1)));
  }
  template <class T, class Layout>
  __device__ __forceinline__ static void v_frag(uint32_t (&vb)[4], const half* sV, const half*, int,
                                                int kk, int dp, int lane) {
    const int key = kk * 16 + (lane & 7) + ((lane >> 3) & 1) * 8;
    ldmatrix_x4_trans(vb, sV + Layout::template offset<T::kChunks>(key, dp * 2 + (lane >> 4)));
  }
};

// S = Q K^T for one key tile. Each ldmatrix.x4 of K feeds two n8 tiles, for every m16 tile.
template <class T, class Layout, class Barrier, class KV, class Acc, class Q>
__device__ __forceinline__ void scores_qk(Acc (&s)[T::kMTiles][T::kNTiles], const Q& q,
                                          const half* sQ, const half* sK, const half* gK, int valid,
                                          int warp_row0, int lane) {
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
      uint32_t kb[4];
      KV::template k_frag<T, Layout>(kb, sK, gK, valid, ks, np, lane);
#pragma unroll
      for (int mi = 0; mi < T::kMTiles; ++mi) {
        s[mi][2 * np].mma(qa[mi], kb[0], kb[1]);
        s[mi][2 * np + 1].mma(qa[mi], kb[2], kb[3]);
      }
      Barrier::sync();
    }
  }
}

// How the Q K^T loops are unrolled: the base loads each K fragment just before the MMAs
// that use it, so one fragment (4 registers) is live at a time.
struct FragmentPerStep {
  template <class T, class Layout, class Barrier, class KV, class Acc, class Q>
  __device__ __forceinline__ static void scores(Acc (&s)[T::kMTiles][T::kNTiles], const Q& q,
                                                const half* sQ, const half* sK, const half* gK,
                                                int valid, int warp_row0, int lane) {
    scores_qk<T, Layout, Barrier, KV>(s, q, sQ, sK, gK, valid, warp_row0, lane);
  }
};

// O += P V for one key tile. P comes straight from the score registers (the accumulator
// layout of two n8 tiles is the A layout of one k16 step); V via ldmatrix.trans. P and V
// of element type E.
template <class T, class Layout, class Barrier, class KV, class E>
__device__ __forceinline__ void accumulate_pv(float (&o)[T::kMTiles][T::kDTiles][4],
                                              const uint32_t (&p)[T::kMTiles][T::kNTiles][2],
                                              const half* sV, const half* gV, int valid, int lane) {
#pragma unroll
  for (int kk = 0; kk < T::kBlockN / 16; ++kk) {
#pragma unroll
    for (int dp = 0; dp < T::kDTiles / 2; ++dp) {
      uint32_t vb[4];
      KV::template v_frag<T, Layout>(vb, sV, gV, valid, kk, dp, lane);
#pragma unroll
      for (int mi = 0; mi < T::kMTiles; ++mi) {
        const uint32_t a[4] = {p[mi][2 * kk][0], p[mi][2 * kk][1], p[mi][2 * kk + 1][0],
                               p[mi][2 * kk + 1][1]};
        mma_f32<E>(o[mi][2 * dp], a, vb[0], vb[1]);
        mma_f32<E>(o[mi][2 * dp + 1], a, vb[2], vb[3]);
      }
      Barrier::sync();
    }
  }
}
