// The argument check of ablate_attention_fwd (ablate_attention.h), shared by every attention
// base: what is refused with cudaErrorInvalidValue before anything is launched.
#pragma once
#include <cmath>
#include <cstdint>

inline bool ablate_attention_args_ok(const void* q, const void* k, const void* v, const void* o,
                                     int B, int H, int S, int D, float scale) {
  auto aligned = [](const void* ptr) {
    return ptr != nullptr && reinterpret_cast<uintptr_t>(ptr) % 16 == 0;
  };
  // scale > 0: the kernels take the row max of raw scores, which is the max of the scaled
  // ones only for a positive scale. B*H indexes gridDim.y.
  return aligned(q) && aligned(k) && aligned(v) && aligned(o) && B >= 1 && H >= 1 && S >= 1 &&
         (D == 64 || D == 128) && std::isfinite(scale) && scale > 0.f &&
         static_cast<int64_t>(B) * H <= 65535;
}
