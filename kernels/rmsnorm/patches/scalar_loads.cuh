// scalar_loads: 2-byte global accesses, one element at a time, in place of 16-byte vectors.
// The order stays coalesced (a thread's elements are dealt out like its vectors were, so a
// warp's access covers 64 contiguous bytes): the same bytes, in eight times the load and
// store instructions, each carrying an eighth of the data.
#pragma once
#ifdef ABLATE_SCALAR_LOADS
#ifdef ABLATE_SEAM_VECTOR
#error "scalar_loads: another pathology already replaces the vector seam"
#endif
#include <cstdint>
#include "base/vector.cuh"
struct ScalarLoads {
  static constexpr int kWidth = 1;  // elements per access
  // Chunk i is element i of the thread's array: the low half of word i / 2 when i is even.
  // Chunks arrive in increasing i, so the even one starts the word and the odd one completes it.
  template <class Cache, int kWords>
  __device__ __forceinline__ static void load(uint32_t (&f)[kWords], int i, const uint16_t* src,
                                              bool valid) {
    const uint32_t v = Cache::u16(src, valid);
    f[i / 2] = i % 2 == 0 ? v : f[i / 2] | (v << 16);
  }
  template <int kWords>
  __device__ __forceinline__ static void store(const uint32_t (&f)[kWords], int i, uint16_t* dst,
                                               bool valid) {
    const auto h = static_cast<unsigned short>(f[i / 2] >> (16 * (i % 2)));
    if (valid) __stcs(reinterpret_cast<unsigned short*>(dst), h);  // streaming, as the base's
  }
};
#define ABLATE_SEAM_VECTOR ScalarLoads
#endif
