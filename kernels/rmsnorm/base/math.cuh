// The math seam's base: FP32 statistics. Each element widens to float (HADD2.F32 for FP16,
// a shift for BF16), squares accumulate with FFMA, 1/sqrt(mean + eps) is one MUFU.RSQ
// (rsqrtf, about 2 ulp: far below the output's rounding), and y = (x * rstd) * w in float,
// the order PyTorch's rms_norm uses, rounded to the element type once.
//
// A math policy names its accumulator type Acc; the reduce seam sums whatever Acc is.
#pragma once
#include <cstdint>

#include "base/dtype.cuh"

struct Fp32Math {
  using Acc = float;
  template <class T>
  __device__ __forceinline__ static Acc square_sum(Acc acc, uint32_t word) {  // acc + a^2 + b^2
    const float2 v = Dtype<T>::to_float2(word);
    return fmaf(v.y, v.y, fmaf(v.x, v.x, acc));
  }
  // inv_hidden = 1 / hidden, rounded once on the host.
  __device__ __forceinline__ static Acc rstd(Acc total, int, float inv_hidden, float eps) {
    return rsqrtf(fmaf(total, inv_hidden, eps));
  }
  template <class T>
  __device__ __forceinline__ static uint32_t scale(uint32_t x, uint32_t w, Acc rstd) {
    const float2 a = Dtype<T>::to_float2(x), b = Dtype<T>::to_float2(w);
    return Dtype<T>::from_float2(a.x * rstd * b.x, a.y * rstd * b.y);
  }
};

// This thread's sum of squares. One partial per 4 words (8 elements) and a tree over the
// partials: dependent chains of 8 FMAs instead of one chain through every element, so the
// latency does not grow with the elements a thread holds.
template <class Math, class T, int kWords>
__device__ __forceinline__ typename Math::Acc sum_squares(const uint32_t (&x)[kWords]) {
  using Acc = typename Math::Acc;
  static_assert(kWords % 4 == 0, "whole 8-element groups");
  constexpr int kParts = kWords / 4;
  Acc part[kParts];
#pragma unroll
  for (int i = 0; i < kParts; ++i) {
    part[i] = Acc(0);
#pragma unroll
    for (int k = 0; k < 4; ++k) part[i] = Math::template square_sum<T>(part[i], x[4 * i + k]);
  }
#pragma unroll
  for (int stride = 1; stride < kParts; stride *= 2)
#pragma unroll
    for (int i = 0; i + stride < kParts; i += 2 * stride) part[i] += part[i + stride];
  return part[0];
}

// y = x * rstd * w, word by word.
template <class Math, class T, int kWords>
__device__ __forceinline__ void normalize(uint32_t (&y)[kWords], const uint32_t (&x)[kWords],
                                          const uint32_t (&w)[kWords], typename Math::Acc rstd) {
#pragma unroll
  for (int i = 0; i < kWords; ++i) y[i] = Math::template scale<T>(x[i], w[i], rstd);
}
