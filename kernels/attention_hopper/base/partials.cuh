// Query tiles whose keys two blocks share (the stream-K schedule, base/schedule.cuh): the
// block with the tile's last keys leaves its O (not yet divided by the row sums), row maxima
// and row sums here and raises its warpgroup's flag; the block with the first keys, the one
// before it, waits for the flag, merges them into its own and stores the tile. Each consumer
// thread writes and reads only its own fragments, so the slots are laid out thread-fastest
// (coalesced); one slot per leaving block, one flag per warpgroup. The reader lowers the
// flag again, so every launch starts with all of them down. The slots belong to the library
// (one array per device): launches of it must not overlap in time on one device.
#pragma once
#include <cstdint>

constexpr int kPartialSlots = 144;   // blocks of a stream-K launch, at most
constexpr int kPartialThreads = 128;  // a consumer warpgroup
constexpr int kPartialVectors = (128 / 2 + 4) / 4;  // O at D = 128, then maxima and sums, as float4

__device__ float4 g_partial_values[kPartialSlots][2][kPartialVectors][kPartialThreads];
__device__ int g_partial_ready[kPartialSlots][2];

// Vector i (O[4i .. 4i+3]; the last: max and sum of both rows) of thread `tid` of warpgroup
// `wg` in `slot`.
__device__ __forceinline__ float4* partial_vector(int slot, int wg, int i, int tid) {
  return &g_partial_values[slot][wg][i][tid];
}
// After the warpgroup's writes (a barrier between them and this): the flag, with release
// semantics at GPU scope, so the reader's acquire sees the writes.
__device__ __forceinline__ void partial_raise(int slot, int wg) {
  asm volatile("st.release.gpu.global.b32 [%0], %1;" ::"l"(&g_partial_ready[slot][wg]), "r"(1) : "memory");
}
// Until the flag is up (acquire); then lowered for the next launch.
__device__ __forceinline__ void partial_wait(int slot, int wg) {
  int* flag = &g_partial_ready[slot][wg];
  int up = 0;
  do {
    asm volatile("ld.acquire.gpu.global.b32 %0, [%1];" : "=r"(up) : "l"(flag) : "memory");
  } while (up == 0);
  asm volatile("st.relaxed.gpu.global.b32 [%0], %1;" ::"l"(flag), "r"(0) : "memory");
}
