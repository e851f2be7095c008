// RMSNorm launch tuning through the launch seam: force-include this header with the
// many-rows shape given as macros (vectors per thread, threads per block), e.g.
//   -include docs/experiments/rmsnorm_launch.cuh -DABLATE_TUNE_VECS=2 -DABLATE_TUNE_THREADS=512
// The few-rows table stays the base's. docs/experiments/rmsnorm_tune.py builds and times them.
#pragma once
#include "base/launch.cuh"
template <int kBucket, bool kFewRows,
          int kVecs = kFewRows ? (kBucket > 8192 ? 2 : 1) : ABLATE_TUNE_VECS,
          int kLanes = kBucket / (8 * kVecs),
          int kThreads = kFewRows ? (kLanes < 32 ? 32 : kLanes)
                                  : (kLanes < ABLATE_TUNE_THREADS ? ABLATE_TUNE_THREADS : kLanes)>
struct TuneLaunch : Shape<kLanes, kThreads / kLanes, kVecs> {};
#define ABLATE_SEAM_LAUNCH TuneLaunch
