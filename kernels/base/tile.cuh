// Tile shapes: how a thread block carves up the attention problem.
#pragma once

// One thread block computes BLOCK_M query rows of one (batch, head) against all keys,
// BLOCK_N keys at a time. Each warp owns BLOCK_M / WARPS consecutive query rows.
template <int kHeadDim_, int kBlockM_, int kBlockN_, int kWarps_, int kStages_, bool kQInRegs_>
struct Tile {
  static constexpr int kHeadDim = kHeadDim_;
  static constexpr int kBlockM = kBlockM_;
  static constexpr int kBlockN = kBlockN_;
  static constexpr int kWarps = kWarps_;
  static constexpr int kStages = kStages_;      // depth of the K/V ring in shared memory
  static constexpr bool kQInRegs = kQInRegs_;   // Q fragments held in registers for the whole loop
  static constexpr int kThreads = kWarps * 32;
  static constexpr int kRowsPerWarp = kBlockM / kWarps;
  static constexpr int kMTiles = kRowsPerWarp / 16;  // m16 MMA tiles per warp
  static constexpr int kNTiles = kBlockN / 8;        // n8 score tiles (keys) per warp
  static constexpr int kDTiles = kHeadDim / 8;       // n8 output tiles (head dim)
  static constexpr int kKSteps = kHeadDim / 16;      // k16 steps of Q K^T
  static constexpr int kChunks = kHeadDim / 8;       // 16-byte chunks per row
  static_assert(kRowsPerWarp % 16 == 0 && kBlockN % 16 == 0 && kHeadDim % 16 == 0, "MMA tiling");
};

// The base's choice per head dim, from the H100's numbers (per SM: 4 sub-partitions, 64K
// registers, 228 KB shared memory, 128 B/clk of shared-memory bandwidth):
// - 4 warps x 32 rows. A warp reuses each K or V fragment it reads with ldmatrix for two
//   m16 MMAs; at 16 rows a warp would need 128 B/clk of ldmatrix traffic per SM just to
//   keep mma.sync busy, at 32 rows half that.
// - D=64: BLOCK_N=64. Registers per thread: Q 2x4x4 = 32, scores 2x8x2 = 16 (FP16
//   accumulators), P 16, O 2x8x4 = 64: ptxas allocates 192, no spills, so two blocks
//   (8 warps) fit the 64K-register file (BLOCK_N=128 reached 255 and spilled).
//   Shared memory: Q 16 KB + 2 stages x (K 8 KB + V 8 KB) = 48 KB: four blocks' worth.
// - D=128: O alone is 2x16x4 = 128 registers, so Q is re-read from shared memory at each
//   k-step instead of held, and BLOCK_N=32 keeps scores at 2x4x2 = 8 (253 registers, no
//   spills). Shared memory: Q 32 KB + 2 x (8 + 8) KB = 64 KB, under sm_86/89's 99 KB.
template <int D> struct BaseTile;
template <> struct BaseTile<64> : Tile<64, 128, 64, 4, 2, true> {};
template <> struct BaseTile<128> : Tile<128, 128, 32, 4, 2, false> {};
