// The reduce seam's base: the sum of one value per thread over the kLanes threads of each
// row, returned to every one of them. A block holds kThreads / kLanes rows, each on kLanes
// consecutive threads (kLanes a power of two: a fraction of a warp, a warp, or several).
//
// Within a warp, a butterfly of xor shuffles: after log2(n) steps every lane of each aligned
// group of n holds the group's sum, with no shared memory and no barrier. A row of several
// warps adds one step: lane 0 of each warp writes its warp's sum to a shared slot, one
// __syncthreads, and every warp re-reduces its row's slots with another butterfly. Each block
// reduces once (one row group per block), so the slots are never rewritten and the one
// barrier suffices.
#pragma once

// Sum over each aligned group of kGroup lanes (a power of two <= 32), in every lane of it.
template <int kGroup, class Acc>
__device__ __forceinline__ Acc group_sum(Acc v) {
#pragma unroll
  for (int offset = kGroup / 2; offset > 0; offset /= 2)
    v += __shfl_xor_sync(0xffffffffu, v, offset);
  return v;
}

struct WarpShuffleReduce {
  template <int kLanes, int kThreads, class Acc>
  __device__ __forceinline__ static Acc sum(Acc v) {
    static_assert(kLanes > 0 && (kLanes & (kLanes - 1)) == 0 && kThreads % kLanes == 0,
                  "rows of a power-of-two number of threads");
    if constexpr (kLanes <= 32) {
      return group_sum<kLanes>(v);
    } else {
      constexpr int kWarpsPerRow = kLanes / 32;
      __shared__ Acc slots[kThreads / 32];
      const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
      v = group_sum<32>(v);
      if (lane == 0) slots[warp] = v;
      __syncthreads();
      const int row_slot0 = warp / kWarpsPerRow * kWarpsPerRow;
      return group_sum<kWarpsPerRow>(slots[row_slot0 + lane % kWarpsPerRow]);
    }
  }
};
