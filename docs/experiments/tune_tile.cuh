// Tile tuning through the tile seam: force-include this header and define the shape, e.g.
//   nvcc ... -include docs/experiments/tune_tile.cuh -DT64M=128 -DT64N=128 -DT64W=4 -DT64S=2 \
//     -DT64Q=false -DT128M=128 -DT128N=64 -DT128W=4 -DT128S=2 -Ikernels/attention kernels/attention/base/attention.cu
// (separate macros: nvcc splits -D values at commas).
#pragma once
#include "base/tile.cuh"
template <int D> struct TuneTile;
template <> struct TuneTile<64> : Tile<64, T64M, T64N, T64W, T64S, T64Q> {};
template <> struct TuneTile<128> : Tile<128, T128M, T128N, T128W, T128S, false> {};
#define ABLATE_SEAM_TILE TuneTile
