// atomic_reduce: every thread adds its partial sum into its row's one shared-memory slot with
// an atomic. All the adds of a row hit one address, so the shared-memory atomic unit applies
// them one after another (up to 512 per row), where shuffles combine 32 lanes in 5 steps.
#pragma once
#ifdef ABLATE_ATOMIC_REDUCE
#ifdef ABLATE_SEAM_REDUCE
#error "atomic_reduce: another pathology already replaces the reduce seam"
#endif
struct SharedAtomicReduce {
  template <int kLanes, int kThreads, class Acc>
  __device__ __forceinline__ static Acc sum(Acc v) {
    __shared__ Acc total[kThreads / kLanes];
    const int row = threadIdx.x / kLanes;
    if (threadIdx.x % kLanes == 0) total[row] = Acc(0);
    __syncthreads();
    atomicAdd(&total[row], v);
    __syncthreads();
    return total[row];  // each block reduces once: total is not written again
  }
};
#define ABLATE_SEAM_REDUCE SharedAtomicReduce
#endif
