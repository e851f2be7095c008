// The two GEMMs of a consumer warpgroup on the tensor cores' asynchronous path (wgmma):
// S = Q K^T from shared memory, O += P V with P from registers. Issued, then waited on. The
// operands are of the tile's element type (T::Elem: FP16 or BF16), the accumulators FP32.
#pragma once
#include "base/wgmma.cuh"
#include "base/tma.cuh"

struct Wgmma {
  // S (64 x BLOCK_N) = Q (this warpgroup's 64 rows, from `q`) K^T; both K-major, D/16
  // k-steps of 16 columns, described by the tiles' layout.
  template <class T>
  __device__ __forceinline__ static void qk(float (&s)[T::kBlockN / 2], const uint8_t* q,
                                            const uint8_t* k) {
    using L = typename T::Layout;
    wgmma_fence();
#pragma unroll
    for (int ks = 0; ks < T::kHeadDim / 16; ++ks)
      wgmma_ss<T::kBlockN, typename T::Elem>(s, L::template desc_k<T::kBlockM>(q, ks),
                                             L::template desc_k<T::kBlockN>(k, ks), ks > 0);
    wgmma_commit();
  }
  // O (64 x D) += P (64 x BLOCK_N, registers of T::Elem) V; V is MN-major (D contiguous), 16 keys
  // per k-step.
  template <class T>
  __device__ __forceinline__ static void pv(float (&o)[T::kHeadDim / 2],
                                            const uint32_t (&p)[T::kBlockN / 4], const uint8_t* v) {
    using L = typename T::Layout;
    wgmma_fence();
#pragma unroll
    for (int ks = 0; ks < T::kBlockN / 16; ++ks) {
      const uint32_t a[4] = {p[4 * ks], p[4 * ks + 1], p[4 * ks + 2], p[4 * ks + 3]};
      wgmma_rs<T::kHeadDim, typename T::Elem>(o, a, L::template desc_mn<T::kBlockN>(v, ks));
    }
    wgmma_commit();
  }
  template <int kPending>
  __device__ __forceinline__ static void wait() { wgmma_wait<kPending>(); }
};
