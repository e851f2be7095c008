// no_persistence: one block per query tile, as many blocks as tiles. Each block loads its Q
// and first K/V tiles cold, fills the ping-pong from empty, and stores O before the next
// block can start on its SM; the persistent block overlaps these with its previous tile.
#pragma once
#ifdef ABLATE_NO_PERSISTENCE
#ifdef ABLATE_SEAM_SCHEDULE
#error "no_persistence: another pathology already replaces the schedule seam"
#endif
#include "base/tile.cuh"

struct OneTilePerBlock {
  static int blocks(int tiles, bool, int) { return tiles; }
  template <class T, bool kCausal>
  __device__ __forceinline__ static Work first(const QueryTiles& q) {
    return work_of<T, kCausal>(blockIdx.x, q);
  }
  template <class T, bool kCausal>  // its one tile, then done
  __device__ __forceinline__ static Work next(const Work&, const QueryTiles& q) {
    return work_of<T, kCausal>(q.count, q);
  }
};
#define ABLATE_SEAM_SCHEDULE OneTilePerBlock
#endif
