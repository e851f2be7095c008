// Global-memory accesses: the cache policy of each tensor's loads, and the vector seam's base
// choice, 16-byte accesses (8 elements, one LDG.E.128 / STG.E.128 each).
//
// A thread holds its elements of a row as 32-bit words, two elements each (kWords = elements
// / 2), in register arrays indexed only by compile-time constants (every loop over them is
// unrolled), so nothing goes to local memory. The vector seam moves one *chunk* of those
// elements between a word array and global memory; chunk i of a thread is elements
// [i * kWidth, (i + 1) * kWidth) of its array, and callers visit chunks in increasing i.
#pragma once
#include <cstdint>

// x and w are read-only for the whole launch, so both go through the non-coherent path
// (ld.global.nc). The loads are predicated inside the asm (zeros when !valid), so a masked
// chunk costs no branch, and volatile, so the compiler never merges two loads of one address
// (a pathology that reads x twice must really read it twice).

// A read-only load policy: predicated 16- or 2-byte loads through the non-coherent path
// (zero when !valid), with a cache qualifier for L1. The two policies differ in it alone.
#define ABLATE_RMSNORM_READ_ONLY(NAME, QUALIFIER)                                            \
  struct NAME {                                                                              \
    __device__ __forceinline__ static uint4 v4(const uint16_t* p, bool valid) {              \
      uint4 v;                                                                               \
      asm volatile("{\n .reg .pred p;\n setp.ne.b32 p, %5, 0;\n"                            \
                   " mov.b32 %0, 0;\n mov.b32 %1, 0;\n mov.b32 %2, 0;\n mov.b32 %3, 0;\n"   \
                   " @p ld.global.nc" QUALIFIER ".v4.u32 {%0, %1, %2, %3}, [%4];\n}\n"        \
                   : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w)                              \
                   : "l"(p), "r"(static_cast<int>(valid)));                                  \
      return v;                                                                              \
    }                                                                                        \
    __device__ __forceinline__ static uint16_t u16(const uint16_t* p, bool valid) {          \
      uint16_t v;                                                                            \
      asm volatile("{\n .reg .pred p;\n setp.ne.b32 p, %2, 0;\n mov.b16 %0, 0;\n"           \
                   " @p ld.global.nc" QUALIFIER ".u16 %0, [%1];\n}\n"                         \
                   : "=h"(v) : "l"(p), "r"(static_cast<int>(valid)));                        \
      return v;                                                                              \
    }                                                                                        \
  }

// x: each element is read exactly once, so L1::no_allocate streams it past L1 instead of
// letting it evict w (up to 32 KB, re-read by every row of every block on the SM).
ABLATE_RMSNORM_READ_ONLY(StreamOnce, ".L1::no_allocate");

// w: the same few KB for every row, so it stays cached in L1 (and L2) after the first row.
ABLATE_RMSNORM_READ_ONLY(KeepCached, "");

// The vector seam's base: a chunk is 8 elements = 16 bytes = 4 words, the widest access a
// thread can make. hidden is a multiple of 8, so a chunk lies wholly inside the row or wholly
// past its end: `valid` masks whole chunks. y is stored with the streaming hint (st.global.cs,
// STG.E.EF): nothing here reads it again, and on the H100 it measured ~1.5% faster than a
// plain store at 16384 x 8192 and 262144 x 1024 (180.2 vs 183.0 us, 357.9 vs 363.8 us).
struct Vector16 {
  static constexpr int kWidth = 8;  // elements per access
  template <class Cache, int kWords>
  __device__ __forceinline__ static void load(uint32_t (&f)[kWords], int i, const uint16_t* src,
                                              bool valid) {
    const uint4 v = Cache::v4(src, valid);
    f[4 * i] = v.x;
    f[4 * i + 1] = v.y;
    f[4 * i + 2] = v.z;
    f[4 * i + 3] = v.w;
  }
  template <int kWords>
  __device__ __forceinline__ static void store(const uint32_t (&f)[kWords], int i, uint16_t* dst,
                                               bool valid) {
    if (valid)
      __stcs(reinterpret_cast<uint4*>(dst),
             make_uint4(f[4 * i], f[4 * i + 1], f[4 * i + 2], f[4 * i + 3]));
  }
};
