// extra_syncthreads: a block-wide barrier after every shared-memory step, inside the
// inner MMA loops too. Warps can no longer drift apart to hide each other's latency:
// every ldmatrix/MMA group waits for the slowest warp.
#pragma once
#ifdef ABLATE_EXTRA_SYNCTHREADS
#ifdef ABLATE_SEAM_BARRIER
#error "extra_syncthreads: another pathology already replaces the barrier seam"
#endif
struct BarrierEverywhere {
  __device__ __forceinline__ static void sync() { __syncthreads(); }
};
#define ABLATE_SEAM_BARRIER BarrierEverywhere
#endif
