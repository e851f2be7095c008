// The rings' protocol in one place: where a ring stands (a stage and its phase) and the
// named calls by which the producer and the consumers pass a stage back and forth through its
// two mbarriers, after CUTLASS's PipelineState and pipeline classes (written for this kernel).
// Loaders (base/loader.cuh) only move bytes into the stage they are given.
#pragma once
#include <cstdint>
#include "base/tma.cuh"

// A position in a ring of kStages stages: the n-th tile through it (n counting over all of
// the block's query tiles) goes into stage n % kStages and waits on that stage's barriers in
// phase parity (n / kStages) & 1, which flips each time the index wraps. The index is taken
// where the position is made (at), the phase where a barrier is waited on: where the kernel
// computed both by hand before, so its SASS is unchanged (cuobjdump). Stepping index and
// phase instead, as CUTLASS's PipelineState does with ++, compiles to another producer loop
// (same instruction count, other SASS), so positions are made from counts.
template <int kStages>
struct PipelineState {
  int count;  // tiles through the ring before this one
  int index;
  __device__ __forceinline__ static PipelineState at(int n) { return {n, n % kStages}; }
  __device__ __forceinline__ uint32_t phase() const {
    return static_cast<uint32_t>((count / kStages) & 1);
  }
};

// One stage at a position: its tile's bytes; `full`, completed when the loader's threads have
// arrived (and, with the copy engine, its bytes have landed); `empty`, completed when every
// consumer thread has released the tile; and the phase the position waits for.
struct Stage {
  uint8_t* data;
  uint64_t* full;
  uint64_t* empty;
  uint32_t phase;
};

// Producer: wait until the consumers have released the tile the stage held a round before
// (the round before the first counts as released: a new barrier's preceding phase is done).
__device__ __forceinline__ void wait_empty(const Stage& s) { mbar_wait(s.empty, s.phase ^ 1); }
// Producer: one arrival on full, after the thread's own stores to the stage ...
__device__ __forceinline__ void arrive_full(const Stage& s) { mbar_arrive(s.full); }
// ... or before copies that complete the barrier themselves (TMA): the arrival arms it with
// the bytes they will bring.
__device__ __forceinline__ void arrive_full(const Stage& s, uint32_t bytes) {
  mbar_expect_bytes(s.full, bytes);
}
// Consumer: wait until the tile is in; release it once done reading it.
__device__ __forceinline__ void wait_full(const Stage& s) { mbar_wait(s.full, s.phase); }
__device__ __forceinline__ void release(const Stage& s) { mbar_arrive(s.empty); }
