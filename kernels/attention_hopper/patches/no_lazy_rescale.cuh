// no_lazy_rescale: every key tile moves each row's running max to the new maximum, and every
// warp rescales its whole O accumulator by the correction, 1 or not: D/2 multiplies a thread
// per tile between the end of P V and the next GEMMs, as a plain online softmax does.
#pragma once
#ifdef ABLATE_NO_LAZY_RESCALE
#ifdef ABLATE_SEAM_RESCALE
#error "no_lazy_rescale: another pathology already replaces the rescale seam"
#endif
struct EagerRescale {
  __device__ __forceinline__ static bool moves(float) { return true; }
  template <int N>
  __device__ __forceinline__ static void rescale(float (&o)[N], const float (&corr)[2]) {
#pragma unroll
    for (int i = 0; i < N; ++i) o[i] *= corr[(i >> 1) & 1];
  }
};
#define ABLATE_SEAM_RESCALE EagerRescale
#endif
