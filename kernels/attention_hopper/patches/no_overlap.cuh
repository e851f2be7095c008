// no_overlap: inside a warpgroup, each key tile's stages run one after another: Q K^T,
// wait, softmax, P V, wait. The softmax of tile j no longer hides behind P V of tile j-1,
// so a warpgroup's tensor-core work and its exp2 work never overlap.
#pragma once
#ifdef ABLATE_NO_OVERLAP
#ifdef ABLATE_SEAM_MAINLOOP
#error "no_overlap: another pathology already replaces the mainloop seam"
#endif
struct SerialStages {
  template <class C>
  __device__ __forceinline__ static void run(C& c, int n_tiles) {
    for (int j = 0; j < n_tiles; ++j) {
      c.take_turn();
      c.issue_qk(j);
      c.pass_turn(false);
      c.template wait<0>();
      c.release_k(j);
      c.softmax(j);
      c.rescale();
      c.to_p();
      c.take_turn();
      c.issue_pv(j);
      c.pass_turn(j + 1 == n_tiles);
      c.template wait<0>();
      c.release_v(j);
    }
  }
};
#define ABLATE_SEAM_MAINLOOP SerialStages
#endif
