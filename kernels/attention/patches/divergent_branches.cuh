// divergent_branches: after the row maxima (reduced across each quad with shuffles, so
// still on one path), odd and even lanes take two copies of the same code: exponentials,
// row sums, the 16-bit packing of P and the rescale of O. Every warp runs both copies, each
// with half its lanes: the same arithmetic per thread, twice the issue slots.
#pragma once
#ifdef ABLATE_DIVERGENT_BRANCHES
#ifdef ABLATE_SEAM_SOFTMAX
#error "divergent_branches: another pathology already replaces the softmax seam"
#endif
#include "base/softmax.cuh"
template <int kMTiles, int kNTiles, int kDTiles>
struct DivergentSoftmax : OnlineSoftmax<kMTiles, kNTiles, kDTiles> {
  // The exponentials and the rescale. kSide tells the compiler the copies are two: its
  // marks (no instructions) open and close each copy, so no common code moves out of them.
  template <int kSide, class Acc>
  __device__ __forceinline__ void exponentiate(const Acc (&s)[kMTiles][kNTiles],
                                               uint32_t (&p)[kMTiles][kNTiles][2],
                                               float (&o)[kMTiles][kDTiles][4],
                                               const float (&base)[kMTiles][2],
                                               const float (&alpha)[kMTiles][2], float scale_log2) {
    asm volatile("// divergent_branches: side %0 begins" :: "n"(kSide));
#pragma unroll
    for (int mi = 0; mi < kMTiles; ++mi)
#pragma unroll
      for (int h = 0; h < 2; ++h) {
        float sum = 0.f;
#pragma unroll
        for (int nt = 0; nt < kNTiles; ++nt) {
          const float2 v = s[mi][nt].row(h);
          const float p0 = fast_exp2(fmaf(v.x, scale_log2, -base[mi][h]));
          const float p1 = fast_exp2(fmaf(v.y, scale_log2, -base[mi][h]));
          sum += p0 + p1;
          p[mi][nt][h] = ElemOf<Acc>::type::pack(p0, p1);
        }
        this->l[mi][h] = this->l[mi][h] * alpha[mi][h] + sum;
#pragma unroll
        for (int dt = 0; dt < kDTiles; ++dt)
#pragma unroll
          for (int c = 2 * h; c < 2 * h + 2; ++c) {
            o[mi][dt][c] *= alpha[mi][h];
            // Tagged per side, or the compiler folds the two sides' products into one after the join.
            asm volatile("" : "+f"(o[mi][dt][c]) : "n"(kSide));
          }
      }
    asm volatile("// divergent_branches: side %0 ends" :: "n"(kSide));
  }

  template <class Acc>
  __device__ __forceinline__ void step(const Acc (&s)[kMTiles][kNTiles],
                                       uint32_t (&p)[kMTiles][kNTiles][2],
                                       float (&o)[kMTiles][kDTiles][4], float scale_log2) {
    float base[kMTiles][2], alpha[kMTiles][2];  // as the base computes them, on one path
#pragma unroll
    for (int mi = 0; mi < kMTiles; ++mi)
#pragma unroll
      for (int h = 0; h < 2; ++h) {
        const float mx = quad_max(fmaxf(this->m[mi][h], Acc::row_max(s[mi], h)));
        base[mi][h] = mx == -INFINITY ? 0.f : mx * scale_log2;
        alpha[mi][h] = fast_exp2(this->m[mi][h] * scale_log2 - base[mi][h]);
        this->m[mi][h] = mx;
      }
    if (threadIdx.x & 1) exponentiate<1>(s, p, o, base, alpha, scale_log2);
    else exponentiate<0>(s, p, o, base, alpha, scale_log2);
    __syncwarp();  // whole warps again before the next mma.sync
  }
};
#define ABLATE_SEAM_SOFTMAX DivergentSoftmax
#endif
