// no_swizzle: the tiles in wgmma's one unswizzled layout ("interleave"): 8 x 8 core matrices,
// each 8 rows x 16 bytes stored as 128 contiguous bytes. A tile of kRows rows is D/8 strips
// of kRows x 16 bytes, one per 16-byte chunk c of the head dim, chunk c of row r at
// c * kRows * 16 + r * 16 (panels of 8 chunks lie kRows * 128 bytes apart, as the swizzled
// panels do, so the shared-memory plan is unchanged). TMA writes that layout when its tensor
// map splits the head dim into 16-byte chunks: the box is 16 bytes wide, and every row of
// every chunk is a request of its own, 8x as many as with 128-byte rows. The epilogue stores
// a warpgroup's output one chunk (a 1 KB strip) at a time: D/8 stores instead of D/64.
#pragma once
#ifdef ABLATE_NO_SWIZZLE
#ifdef ABLATE_SEAM_SWIZZLE
#error "no_swizzle: another pathology already replaces the swizzle seam"
#endif
#include "base/layout.cuh"

// Bulk tensor copies of a box of the 4-dimensional map below: coordinates (element in chunk,
// row, chunk, b*h).
__device__ __forceinline__ void tma_load_4d(void* dst, const CUtensorMap* map, uint64_t* bar,
                                            int row, int chunk, int bh) {
  asm volatile(
      "cp.async.bulk.tensor.4d.shared::cluster.global.mbarrier::complete_tx::bytes"
      " [%0], [%1, {%3, %4, %5, %6}], [%2];" ::"r"(smem_u32(dst)), "l"(map), "r"(smem_u32(bar)),
      "r"(0), "r"(row), "r"(chunk), "r"(bh) : "memory");
}
__device__ __forceinline__ void tma_store_4d(const CUtensorMap* map, const void* src, int row,
                                             int chunk, int bh) {
  asm volatile("cp.async.bulk.tensor.4d.global.shared::cta.bulk_group [%0, {%2, %3, %4, %5}], [%1];"
               ::"l"(map), "r"(smem_u32(src)), "r"(0), "r"(row), "r"(chunk), "r"(bh) : "memory");
}

struct NoSwizzle {
  template <int kRows>
  __device__ __forceinline__ static int offset(int r, int c) { return c * kRows * 16 + r * 16; }
  template <int kRows, class P>
  __device__ __forceinline__ static P* at(P* tile, int r, int c) { return tile + c * kRows * 16 + r * 16; }

  // The descriptors of the interleaved layout (PTX ISA, wgmma "Matrix Descriptor Format" and
  // "Strides"; CUTLASS make_gmma_desc, LayoutType::INTERLEAVE). K-major, in 16-byte units T:
  // ((8 rows, n groups), (T, 2 chunks)) : ((1T, SBO), (1, LBO)): LBO = the distance between the
  // two core matrices adjacent along K (one chunk strip, kRows * 16 bytes), SBO = between
  // 8-row groups along M or N (128 bytes).
  template <int kRows>
  __device__ __forceinline__ static uint64_t desc_k(const uint8_t* rows, int ks) {
    return smem_desc(smem_u32(rows) + offset<kRows>(0, 2 * ks), kRows * 16, 128, kSmemDescNone);
  }
  // MN-major: ((T, 1, n chunks), (8 keys, k groups)) : ((1, T, SBO), (1T, LBO)): LBO = between
  // 8-key groups along K (128 bytes), SBO = between 8-column chunks along N (kRows * 16 bytes).
  // Note the roles: swapped against the swizzled MN-major descriptor.
  template <int kRows>
  __device__ __forceinline__ static uint64_t desc_mn(const uint8_t* tile, int ks) {
    return smem_desc(smem_u32(tile) + offset<kRows>(16 * ks, 0), 128, kRows * 16, kSmemDescNone);
  }

  // (8 elements, S, D/8 chunks, B*H): byte strides D*2 (rows), 16 (chunks), S*D*2 (heads). A
  // box is traversed dimension 0 first, so shared memory receives [chunk][row][16 bytes]. Rows
  // past a head's end are zeros (loads) or dropped (stores), as in the base's map.
  static cudaError_t tensor_map(CUtensorMap* map, CUtensorMapDataType type, const void* ptr, int bh,
                                int seq, int d, int rows, int chunks) {
    const cuuint64_t dims[4] = {8, static_cast<cuuint64_t>(seq), static_cast<cuuint64_t>(d / 8),
                                static_cast<cuuint64_t>(bh)};
    const cuuint64_t strides[3] = {static_cast<cuuint64_t>(d) * 2, 16,
                                   static_cast<cuuint64_t>(seq) * d * 2};
    const cuuint32_t box[4] = {8, static_cast<cuuint32_t>(rows), static_cast<cuuint32_t>(chunks), 1};
    return encode_tensor_map(map, type, ptr, 4, dims, strides, box, CU_TENSOR_MAP_SWIZZLE_NONE);
  }
  // Loads: one box per 64-column panel (8 chunks), as many copies and bytes per copy as the
  // base's; stores: one box per chunk, where a warpgroup's 64 rows are contiguous.
  static cudaError_t load_map(CUtensorMap* m, CUtensorMapDataType type, const void* ptr, int bh,
                              int seq, int d, int rows) {
    return tensor_map(m, type, ptr, bh, seq, d, rows, 8);
  }
  static cudaError_t store_map(CUtensorMap* m, CUtensorMapDataType type, const void* ptr, int bh,
                               int seq, int d, int rows) {
    return tensor_map(m, type, ptr, bh, seq, d, rows, 1);
  }
  template <class T, int kRows>
  __device__ __forceinline__ static void load(uint8_t* dst, const CUtensorMap* map, uint64_t* bar,
                                              int row, int bh) {
#pragma unroll
    for (int c = 0; c < T::kHeadDim / 8; c += 8) tma_load_4d(dst + offset<kRows>(0, c), map, bar, row, c, bh);
  }
  template <class T>
  __device__ __forceinline__ static void store(const CUtensorMap* map, const uint8_t* rows, int row,
                                               int bh) {
#pragma unroll
    for (int c = 0; c < T::kHeadDim / 8; ++c) tma_store_4d(map, rows + offset<T::kBlockM>(0, c), row, c, bh);
  }
};
#define ABLATE_SEAM_SWIZZLE NoSwizzle
#endif
