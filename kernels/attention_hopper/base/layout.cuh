// The shared-memory layout of the tiles (the swizzle seam): where each 16-byte chunk of a row
// lies, how wgmma's descriptors describe that, and the TMA copies that write and read it.
//
// A layout type provides, for a tile of kRows rows of D 16-bit elements (chunks c = 0 .. D/8 - 1):
//   offset<kRows>(r, c)        byte offset of chunk c of row r. Additive over groups of 8 rows:
//                              offset(r0 + r, c) = offset(r0, 0) + offset(r, c) when r0 % 8 == 0,
//                              so code may start from a pointer to row r0 (a warpgroup's rows)
//   at<kRows>(tile, r, c)      tile + offset<kRows>(r, c) for a pointer, its terms added one by
//                              one (so the stores that use it compile as they did before the seam)
//   desc_k<kRows>(rows, ks)    wgmma descriptor of a K-major operand (Q, K: rows along M or N,
//                              the head dim contiguous) at k-step ks (16 columns), for the rows
//                              starting at `rows` (in shared memory)
//   desc_mn<kRows>(tile, ks)   wgmma descriptor of an MN-major operand (V: keys along K, the
//                              head dim contiguous) at k-step ks (16 keys)
//   load_map / store_map       host: the tensor maps of one (B*H, S, D) tensor of element type
//                              `type` (FP16 or BF16), for tile loads and for the stores of one
//                              warpgroup's rows
//   load<T, kRows>             device: TMA copies of a whole tile (every column) into shared memory
//   store<T>                   device: TMA stores of one warpgroup's 64 output rows
#pragma once
#include <cstdint>
#include "base/tma.cuh"
#include "base/wgmma.cuh"

// The base: rows of 128 bytes (64 columns) in 64-column panels of kRows x 128 bytes, chunk c of
// row r at position c ^ (r % 8) in its row: 8 consecutive rows' chunk c lie in 8 different
// 16-byte bank groups, and a TMA box of 64 columns writes a whole panel.
struct Swizzle128 {
  template <int kRows>
  __device__ __forceinline__ static int offset(int r, int c) {
    return (c / 8) * kRows * 128 + r * 128 + ((c % 8) ^ (r & 7)) * 16;
  }
  template <int kRows, class P>
  __device__ __forceinline__ static P* at(P* tile, int r, int c) {
    return tile + (c / 8) * kRows * 128 + r * 128 + ((c % 8) ^ (r & 7)) * 16;
  }
  // K-major: the 8-row groups 1024 bytes apart (SBO); LBO unused with a swizzle (1 by
  // convention). Start: rows + offset<kRows>(0, 2 * ks), the panel added to the pointer and
  // the k-step's 32 bytes to the address, as the base has always been compiled.
  template <int kRows>
  __device__ __forceinline__ static uint64_t desc_k(const uint8_t* rows, int ks) {
    return smem_desc(smem_u32(rows + (ks / 4) * kRows * 128) + (ks % 4) * 32, 16, 1024, kSmemDesc128B);
  }
  // MN-major: 64-column panels kRows * 128 bytes apart (LBO), 8-key groups 1024 bytes (SBO).
  template <int kRows>
  __device__ __forceinline__ static uint64_t desc_mn(const uint8_t* tile, int ks) {
    return smem_desc(smem_u32(tile) + offset<kRows>(16 * ks, 0), kRows * 128, 1024, kSmemDesc128B);
  }

  // Three dimensions (d, s, b*h) rather than two, so that a box past a head's last row is
  // filled with zeros (loads) or dropped (stores) instead of touching the next head. Boxes of
  // 64 columns (128 bytes, the swizzle's width) by `rows` rows.
  static cudaError_t load_map(CUtensorMap* map, CUtensorMapDataType type, const void* ptr, int bh,
                              int seq, int d, int rows) {
    const cuuint64_t dims[3] = {static_cast<cuuint64_t>(d), static_cast<cuuint64_t>(seq),
                                static_cast<cuuint64_t>(bh)};
    const cuuint64_t strides[2] = {static_cast<cuuint64_t>(d) * 2,
                                   static_cast<cuuint64_t>(seq) * d * 2};  // bytes, dims 1 and 2
    const cuuint32_t box[3] = {64, static_cast<cuuint32_t>(rows), 1};
    return encode_tensor_map(map, type, ptr, 3, dims, strides, box, CU_TENSOR_MAP_SWIZZLE_128B);
  }
  static cudaError_t store_map(CUtensorMap* map, CUtensorMapDataType type, const void* ptr, int bh,
                               int seq, int d, int rows) {
    return load_map(map, type, ptr, bh, seq, d, rows);
  }
  // One box per 64-column panel.
  template <class T, int kRows>
  __device__ __forceinline__ static void load(uint8_t* dst, const CUtensorMap* map, uint64_t* bar,
                                              int row, int bh) {
#pragma unroll
    for (int c = 0; c < T::kHeadDim / 64; ++c)
      tma_load(dst + offset<kRows>(0, 8 * c), map, bar, 64 * c, row, bh);
  }
  // `rows`: the warpgroup's first row in the Q tile (offset<kBlockM>(64 * wg, 0) into it).
  template <class T>
  __device__ __forceinline__ static void store(const CUtensorMap* map, const uint8_t* rows, int row,
                                               int bh) {
#pragma unroll
    for (int c = 0; c < T::kHeadDim / 64; ++c)
      tma_store(map, rows + offset<T::kBlockM>(0, 8 * c), 64 * c, row, bh);
  }
};
