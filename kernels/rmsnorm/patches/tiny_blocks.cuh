// tiny_blocks: one warp per block and one block per row, at every hidden size. A row's
// elements are spread over 32 threads instead of up to 512, so each thread holds up to 64
// vectors (hidden / 256): one warp issues all of a row's loads and arithmetic in sequence,
// an SM can hold at most 32 such blocks (32 of its 64 warps), fewer as registers grow (207
// a thread at 8192); at 16384 a thread's x alone would take 256 registers, so it spills.
#pragma once
#ifdef ABLATE_TINY_BLOCKS
#ifdef ABLATE_SEAM_LAUNCH
#error "tiny_blocks: another pathology already replaces the launch seam"
#endif
#include "base/launch.cuh"
template <int kBucket, bool kFewRows>  // both tables alike
struct OneWarpPerRow : Shape<32, 1, kBucket / 256> {};
#define ABLATE_SEAM_LAUNCH OneWarpPerRow
#endif
