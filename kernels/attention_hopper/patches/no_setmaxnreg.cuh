// no_setmaxnreg: every warpgroup keeps the even share of registers the launch gives it
// (65536 / 384 threads = 168 each): the producer holds 144 registers a thread it never uses,
// and the consumers, whose scores, probabilities and O accumulator want up to 240, get 168.
#pragma once
#ifdef ABLATE_NO_SETMAXNREG
#ifdef ABLATE_SEAM_REGISTERS
#error "no_setmaxnreg: another pathology already replaces the registers seam"
#endif
struct EvenShare {
  __device__ __forceinline__ static void producer() {}
  __device__ __forceinline__ static void consumer() {}
};
#define ABLATE_SEAM_REGISTERS EvenShare
#endif
