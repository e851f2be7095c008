// fp32_accum: FP32 accumulators for Q K^T. Twice the score registers (4 per 16x8 tile
// instead of 2) for the same tensor-core work, which pushes the register count up and,
// with it, the number of warps an SM can hold. FP16 instances only: BF16's mma.sync has no
// FP16 accumulator, so the BF16 instances hold FP32 scores in the base already (the spec's
// not_applicable says so for BF16 shapes).
#pragma once
#ifdef ABLATE_FP32_ACCUM
#ifdef ABLATE_SEAM_SCORE_ACC
#error "fp32_accum: another pathology already replaces the score_acc seam"
#endif
#include "base/mma.cuh"
#define ABLATE_SEAM_SCORE_ACC ScoreF32
#endif
