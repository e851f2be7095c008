// Tensor-core primitives: ldmatrix and mma.sync m16n8k16, the element types (FP16, BF16) and
// the two score accumulators.
#pragma once
#include <cuda_fp16.h>
#include <cuda_bf16.h>
#include <cstdint>
#include <type_traits>

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

// The element type of Q, K, V, P and O. Tiles are moved as 16-bit words whatever the type
// (cp.async, ldmatrix, 16-byte stores: shared and global memory are addressed as `half`);
// only the MMAs and the FP32 -> 16-bit packing of P and O read them as numbers.
__device__ __forceinline__ uint32_t pack_half2(float lo, float hi) {
  __half2 h = __floats2half2_rn(lo, hi);
  return *reinterpret_cast<uint32_t*>(&h);
}

__device__ __forceinline__ float2 unpack_half2(uint32_t r) {
  return __half22float2(*reinterpret_cast<const __half2*>(&r));
}

struct Fp16 {
  static constexpr bool kF16Acc = true;  // mma.sync has an FP16-accumulator form
  __device__ __forceinline__ static uint32_t pack(float lo, float hi) { return pack_half2(lo, hi); }
};
// BF16's mma.sync accumulates in FP32 only (PTX ISA: .bf16 has no .f16 or .bf16 D).
struct Bf16 {
  static constexpr bool kF16Acc = false;
  __device__ __forceinline__ static uint32_t pack(float lo, float hi) {
    __nv_bfloat162 h = __floats2bfloat162_rn(lo, hi);
    return *reinterpret_cast<uint32_t*>(&h);
  }
};

// The element type of a score accumulator: its Elem, else FP16 (one written before BF16 came,
// as the test-only score_acc pathologies).
template <class Acc, class = void>
struct ElemOf { using type = Fp16; };
template <class Acc>
struct ElemOf<Acc, std::void_t<typename Acc::Elem>> { using type = typename Acc::Elem; };

// D (16x8, FP32) += A (16x16, row) * B (16x8, col), A and B of element type E.
template <class E = Fp16>
__device__ __forceinline__ void mma_f32(float (&d)[4], const uint32_t (&a)[4], uint32_t b0,
                                        uint32_t b1) {
  if constexpr (E::kF16Acc)
    asm volatile(
        "mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, "
        "{%8,%9}, {%0,%1,%2,%3};\n"
        : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
  else
    asm volatile(
        "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, "
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

// One 16x8 tile of Q K^T scores. A thread holds two adjacent columns of two rows:
// row(h) for h = 0 (row lane/4) and h = 1 (row lane/4 + 8).
// The scores of one tile reduce over the head dim only, so FP16 accumulation holds
// their precision, and half the registers leave room for two blocks per SM.
struct ScoreF16 {
  using Elem = Fp16;
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

// The same tile in FP32: 4 registers instead of 2. The only form BF16 operands have, so every
// BF16 instance takes it; FP16 instances take it only where the score_acc seam says so
// (patches/fp32_accum.cuh).
template <class E>
struct ScoreF32Of {
  using Elem = E;
  float r[4];
  __device__ __forceinline__ void zero() { r[0] = r[1] = r[2] = r[3] = 0.f; }
  __device__ __forceinline__ void mma(const uint32_t (&a)[4], uint32_t b0, uint32_t b1) {
    mma_f32<E>(r, a, b0, b1);
  }
  __device__ __forceinline__ float2 row(int h) const { return make_float2(r[2 * h], r[2 * h + 1]); }
  __device__ __forceinline__ void set_row(int h, float2 v) { r[2 * h] = v.x; r[2 * h + 1] = v.y; }
  template <int N>
  __device__ __forceinline__ static float row_max(const ScoreF32Of (&t)[N], int h) {
    float m = fmaxf(t[0].r[2 * h], t[0].r[2 * h + 1]);
#pragma unroll
    for (int i = 1; i < N; ++i) m = fmaxf(m, fmaxf(t[i].r[2 * h], t[i].r[2 * h + 1]));
    return m;
  }
};
using ScoreF32 = ScoreF32Of<Fp16>;
