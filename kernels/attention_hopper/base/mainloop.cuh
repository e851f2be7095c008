// The order of a consumer warpgroup's stages over the key tiles. `c` is the consumer
// (hopper_attention.cu): issue_qk/issue_pv start a GEMM, wait<n> leaves n of them running.
#pragma once

// Intra-warpgroup overlap: S_j = Q K_j^T and O += P_{j-1} V_{j-1} are issued together, and
// the softmax of S_j runs while P_{j-1} V_{j-1} is still on the tensor cores; O is rescaled
// once that GEMM is done.
struct SoftmaxOverlapsGemm {
  template <class C>
  __device__ __forceinline__ static void run(C& c, int n_tiles) {
    c.take_turn();
    c.issue_qk(0);
    c.pass_turn(false);
    c.template wait<0>();
    c.release_k(0);
    c.softmax(0);
    c.to_p();
    for (int j = 1; j < n_tiles; ++j) {
      c.take_turn();
      c.issue_qk(j);
      c.issue_pv(j - 1);
      c.pass_turn(false);
      c.template wait<1>();  // S_j is ready, P_{j-1} V_{j-1} may still run
      c.release_k(j);
      c.softmax(j);
      c.template wait<0>();
      c.release_v(j - 1);
      c.rescale();
      c.to_p();
    }
    c.take_turn();
    c.issue_pv(n_tiles - 1);
    c.pass_turn(true);
    c.template wait<0>();
    c.release_v(n_tiles - 1);
  }
};
