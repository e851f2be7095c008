// The two element types, seen as the kernel holds them: raw 16-bit values packed two to a
// 32-bit word (a register). The arithmetic never runs in 16 bits: a word widens to a pair of
// floats (or doubles), and a result pair is rounded to the element type once, as it is packed.
#pragma once
#include <cuda_fp16.h>
#include <cuda_bf16.h>
#include <cstdint>

template <class T> struct Dtype;

template <> struct Dtype<__half> {
  static constexpr const char* kName = "fp16";
  static constexpr const char* kType = "__half";  // as the demangled kernel names spell it
  __device__ __forceinline__ static float2 to_float2(uint32_t word) {
    return __half22float2(*reinterpret_cast<const __half2*>(&word));
  }
  __device__ __forceinline__ static uint32_t from_float2(float lo, float hi) {
    const __half2 h = __floats2half2_rn(lo, hi);  // one F2FP.PACK_AB: both rounded once
    return *reinterpret_cast<const uint32_t*>(&h);
  }
  __device__ __forceinline__ static uint32_t from_double2(double lo, double hi) {
    const __half2 h = __halves2half2(__double2half(lo), __double2half(hi));
    return *reinterpret_cast<const uint32_t*>(&h);
  }
};

template <> struct Dtype<__nv_bfloat16> {
  static constexpr const char* kName = "bf16";
  static constexpr const char* kType = "__nv_bfloat16";
  __device__ __forceinline__ static float2 to_float2(uint32_t word) {
    return __bfloat1622float2(*reinterpret_cast<const __nv_bfloat162*>(&word));
  }
  __device__ __forceinline__ static uint32_t from_float2(float lo, float hi) {
    const __nv_bfloat162 h = __floats2bfloat162_rn(lo, hi);
    return *reinterpret_cast<const uint32_t*>(&h);
  }
  __device__ __forceinline__ static uint32_t from_double2(double lo, double hi) {
    const __nv_bfloat162 h = __halves2bfloat162(__double2bfloat16(lo), __double2bfloat16(hi));
    return *reinterpret_cast<const uint32_t*>(&h);
  }
};
