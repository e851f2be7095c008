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
// registers, 228 KB shared memory, 128 B/clk of shared-memory bandwidth) and measured
// against the alternatives (docs/tuning.md):
// - 4 warps x 32 rows. A warp reuses each K or V fragment it reads with ldmatrix for two
//   m16 MMAs; at 16 rows a warp would need 128 B/clk of ldmatrix traffic per SM just to
//   keep mma.sync busy, at 32 rows half that.
// - BLOCK_N: as many keys per step as registers allow, since the online-softmax rescale,
//   the row reductions and the barrier are paid once per key tile. Per thread: O takes
//   2 x D/8 x 4 floats (64 at D=64, 128 at D=128) and the FP16 scores 2 x BLOCK_N/8 x 2
//   (32 at BLOCK_N=128): FP16 accumulation is what makes BLOCK_N=128 fit at D=64.
// - Q is re-read from shared memory at each k-step (one ldmatrix per m16 tile, reused
//   across every key of the tile) rather than held: 32 (D=64) or 64 (D=128) registers freed.
// - D=64: 128 x 128, 2 stages: Q 16 KB + 2 x (K 16 KB + V 16 KB) = 80 KB of shared memory,
//   two blocks (8 warps) per SM by both shared memory and registers (<= 255 per thread).
// - D=128: 128 x 64, 2 stages: Q 32 KB + 2 x (16 + 16) KB = 96 KB, two blocks per SM, and
//   under sm_86/89's 99 KB per-block limit.
template <int D> struct BaseTile;
template <> struct BaseTile<64> : Tile<64, 128, 128, 4, 2, false> {};
template <> struct BaseTile<128> : Tile<128, 128, 64, 4, 2, false> {};
