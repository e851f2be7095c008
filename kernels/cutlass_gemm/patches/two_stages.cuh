// two_stages: the shared-memory pipeline holds 2 stages of A and B tiles (double buffering)
// instead of as many as fit beside the epilogue's buffer (6 at 128x128x64, 13 for the skinny
// 64x64x64).
#pragma once
#ifdef ABLATE_TWO_STAGES
#include "base/seams.cuh"
#ifdef ABLATE_SEAM_STAGES
#error "two_stages: another pathology already replaces the stages seam"
#endif
#define ABLATE_SEAM_STAGES Stages2
#endif
