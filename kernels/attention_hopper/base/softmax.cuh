// Online softmax on a warpgroup's score fragments (64 rows x N keys, FP32): running row max
// and row sum, the rescale factor of O, and the probabilities packed as A fragments of the
// element type (FP16 or BF16).
#pragma once
#include <cstdint>

__device__ __forceinline__ float fast_exp2(float x) {  // one MUFU op; exp2(-inf) = 0
  float y;
  asm("ex2.approx.ftz.f32 %0, %1;" : "=f"(y) : "f"(x));
  return y;
}
__device__ __forceinline__ float quad_max(float x) {  // the 4 lanes of a quad share rows
  x = fmaxf(x, __shfl_xor_sync(0xffffffffu, x, 1));
  return fmaxf(x, __shfl_xor_sync(0xffffffffu, x, 2));
}
__device__ __forceinline__ float quad_sum(float x) {
  x += __shfl_xor_sync(0xffffffffu, x, 1);
  return x + __shfl_xor_sync(0xffffffffu, x, 2);
}

// Scores past the sequence end, or above the diagonal when causal, become -inf.
// row: this thread's first row (its second is row + 8); col: its first column.
template <bool kCausal, int N>
__device__ __forceinline__ void mask_scores(float (&s)[N], int row, int col, int seq_len) {
#pragma unroll
  for (int i = 0; i < N; ++i) {
    const int c = col + (i / 4) * 8 + (i & 1), r = row + ((i >> 1) & 1) * 8;
    if (c >= seq_len || (kCausal && c > r)) s[i] = -INFINITY;
  }
}

struct OnlineSoftmax {
  float m[2] = {-INFINITY, -INFINITY};  // running max of the raw scores, per row
  float l[2] = {0.f, 0.f};              // running sum of exp, this lane's columns only
  float corr[2] = {1.f, 1.f};           // how much O shrinks for the latest tile's max

  // s becomes 2^(s*c - max*c) in place, c = scale * log2(e): one FFMA and one MUFU a score.
  template <int N>
  __device__ __forceinline__ void update(float (&s)[N], float scale_log2) {
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      float mx = m[h];
#pragma unroll
      for (int i = 2 * h; i < N; i += 4) mx = fmaxf(mx, fmaxf(s[i], s[i + 1]));
      mx = quad_max(mx);
      const float base = mx == -INFINITY ? 0.f : mx * scale_log2;
      corr[h] = fast_exp2(m[h] * scale_log2 - base);
      m[h] = mx;
      float sum = 0.f;
#pragma unroll
      for (int i = 2 * h; i < N; i += 4) {
        s[i] = fast_exp2(fmaf(s[i], scale_log2, -base));
        s[i + 1] = fast_exp2(fmaf(s[i + 1], scale_log2, -base));
        sum += s[i] + s[i + 1];
      }
      l[h] = l[h] * corr[h] + sum;
    }
  }

  template <int N>
  __device__ __forceinline__ void rescale(float (&o)[N]) const {
#pragma unroll
    for (int i = 0; i < N; ++i) o[i] *= corr[(i >> 1) & 1];
  }

  // Joins another pass over other keys of the same rows (its O, maxima m2 and sums l2): both
  // sides rescaled to the larger maximum, as update does.
  template <int N>
  __device__ __forceinline__ void merge(float (&o)[N], const float (&o2)[N], const float (&m2)[2],
                                        const float (&l2)[2], float scale_log2) {
    float a[2], b[2];
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      const float mx = fmaxf(m[h], m2[h]);
      const float base = mx == -INFINITY ? 0.f : mx * scale_log2;
      a[h] = fast_exp2(m[h] * scale_log2 - base);
      b[h] = fast_exp2(m2[h] * scale_log2 - base);
      l[h] = l[h] * a[h] + l2[h] * b[h];
      m[h] = mx;
    }
#pragma unroll
    for (int i = 0; i < N; ++i) o[i] = o[i] * a[(i >> 1) & 1] + o2[i] * b[(i >> 1) & 1];
  }

  // O / l, with l summed over the quad; rows with no key (none here) would give 0.
  template <int N>
  __device__ __forceinline__ void finish(float (&o)[N]) {
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      const float total = quad_sum(l[h]);
      l[h] = total > 0.f ? 1.f / total : 0.f;
    }
#pragma unroll
    for (int i = 0; i < N; ++i) o[i] *= l[(i >> 1) & 1];
  }
};

// Probabilities (C fragments, FP32) -> A fragments of P.V in the element type E (base/elem.cuh):
// per k16 step, the two n8 blocks of 8 keys become {row g, row g+8} x {keys 0-7, keys 8-15}.
template <class E, int N>
__device__ __forceinline__ void pack_p(const float (&s)[N], uint32_t (&p)[N / 2]) {
#pragma unroll
  for (int i = 0; i < N / 2; ++i) p[i] = E::pack(s[2 * i], s[2 * i + 1]);
}
