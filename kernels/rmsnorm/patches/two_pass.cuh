// two_pass: the row is not kept in registers between the statistics and the scaling; the
// scaling reads x from global memory again. Where the second read hits L2 (the row was read
// microseconds earlier) DRAM traffic barely grows, but L2-to-SM traffic for x doubles and
// every block waits for a second round trip after its reduction.
#pragma once
#ifdef ABLATE_TWO_PASS
#ifdef ABLATE_SEAM_RESIDENCY
#error "two_pass: another pathology already replaces the residency seam"
#endif
#include <cstdint>
struct ReadTwice {
  template <class IO, class Cache, int kWords>
  __device__ __forceinline__ static void refetch(uint32_t (&x)[kWords], const uint16_t* row,
                                                 int lane, int limit) {
    IO::template load<Cache>(x, row, lane, limit);  // the loads are volatile: never merged
  }
};
#define ABLATE_SEAM_RESIDENCY ReadTwice
#endif
