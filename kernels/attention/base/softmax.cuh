// Online softmax in registers: running row max and row sum, O rescaled as the max grows.
#pragma once
#include <cuda_fp16.h>
#include <cstdint>
#include "mma.cuh"

__device__ __forceinline__ float fast_exp2(float x) {  // ex2.approx: one MUFU op; exp2(-inf) = 0
  float y;
  asm("ex2.approx.ftz.f32 %0, %1;\n" : "=f"(y) : "f"(x));
  return y;
}

// The four lanes of a quad hold the same rows: reduce across them.
__device__ __forceinline__ float quad_max(float x) {
  x = fmaxf(x, __shfl_xor_sync(0xffffffffu, x, 1));
  return fmaxf(x, __shfl_xor_sync(0xffffffffu, x, 2));
}
__device__ __forceinline__ float quad_sum(float x) {
  x += __shfl_xor_sync(0xffffffffu, x, 1);
  return x + __shfl_xor_sync(0xffffffffu, x, 2);
}

// Scores past the sequence end, or above the diagonal when causal, become -inf.
// row0/col0: this thread's first row and column in the problem.
template <bool kCausal, int kMTiles, int kNTiles, class Acc>
__device__ __forceinline__ void mask_scores(Acc (&s)[kMTiles][kNTiles], int row0, int col0,
                                            int seq_len) {
#pragma unroll
  for (int mi = 0; mi < kMTiles; ++mi)
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      const int row = row0 + mi * 16 + h * 8;
#pragma unroll
      for (int nt = 0; nt < kNTiles; ++nt) {
        const int col = col0 + nt * 8;
        float2 v = s[mi][nt].row(h);
        if (col >= seq_len || (kCausal && col > row)) v.x = -INFINITY;
        if (col + 1 >= seq_len || (kCausal && col + 1 > row)) v.y = -INFINITY;
        s[mi][nt].set_row(h, v);
      }
    }
}

template <int kMTiles, int kNTiles, int kDTiles>
struct OnlineSoftmax {
  float m[kMTiles][2];  // running max of the raw scores, per row
  float l[kMTiles][2];  // running sum of exp, this lane's columns only (reduced at the end)

  __device__ __forceinline__ void init() {
#pragma unroll
    for (int mi = 0; mi < kMTiles; ++mi)
#pragma unroll
      for (int h = 0; h < 2; ++h) { m[mi][h] = -INFINITY; l[mi][h] = 0.f; }
  }

  // Turns one tile of scores into 16-bit probabilities p (of the scores' element type,
  // ElemOf<Acc>; packed as MMA A fragments) and rescales O. log2(e) * scale is folded into one FFMA per score: p = 2^(s*c - max*c).
  template <class Acc>
  __device__ __forceinline__ void step(const Acc (&s)[kMTiles][kNTiles],
                                       uint32_t (&p)[kMTiles][kNTiles][2],
                                       float (&o)[kMTiles][kDTiles][4], float scale_log2) {
#pragma unroll
    for (int mi = 0; mi < kMTiles; ++mi)
#pragma unroll
      for (int h = 0; h < 2; ++h) {
        const float mx = quad_max(fmaxf(m[mi][h], Acc::row_max(s[mi], h)));
        // A row whose scores are all masked so far keeps max -inf: subtract 0 instead.
        const float base = mx == -INFINITY ? 0.f : mx * scale_log2;
        const float alpha = fast_exp2(m[mi][h] * scale_log2 - base);
        m[mi][h] = mx;
        float sum = 0.f;
#pragma unroll
        for (int nt = 0; nt < kNTiles; ++nt) {
          const float2 v = s[mi][nt].row(h);
          const float p0 = fast_exp2(fmaf(v.x, scale_log2, -base));
          const float p1 = fast_exp2(fmaf(v.y, scale_log2, -base));
          sum += p0 + p1;
          p[mi][nt][h] = ElemOf<Acc>::type::pack(p0, p1);
        }
        l[mi][h] = l[mi][h] * alpha + sum;
#pragma unroll
        for (int dt = 0; dt < kDTiles; ++dt) {
          o[mi][dt][2 * h] *= alpha;
          o[mi][dt][2 * h + 1] *= alpha;
        }
      }
  }

  // O /= row sum.
  __device__ __forceinline__ void finish(float (&o)[kMTiles][kDTiles][4]) {
#pragma unroll
    for (int mi = 0; mi < kMTiles; ++mi)
#pragma unroll
      for (int h = 0; h < 2; ++h) {
        const float sum = quad_sum(l[mi][h]);
        const float inv = sum > 0.f ? 1.f / sum : 0.f;
#pragma unroll
        for (int dt = 0; dt < kDTiles; ++dt) {
          o[mi][dt][2 * h] *= inv;
          o[mi][dt][2 * h + 1] *= inv;
        }
      }
  }
};
