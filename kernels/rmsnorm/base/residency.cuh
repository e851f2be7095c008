// The residency seam's base: the row stays in the registers it was loaded into (x is read
// from global memory once), so normalizing it needs no second trip. The seam is the step
// between the statistics and the scaling: make x available again.
//
// Staying in registers has a catch: the statistics widened every element to float, and the
// compiler would rather keep those 32 floats alive across the reduction than widen the 16
// packed words again (64 registers a thread instead of 48 in the many-rows instances: 4
// blocks of 256 per SM instead of 5). Passing each word through an identity byte permute
// (one PRMT, which ptxas does not see through) hides that the scaling's conversions repeat
// the statistics', so only the packed words stay live.
#pragma once
#include <cstdint>

struct KeepInRegisters {
  template <class IO, class Cache, int kWords>
  __device__ __forceinline__ static void refetch(uint32_t (&x)[kWords], const uint16_t*, int, int) {
#pragma unroll
    for (int i = 0; i < kWords; ++i) asm("prmt.b32 %0, %0, 0, 0x3210;" : "+r"(x[i]));
  }
};
