// serial_grid: the grid covers query tiles only and each block loops over every
// (batch, head): the classic launch bug. Parallelism no longer grows with B*H, so time
// grows linearly with it once the query tiles alone cannot fill the GPU.
#pragma once
#ifdef ABLATE_SERIAL_GRID
#ifdef ABLATE_SEAM_SCHEDULE
#error "serial_grid: another pathology already replaces the schedule seam"
#endif
struct SerialHeads {
  static dim3 grid(int m_tiles, int) { return dim3(m_tiles); }
  template <bool kCausal, class F>
  __device__ __forceinline__ static void run(int m_tiles, int bh, F&& attend) {
    const int m = kCausal ? m_tiles - 1 - static_cast<int>(blockIdx.x) : blockIdx.x;
    for (int b = 0; b < bh; ++b) {
      attend(m, b);
      __syncthreads();  // the next head reuses this block's shared memory
    }
  }
};
#define ABLATE_SEAM_SCHEDULE SerialHeads
#endif
