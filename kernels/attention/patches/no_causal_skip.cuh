// no_causal_skip: causal query tiles visit every key tile, including those entirely above
// the diagonal, which the mask then zeroes: about twice the tensor-core and softmax work
// of the causal base for the same output. Non-causal launches are unchanged.
#pragma once
#ifdef ABLATE_NO_CAUSAL_SKIP
#ifdef ABLATE_SEAM_KEY_RANGE
#error "no_causal_skip: another pathology already replaces the key_range seam"
#endif
struct AllKeys {
  template <bool kCausal>
  __device__ __forceinline__ static int key_end(int, int, int seq_len) { return seq_len; }
};
#define ABLATE_SEAM_KEY_RANGE AllKeys
#endif
