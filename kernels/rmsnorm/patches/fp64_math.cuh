// fp64_math: statistics and scaling in double. Every element widens to double (F2F.F64.F32),
// squares accumulate with DFMA, the reduction shuffles 64-bit values, 1/sqrt goes through the
// double-precision rsqrt routine, and y = x * rstd * w is rounded from double.
#pragma once
#ifdef ABLATE_FP64_MATH
#ifdef ABLATE_SEAM_MATH
#error "fp64_math: another pathology already replaces the math seam"
#endif
#include <cstdint>
#include "base/dtype.cuh"
struct Fp64Math {
  using Acc = double;
  template <class T>
  __device__ __forceinline__ static Acc square_sum(Acc acc, uint32_t word) {
    const float2 v = Dtype<T>::to_float2(word);
    const double a = v.x, b = v.y;
    return fma(b, b, fma(a, a, acc));
  }
  __device__ __forceinline__ static Acc rstd(Acc total, int hidden, float, float eps) {
    return rsqrt(total / hidden + static_cast<double>(eps));
  }
  template <class T>
  __device__ __forceinline__ static uint32_t scale(uint32_t x, uint32_t w, Acc rstd) {
    const float2 a = Dtype<T>::to_float2(x), b = Dtype<T>::to_float2(w);
    return Dtype<T>::from_double2(double(a.x) * rstd * double(b.x),
                                  double(a.y) * rstd * double(b.y));
  }
};
#define ABLATE_SEAM_MATH Fp64Math
#endif
