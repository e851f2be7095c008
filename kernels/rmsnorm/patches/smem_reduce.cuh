// smem_reduce: the row's sum as a tree through shared memory, a __syncthreads at every level,
// in place of warp shuffles: log2(threads per row) barriers (8 at 256 threads a row, where
// the base has one), each a round trip through shared memory that the whole block waits on,
// even for rows that fit in one warp and needed no barrier at all.
#pragma once
#ifdef ABLATE_SMEM_REDUCE
#ifdef ABLATE_SEAM_REDUCE
#error "smem_reduce: another pathology already replaces the reduce seam"
#endif
struct SharedTreeReduce {
  template <int kLanes, int kThreads, class Acc>
  __device__ __forceinline__ static Acc sum(Acc v) {
    __shared__ Acc buf[kThreads];
    const int tid = threadIdx.x, lane = tid % kLanes;
    buf[tid] = v;
    __syncthreads();
#pragma unroll
    for (int half = kLanes / 2; half > 0; half /= 2) {
      if (lane < half) buf[tid] += buf[tid + half];
      __syncthreads();
    }
    return buf[tid - lane];  // each block reduces once: buf is not written again
  }
};
#define ABLATE_SEAM_REDUCE SharedTreeReduce
#endif
