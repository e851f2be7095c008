// single_stage: a K/V ring one tile deep. The producer can load tile j+1's K only once
// every consumer is done with tile j's K (and V likewise), so each copy's latency is
// exposed instead of running stages ahead of the tensor cores.
#pragma once
#ifdef ABLATE_SINGLE_STAGE
#ifdef ABLATE_SEAM_PIPELINE
#error "single_stage: another pathology already replaces the pipeline seam"
#endif
struct OneStage {
  template <int D> static constexpr int stages() { return 1; }
};
#define ABLATE_SEAM_PIPELINE OneStage
#endif
