// no_cp_async: synchronous global -> register -> shared copies into a single stage. Every
// tile is loaded, then computed, with a barrier between: no load overlaps any math.
#pragma once
#ifdef ABLATE_NO_CP_ASYNC
#ifdef ABLATE_SEAM_PIPELINE
#error "no_cp_async: another pathology already replaces the pipeline seam"
#endif
struct SyncSingleStage {
  static constexpr bool kAsync = false;
  template <class T> static constexpr int stages() { return 1; }

  template <int kStages, class LoadQ, class LoadKV>
  __device__ __forceinline__ static void prologue(int, LoadQ load_q, LoadKV load_kv) {
    load_q();
    load_kv(0, 0);
    __syncthreads();
  }
  template <int kStages, class LoadKV>
  __device__ __forceinline__ static void before_compute(int, int, LoadKV) {}
  template <int kStages, class LoadKV>
  __device__ __forceinline__ static void after_compute(int j, int n_tiles, LoadKV load_kv) {
    if (j + 1 < n_tiles) {
      __syncthreads();  // everyone is done with the only stage
      load_kv(j + 1, 0);
      __syncthreads();
    }
  }
};
#define ABLATE_SEAM_PIPELINE SyncSingleStage
#endif
