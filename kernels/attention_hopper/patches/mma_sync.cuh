// mma_sync: the GEMMs on Ampere's path: every warp loads its fragments from shared memory
// with ldmatrix and issues synchronous m16n8k16 mma.sync, instead of the warpgroup issuing
// asynchronous wgmma that reads shared memory directly. More instructions and shared-memory
// traffic per FLOP, and no MMA runs while the warp does anything else.
#pragma once
#ifdef ABLATE_MMA_SYNC
#ifdef ABLATE_SEAM_MMA
#error "mma_sync: another pathology already replaces the mma seam"
#endif
#include "base/tma.cuh"

struct WarpMma {
  __device__ __forceinline__ static void ldsm4(uint32_t (&r)[4], uint32_t addr, bool trans) {
    if (trans)
      asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0, %1, %2, %3}, [%4];"
                   : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3]) : "r"(addr));
    else
      asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0, %1, %2, %3}, [%4];"
                   : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3]) : "r"(addr));
  }
  // D (16 x 8, FP32) += A * B, A and B of the tile's element type E (FP16 or BF16).
  template <class E>
  __device__ __forceinline__ static void mma(float* d, const uint32_t (&a)[4], uint32_t b0, uint32_t b1) {
    if constexpr (E::kBf16)
      asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0, %1, %2, %3}, "
                   "{%4, %5, %6, %7}, {%8, %9}, {%0, %1, %2, %3};"
                   : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
                   : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
    else
      asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0, %1, %2, %3}, "
                   "{%4, %5, %6, %7}, {%8, %9}, {%0, %1, %2, %3};"
                   : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
                   : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
  }

  // Fragment addresses: chunk c of row r at the tiles' layout's offset (T::Layout, relative to
  // the warpgroup's first row for Q).
  template <class T>  // this warp's 16 rows of S = Q K^T
  __device__ __forceinline__ static void qk(float (&s)[T::kBlockN / 2], const uint8_t* q, const uint8_t* k) {
    using L = typename T::Layout;
    const int lane = threadIdx.x & 31, row = ((threadIdx.x >> 5) & 3) * 16 + (lane & 15);
#pragma unroll
    for (int i = 0; i < T::kBlockN / 2; ++i) s[i] = 0.f;
#pragma unroll
    for (int ks = 0; ks < T::kHeadDim / 16; ++ks) {
      uint32_t a[4];
      ldsm4(a, smem_u32(q) + L::template offset<T::kBlockM>(row, 2 * ks + lane / 16), false);
#pragma unroll
      for (int nb = 0; nb < T::kBlockN / 16; ++nb) {
        uint32_t b[4];
        ldsm4(b, smem_u32(k) + L::template offset<T::kBlockN>(nb * 16 + (lane / 16) * 8 + (lane & 7), 2 * ks + (lane / 8) % 2), false);
        mma<typename T::Elem>(&s[8 * nb], a, b[0], b[1]);
        mma<typename T::Elem>(&s[8 * nb + 4], a, b[2], b[3]);
      }
    }
  }
  template <class T>  // this warp's 16 rows of O += P V
  __device__ __forceinline__ static void pv(float (&o)[T::kHeadDim / 2], const uint32_t (&p)[T::kBlockN / 4],
                                            const uint8_t* v) {
    using L = typename T::Layout;
    const int lane = threadIdx.x & 31;
#pragma unroll
    for (int kk = 0; kk < T::kBlockN / 16; ++kk) {
      const uint32_t a[4] = {p[4 * kk], p[4 * kk + 1], p[4 * kk + 2], p[4 * kk + 3]};
#pragma unroll
      for (int dp = 0; dp < T::kHeadDim / 16; ++dp) {
        uint32_t b[4];
        ldsm4(b, smem_u32(v) + L::template offset<T::kBlockN>(kk * 16 + (lane & 7) + ((lane / 8) % 2) * 8, 2 * dp + lane / 16), true);
        mma<typename T::Elem>(&o[8 * dp], a, b[0], b[1]);
        mma<typename T::Elem>(&o[8 * dp + 4], a, b[2], b[3]);
      }
    }
  }
  template <int kPending>
  __device__ __forceinline__ static void wait() {}  // mma.sync is done when it returns
};
#define ABLATE_SEAM_MMA WarpMma
#endif
