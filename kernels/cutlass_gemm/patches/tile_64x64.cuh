// tile_64x64: the large configuration's tile 128x128x64 -> 64x64x64: 4x the blocks, each
// loading its A and B panels for a quarter of the outputs (half the arithmetic intensity per
// byte from L2), with 64x64 wgmma instructions.
#pragma once
#ifdef ABLATE_TILE_64X64
#include "base/seams.cuh"
#ifdef ABLATE_SEAM_TILE
#error "tile_64x64: another pathology already replaces the tile seam"
#endif
#define ABLATE_SEAM_TILE Tile64x64
#endif
