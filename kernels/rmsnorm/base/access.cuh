// The access seam's base: which chunks of a row a thread owns. A thread's chunks are evenly
// spaced: chunk i of lane `lane` (its index among the kLanes threads of its row) is chunk
// first(lane) + i * kStep of the row. Interleaved deals them round-robin (first = lane,
// kStep = kLanes), so one access instruction of a warp covers 32 consecutive chunks: with
// 16-byte chunks, 512 contiguous bytes, four full 128-byte lines, every sector used whole.
#pragma once

struct Interleaved {
  template <int kChunks, int kLanes>  // kChunks: chunks per thread
  static constexpr int kStep = kLanes;
  template <int kChunks, int kLanes>
  __device__ __forceinline__ static int first(int lane) { return lane; }
};
