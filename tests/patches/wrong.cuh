// wrong (test only): every Q K^T product is accumulated twice, so the softmax runs at twice
// the scale and the output is finite but wrong. The correctness gate must catch it: the
// job is recorded as incorrect and never timed.
#pragma once
#ifdef ABLATE_TEST_WRONG
#ifdef ABLATE_SEAM_SCORE_ACC
#error "wrong: another pathology already replaces the score_acc seam"
#endif
#include "base/mma.cuh"
struct ScoreDoubled {
  ScoreF16 acc;
  __device__ __forceinline__ void zero() { acc.zero(); }
  __device__ __forceinline__ void mma(const uint32_t (&a)[4], uint32_t b0, uint32_t b1) {
    acc.mma(a, b0, b1);
    acc.mma(a, b0, b1);
  }
  __device__ __forceinline__ float2 row(int h) const { return acc.row(h); }
  __device__ __forceinline__ void set_row(int h, float2 v) { acc.set_row(h, v); }
  template <int N>
  __device__ __forceinline__ static float row_max(const ScoreDoubled (&t)[N], int h) {
    float m = -INFINITY;
#pragma unroll
    for (int i = 0; i < N; ++i) {
      const float2 v = t[i].row(h);
      m = fmaxf(m, fmaxf(v.x, v.y));
    }
    return m;
  }
};
#define ABLATE_SEAM_SCORE_ACC ScoreDoubled
#endif
