// tiny_blocks: one warp per block, 16 query rows per block. Every block still streams
// the whole K and V through its own shared memory, so loads and barriers per FLOP grow
// eightfold, and shared memory per block caps the warps an SM can hold.
#pragma once
#ifdef ABLATE_TINY_BLOCKS
#ifdef ABLATE_SEAM_TILE
#error "tiny_blocks: another pathology already replaces the tile seam"
#endif
#include "base/tile.cuh"
template <int D>
struct TinyTile : Tile<D, 16, BaseTile<D>::kBlockN, 1, BaseTile<D>::kStages, BaseTile<D>::kQInRegs> {};
#define ABLATE_SEAM_TILE TinyTile
#endif
