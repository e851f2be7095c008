// hang (test only): every thread spins forever before its tile, so the launch never ends
// and the GPU child waits on it until the parent's deadline (bench.timeout_s) kills it.
// The pipeline must record the job as timeout and go on with the next one, on every GPU.
#pragma once
#ifdef ABLATE_TEST_HANG
#ifdef ABLATE_SEAM_SCHEDULE
#error "hang: another pathology already replaces the schedule seam"
#endif
struct Spin {
  static dim3 grid(int m_tiles, int bh) { return dim3(m_tiles, bh); }
  template <bool kCausal, class F>
  __device__ __forceinline__ static void run(int, int, F&& attend) {
    // An empty volatile asm is a side effect the compiler keeps: the loop is never removed.
    for (;;) asm volatile("");
    attend(static_cast<int>(blockIdx.x), static_cast<int>(blockIdx.y));
  }
};
#define ABLATE_SEAM_SCHEDULE Spin
#endif
