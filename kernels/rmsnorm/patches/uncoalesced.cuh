// uncoalesced: each thread owns one contiguous run of the row (its chunks are adjacent)
// instead of every kLanes-th chunk. One access instruction of a warp then strides across the
// row by the run's length (64 bytes with 4 16-byte vectors a thread): 32 lanes touch 32
// different 32-byte sectors, 16 bytes used of each, where the base's touch 16 sectors, used
// whole. The next instruction wants the other halves of the same sectors, which x's loads do
// not keep in L1 (no_allocate), so each sector of x crosses from L2 twice.
#pragma once
#ifdef ABLATE_UNCOALESCED
#ifdef ABLATE_SEAM_ACCESS
#error "uncoalesced: another pathology already replaces the access seam"
#endif
struct ContiguousRuns {
  template <int kChunks, int kLanes>
  static constexpr int kStep = 1;
  template <int kChunks, int kLanes>
  __device__ __forceinline__ static int first(int lane) { return lane * kChunks; }
};
#define ABLATE_SEAM_ACCESS ContiguousRuns
#endif
