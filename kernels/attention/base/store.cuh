// Epilogue: O (FP32 registers) -> element type E (FP16, BF16) in shared memory -> 16-byte coalesced global stores.
#pragma once
#include "mma.cuh"

// Each warp stages and stores only its own rows, so __syncwarp orders the steps. sO may
// alias the warp's Q rows: the first __syncwarp keeps one lane's writes from overtaking
// another lane's last ldmatrix read of them (compute-sanitizer racecheck finds it when no
// block-wide barrier happens to follow the last key tile).
template <class T, class Layout, class Barrier, class E>
__device__ __forceinline__ void store_o(const float (&o)[T::kMTiles][T::kDTiles][4], half* sO,
                                        half* gO, int warp_row0, int valid_rows, int lane) {
  __syncwarp();
#pragma unroll
  for (int mi = 0; mi < T::kMTiles; ++mi)
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      const int row = warp_row0 + mi * 16 + (lane >> 2) + h * 8;
#pragma unroll
      for (int dt = 0; dt < T::kDTiles; ++dt)
        *reinterpret_cast<uint32_t*>(sO + Layout::template offset<T::kChunks>(row, dt) +
                                     (lane & 3) * 2) =
            E::pack(o[mi][dt][2 * h], o[mi][dt][2 * h + 1]);
    }
  __syncwarp();
  Barrier::sync();
  constexpr int kRowStep = 32 / T::kChunks;  // rows per warp-wide pass
  const int chunk = lane % T::kChunks;
#pragma unroll
  for (int i = 0; i < T::kRowsPerWarp / kRowStep; ++i) {
    const int row = warp_row0 + lane / T::kChunks + i * kRowStep;
    if (row < valid_rows)
      *reinterpret_cast<uint4*>(gO + row * T::kHeadDim + chunk * 8) =
          *reinterpret_cast<const uint4*>(sO + Layout::template offset<T::kChunks>(row, chunk));
  }
}
