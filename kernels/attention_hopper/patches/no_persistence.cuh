// no_persistence: one block per query tile, as many blocks as tiles. Each block loads its Q
// and first K/V tiles cold, fills the ping-pong from empty, and stores O before the next
// block can start on its SM; the persistent block overlaps these with its previous tile.
#pragma once
#ifdef ABLATE_NO_PERSISTENCE
#ifdef ABLATE_SEAM_SCHEDULE
#error "no_persistence: another pathology already replaces the schedule seam"
#endif
#include <climits>

struct OneTilePerBlock {
  static int blocks(int tiles, bool, int) { return tiles; }
  __device__ __forceinline__ static int next(int) { return INT_MAX; }  // its one tile, then done
};
#define ABLATE_SEAM_SCHEDULE OneTilePerBlock
#endif
