// Tensor-core primitives: ldmatrix and mma.sync m16n8k16, with the two score accumulators.
#pragma once
#include <cuda_fp16.h>
#include <cstdint>

__device__ __forceinline__ uint32_t smem_u32(const void* p) {
  return static_cast<uint32_t>(__cvta_generic_to_shared(p));
}

__device__ __forceinline__ void ldmatrix_x4(uint32_t (&r)[4], const void* p) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0,%1,%2,%3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3]) : "r"(smem_u32(p)));
}

__device__ __forceinline__ void ldmatrix_x4_trans(uint32_t (&r)[4], const void* p) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0,%1,%2,%3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3]) : "r"(smem_u32(p)));
}

// D (16x8, FP32) += A (16x16, FP16, row) * B (16x8, FP16, col)
__device__ __forceinline__ void mma_f32(float (&d)[4], const uint32_t (&a)[4], uint32_t b0,
                                        uint32_t b1) {
  asm volatile(
      "mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, "
      "{%8,%9}, {%0,%1,%2,%3};\n"
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}

// D (16x8, FP16) += A * B: half the accumulator registers of the FP32 form.
__device__ __forceinline__ void mma_f16(uint32_t (&d)[2], const uint32_t (&a)[4], uint32_t b0,
                                        uint32_t b1) {
  asm volatile(
      "mma.sync.aligned.m16n8k16.row.col.f16.f16.f16.f16 {%0,%1}, {%2,%3,%4,%5}, {%6,%7}, "
      "{%0,%1};\n"
      : "+r"(d[0]), "+r"(d[1])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}

__device__ __forceinline__ uint32_t pack_half2(float lo, float hi) {
  __half2 h = __floats2half2_rn(lo, hi);
  return *reinterpret_cast<uint32_t*>(&h);
}

__device__ __forceinline__ float2 unpack_half2(uint32_t r) {
  return __half22float2(*reinterpret_cast<const __half2*>(&r));
}

// One 16x8 tile of Q K^T scores. A thread holds two adjacent columns of two rows:
// row(h) for h = 0 (row lane/4) and h = 1 (row lane/4 + 8).
// The scores of one tile reduce over the head dim only, so FP16 accumulation holds
// their precision, and half the registers leave room for two blocks per SM.
struct ScoreF16 {
  uint32_t r[2];
  __device__ __forceinline__ void zero() { r[0] = r[1] = 0u; }
  __device__ __forceinline__ void mma(const uint32_t (&a)[4], uint32_t b0, uint32_t b1) {
    mma_f16(r, a, b0, b1);
  }
  __device__ __forceinline__ float2 row(int h) const { return unpack_half2(r[h]); }
  __device__ __forceinline__ void set_row(int h, float2 v) { r[h] = pack_half2(v.x, v.y); }
  // Max of row h over n tiles, taken in FP16 (exact), converted once.
  template <int N>
  __device__ __forceinline__ static float row_max(const ScoreF16 (&t)[N], int h) {
    __half2 m = *reinterpret_cast<const __half2*>(&t[0].r[h]);
#pragma unroll
    for (int i = 1; i < N; ++i) m = __hmax2(m, *reinterpret_cast<const __half2*>(&t[i].r[h]));
    return fmaxf(__low2float(m), __high2float(m));
  }
};
