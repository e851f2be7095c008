// no_stream_k: persistent blocks that take whole query tiles, a grid apart (tiles b,
// b + grid, b + 2 grid, ...), as FlashAttention-3's scheduler does. When the tiles are not a
// multiple of the SMs, the last wave leaves SMs idle: 1024 tiles on 132 SMs are 8 tiles on
// 100 of them and 7 on the rest, where the base gives each 7.76 tiles' worth of keys.
#pragma once
#ifdef ABLATE_NO_STREAM_K
#ifdef ABLATE_SEAM_SCHEDULE
#error "no_stream_k: another pathology already replaces the schedule seam"
#endif
#include <algorithm>
#include "base/tile.cuh"

struct WholeTiles {
  static int blocks(int tiles, bool causal, int sms) { return causal ? tiles : std::min(tiles, sms); }
  template <class T, bool kCausal>
  __device__ __forceinline__ static Work first(const QueryTiles& q) {
    return work_of<T, kCausal>(blockIdx.x, q);
  }
  template <class T, bool kCausal>
  __device__ __forceinline__ static Work next(const Work& w, const QueryTiles& q) {
    return work_of<T, kCausal>(w.t + gridDim.x, q);
  }
};
#define ABLATE_SEAM_SCHEDULE WholeTiles
#endif
