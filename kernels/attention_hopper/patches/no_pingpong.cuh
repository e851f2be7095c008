// no_pingpong: the two consumer warpgroups issue their GEMMs whenever they are ready, with
// no named barriers passing turns. Both tend to reach softmax together, leaving the tensor
// cores idle while the multi-function unit (exp2) is the bottleneck, then contend for them.
#pragma once
#ifdef ABLATE_NO_PINGPONG
#ifdef ABLATE_SEAM_TURNS
#error "no_pingpong: another pathology already replaces the turns seam"
#endif
struct FreeForAll {
  __device__ __forceinline__ static void start(int) {}
  __device__ __forceinline__ static void take_turn(int) {}
  __device__ __forceinline__ static void pass_turn(int, bool) {}
};
#define ABLATE_SEAM_TURNS FreeForAll
#endif
