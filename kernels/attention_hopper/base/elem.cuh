// The element type of Q, K, V, P and O (the shape's dtype): FP16 or BF16. Tiles move as
// 16-bit words whatever the type (TMA boxes, thread copies, the O tile's stores); only the
// MMAs (their PTX type, base/wgmma.cuh), the FP32 -> 16-bit packing of P and O, and the
// tensor maps' element type read them as numbers. Accumulators are FP32 in both.
#pragma once
#include <cuda.h>  // CUtensorMapDataType (types only: no -lcuda)
#include <cuda_fp16.h>
#include <cuda_bf16.h>
#include <cstdint>

struct Fp16 {
  static constexpr bool kBf16 = false;
  static constexpr CUtensorMapDataType kMapType = CU_TENSOR_MAP_DATA_TYPE_FLOAT16;
  __device__ __forceinline__ static uint32_t pack(float lo, float hi) {
    const __half2 h = __floats2half2_rn(lo, hi);
    return *reinterpret_cast<const uint32_t*>(&h);
  }
};

struct Bf16 {
  static constexpr bool kBf16 = true;
  static constexpr CUtensorMapDataType kMapType = CU_TENSOR_MAP_DATA_TYPE_BFLOAT16;
  __device__ __forceinline__ static uint32_t pack(float lo, float hi) {
    const __nv_bfloat162 h = __floats2bfloat162_rn(lo, hi);
    return *reinterpret_cast<const uint32_t*>(&h);
  }
};
