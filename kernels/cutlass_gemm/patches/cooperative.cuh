// cooperative: the large configuration's two consumer warpgroups split one 128x128 tile (64
// rows each) and run its epilogue together, instead of taking turns on two tiles (ping-pong),
// where one warpgroup's epilogue runs under the other's MMAs.
#pragma once
#ifdef ABLATE_COOPERATIVE
#include "base/seams.cuh"
#ifdef ABLATE_SEAM_SCHEDULE
#error "cooperative: another pathology already replaces the schedule seam"
#endif
#define ABLATE_SEAM_SCHEDULE Cooperative
#endif
