// fault (test only): every thread stores through a wild pointer before its tile, so the
// launch dies with cudaErrorIllegalAddress and the CUDA context of its process is lost.
// The pipeline must record the job as crashed and go on with the next one.
#pragma once
#ifdef ABLATE_TEST_FAULT
#ifdef ABLATE_SEAM_SCHEDULE
#error "fault: another pathology already replaces the schedule seam"
#endif
#include <cstdint>
struct WildStore {
  static dim3 grid(int m_tiles, int bh) { return dim3(m_tiles, bh); }
  template <bool kCausal, class F>
  __device__ __forceinline__ static void run(int, int, F&& attend) {
    // The first pages of the address space are never mapped; volatile keeps the store.
    *reinterpret_cast<volatile int*>(static_cast<uintptr_t>(16 + 4 * threadIdx.x)) = 1;
    attend(static_cast<int>(blockIdx.x), static_cast<int>(blockIdx.y));
  }
};
#define ABLATE_SEAM_SCHEDULE WildStore
#endif
