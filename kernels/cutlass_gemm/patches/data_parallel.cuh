// data_parallel: the skinny configuration's stream-K scheduler -> data-parallel (persistent,
// one whole tile per block at a time): with one row of tiles (m <= 128) that is n / 64 tiles,
// 64 at n = 4096, on 132 SMs.
#pragma once
#ifdef ABLATE_DATA_PARALLEL
#include "base/seams.cuh"
#ifdef ABLATE_SEAM_SCHEDULER
#error "data_parallel: another pathology already replaces the scheduler seam"
#endif
#define ABLATE_SEAM_SCHEDULER DataParallel
#endif
