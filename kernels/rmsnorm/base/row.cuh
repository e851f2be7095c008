// A thread's share of one row: kElems elements held as kWords words, moved between registers
// and global memory chunk by chunk, the chunk's size set by the vector seam and its place in
// the row by the access seam. Loads and stores use the same mapping, so x, w and y line up
// element by element whatever the two seams choose.
#pragma once
#include <cstdint>

template <class Vector, class Access, int kLanes, int kElems>
struct RowIO {
  static constexpr int kWords = kElems / 2;
  static constexpr int kChunks = kElems / Vector::kWidth;
  // elements between a thread's consecutive chunks
  static constexpr int kStep = Access::template kStep<kChunks, kLanes> * Vector::kWidth;
  static_assert(kElems % Vector::kWidth == 0 && kElems % 2 == 0, "whole chunks of whole words");

  // The thread's elements of `row`; zeros where they lie at or past `limit` (the row's length,
  // or 0 for a row past the end of the tensor).
  template <class Cache>
  __device__ __forceinline__ static void load(uint32_t (&f)[kWords], const uint16_t* row,
                                              int lane, int limit) {
    const int first = Access::template first<kChunks, kLanes>(lane) * Vector::kWidth;
    row = thread_base(row + first);
#pragma unroll
    for (int i = 0; i < kChunks; ++i)
      Vector::template load<Cache>(f, i, row + i * kStep, first + i * kStep < limit);
  }

  __device__ __forceinline__ static void store(const uint32_t (&f)[kWords], uint16_t* row,
                                               int lane, int limit) {
    const int first = Access::template first<kChunks, kLanes>(lane) * Vector::kWidth;
    row = thread_base(row + first);
#pragma unroll
    for (int i = 0; i < kChunks; ++i)
      Vector::store(f, i, row + i * kStep, first + i * kStep < limit);
  }

 private:
  // One 64-bit pointer per thread, the chunks at constant offsets from it (LDG [R.64+0x1000]).
  // Left alone, the compiler folds the chunk's constant into the 32-bit column index before
  // widening it (it knows the index's bits do not overlap) and builds a 64-bit pointer per chunk.
  template <class P>
  __device__ __forceinline__ static P* thread_base(P* p) {
    asm("" : "+l"(p));
    return p;
  }
};
