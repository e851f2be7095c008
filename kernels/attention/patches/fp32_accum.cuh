// fp32_accum: FP32 accumulators for Q K^T. Twice the score registers (4 per 16x8 tile
// instead of 2) for the same tensor-core work, which pushes the register count up and,
// with it, the number of warps an SM can hold.
#pragma once
#ifdef ABLATE_FP32_ACCUM
#ifdef ABLATE_SEAM_SCORE_ACC
#error "fp32_accum: another pathology already replaces the score_acc seam"
#endif
#include "base/mma.cuh"
struct ScoreF32 {
  float r[4];
  __device__ __forceinline__ void zero() { r[0] = r[1] = r[2] = r[3] = 0.f; }
  __device__ __forceinline__ void mma(const uint32_t (&a)[4], uint32_t b0, uint32_t b1) {
    mma_f32(r, a, b0, b1);
  }
  __device__ __forceinline__ float2 row(int h) const { return make_float2(r[2 * h], r[2 * h + 1]); }
  __device__ __forceinline__ void set_row(int h, float2 v) { r[2 * h] = v.x; r[2 * h + 1] = v.y; }
  template <int N>
  __device__ __forceinline__ static float row_max(const ScoreF32 (&t)[N], int h) {
    float m = fmaxf(t[0].r[2 * h], t[0].r[2 * h + 1]);
#pragma unroll
    for (int i = 1; i < N; ++i) m = fmaxf(m, fmaxf(t[i].r[2 * h], t[i].r[2 * h + 1]));
    return m;
  }
};
#define ABLATE_SEAM_SCORE_ACC ScoreF32
#endif
