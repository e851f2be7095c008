// no_smem_staging: K and V are never staged in shared memory. Each lane loads its MMA
// fragments straight from global memory (K: 4-byte words, V: 2-byte halves, since
// ldmatrix.trans has no global form), so each key tile is fetched once per warp that
// needs it (four per block) instead of once per block, on the warps' critical path.
#pragma once
#ifdef ABLATE_NO_SMEM_STAGING
#ifdef ABLATE_SEAM_KV_SOURCE
#error "no_smem_staging: another pathology already replaces the kv_source seam"
#endif
#include "base/mma.cuh"
struct GlobalKV {
  static constexpr bool kStaged = false;  // load_kv copies only Q; shared memory holds Q alone
  // Rows past the sequence end read as zero, as the base's zero-filled tiles do.
  __device__ __forceinline__ static uint32_t word(const half* g, int valid, int key, int col, int d) {
    return key < valid ? *reinterpret_cast<const uint32_t*>(g + key * d + col) : 0u;
  }
  __device__ __forceinline__ static uint32_t halves(const half* g, int valid, int key, int col, int d) {
    const unsigned short* e = reinterpret_cast<const unsigned short*>(g);
    const uint32_t lo = key < valid ? e[key * d + col] : 0u, hi = key + 1 < valid ? e[(key + 1) * d + col] : 0u;
    return lo | hi << 16;
  }
  // What ldmatrix.x4 gives lane l: in matrix i, row l/4, columns 2(l%4) and 2(l%4)+1.
  template <class T, class Layout>
  __device__ __forceinline__ static void k_frag(uint32_t (&kb)[4], const half*, const half* gK,
                                                int valid, int ks, int np, int lane) {
#pragma unroll
    for (int i = 0; i < 4; ++i)
      kb[i] = word(gK, valid, np * 16 + (i >> 1) * 8 + (lane >> 2),
                   (ks * 2 + (i & 1)) * 8 + (lane & 3) * 2, T::kHeadDim);
  }
  // ldmatrix.x4.trans: in matrix i, rows 2(l%4) and 2(l%4)+1 (keys) of column l/4.
  template <class T, class Layout>
  __device__ __forceinline__ static void v_frag(uint32_t (&vb)[4], const half*, const half* gV,
                                                int valid, int kk, int dp, int lane) {
#pragma unroll
    for (int i = 0; i < 4; ++i)
      vb[i] = halves(gV, valid, kk * 16 + (i & 1) * 8 + (lane & 3) * 2,
                     (dp * 2 + (i >> 1)) * 8 + (lane >> 2), T::kHeadDim);
  }
};
#define ABLATE_SEAM_KV_SOURCE GlobalKV
#endif
