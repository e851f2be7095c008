// FlashAttention-2-style forward pass: O = softmax(scale * Q K^T) V, FP16 or BF16 in and out,
// FP32 softmax statistics and O accumulator, mma.sync tensor cores (sm_80 and later).
//
// Every optimization sits behind one seam below. A pathology patch (../patches/,
// force-included ahead of this file) redefines one ABLATE_SEAM_* macro to its own stage.
#include <cuda_runtime.h>
#include <cuda_fp16.h>
#include <cmath>
#include <cstdint>
#include <string>
#include <type_traits>

#include <ablate/variant_info.h>

#include "base/ablate_attention.h"
#include "base/abi_args.cuh"
#include "base/tile.cuh"
#include "base/layout.cuh"
#include "base/mma.cuh"
#include "base/copy.cuh"
#include "base/gemm.cuh"
#include "base/softmax.cuh"
#include "base/store.cuh"
#include "base/schedule.cuh"

// ---- Seams: the base's choice for each stage --------------------------------------------
#ifndef ABLATE_SEAM_TILE            // template <int D> tile shape
#define ABLATE_SEAM_TILE BaseTile
#endif
#ifndef ABLATE_SEAM_SMEM_LAYOUT     // shared-memory addressing
#define ABLATE_SEAM_SMEM_LAYOUT SwizzledLayout
#endif
#ifndef ABLATE_SEAM_GMEM_LOAD       // which thread copies which bytes of a tile
#define ABLATE_SEAM_GMEM_LOAD CoalescedRows
#endif
#ifndef ABLATE_SEAM_PIPELINE        // how loads overlap compute
#define ABLATE_SEAM_PIPELINE AsyncRing
#endif
#ifndef ABLATE_SEAM_SCORE_ACC       // accumulator type of Q K^T
#define ABLATE_SEAM_SCORE_ACC ScoreF16
#endif
#ifndef ABLATE_SEAM_SCHEDULE        // grid -> work mapping
#define ABLATE_SEAM_SCHEDULE TilePerBlock
#endif
#ifndef ABLATE_SEAM_KEY_RANGE       // which key tiles a query tile visits
#define ABLATE_SEAM_KEY_RANGE CausalSkip
#endif
#ifndef ABLATE_SEAM_BARRIER         // barriers beyond the necessary ones
#define ABLATE_SEAM_BARRIER NoExtraBarrier
#endif
#ifndef ABLATE_SEAM_KV_SOURCE       // where the MMAs read K and V fragments from
#define ABLATE_SEAM_KV_SOURCE StagedKV
#endif
#ifndef ABLATE_SEAM_QK_LOOP         // how far the Q K^T loop loads ahead of its MMAs
#define ABLATE_SEAM_QK_LOOP FragmentPerStep
#endif
#ifndef ABLATE_SEAM_SOFTMAX         // template <int M, int N, int D> online softmax
#define ABLATE_SEAM_SOFTMAX OnlineSoftmax
#endif
#ifndef ABLATE_PATHOLOGIES
#define ABLATE_PATHOLOGIES
#endif

using Layout = ABLATE_SEAM_SMEM_LAYOUT;
using GmemLoad = ABLATE_SEAM_GMEM_LOAD;
using Pipeline = ABLATE_SEAM_PIPELINE;
using ScoreAcc = ABLATE_SEAM_SCORE_ACC;
using Schedule = ABLATE_SEAM_SCHEDULE;
using KeyRange = ABLATE_SEAM_KEY_RANGE;
using Barrier = ABLATE_SEAM_BARRIER;
using KvSource = ABLATE_SEAM_KV_SOURCE;
using QkLoop = ABLATE_SEAM_QK_LOOP;
// The Q K^T accumulator of element type E: the seam's for FP16; FP32 for BF16, whose
// mma.sync has no narrower form (so the score_acc seam has no choice to make there).
template <class E>
using ScoreAccOf = std::conditional_t<E::kF16Acc, ScoreAcc, ScoreF32Of<E>>;

// Q, K, V and O as 16-bit words: every copy moves them as such, and the element type (the
// kernel's E: Fp16, Bf16) says how the MMAs and the packing of P and O read them.
struct Params {
  const half* q;
  const half* k;
  const half* v;
  half* o;
  int seq_len, bh;
  float scale_log2;  // softmax scale * log2(e)
};

template <class T>
struct Smem {
  static constexpr int kStages = Pipeline::template stages<T>();
  static constexpr int kTileQ = T::kBlockM * T::kHeadDim;  // halves
  static constexpr int kTileKV = T::kBlockN * T::kHeadDim;
  static constexpr int kBytes = (kTileQ + (KvSource::kStaged ? kStages * 2 * kTileKV : 0)) * 2;
};

// One query tile of one (batch, head): the whole FlashAttention-2 loop.
template <class T, bool kCausal, class E>
__device__ __forceinline__ void attend_tile(const Params& p, int m_tile, int bh, half* smem) {
  constexpr int kStages = Smem<T>::kStages;
  const int tid = threadIdx.x, lane = tid & 31, warp_row0 = (tid >> 5) * T::kRowsPerWarp;
  const int64_t head = static_cast<int64_t>(bh) * p.seq_len * T::kHeadDim;
  const int row0 = m_tile * T::kBlockM;
  const int q_rows = min(T::kBlockM, p.seq_len - row0);
  const int n_tiles =
      (KeyRange::template key_end<kCausal>(row0, q_rows, p.seq_len) + T::kBlockN - 1) / T::kBlockN;

  half* sQ = smem;
  auto sK = [&](int stage) { return smem + Smem<T>::kTileQ + stage * 2 * Smem<T>::kTileKV; };
  auto sV = [&](int stage) { return sK(stage) + Smem<T>::kTileKV; };

  auto load_q = [&] {
    GmemLoad::template tile<T::kBlockM, T::kChunks, T::kThreads, Layout, Pipeline::kAsync>(
        sQ, p.q + head + static_cast<int64_t>(row0) * T::kHeadDim, q_rows, tid);
    Barrier::sync();
  };
  auto load_kv = [&](int j, int stage) {
    const int64_t off = head + static_cast<int64_t>(j) * T::kBlockN * T::kHeadDim;
    const int valid = p.seq_len - j * T::kBlockN;
    if constexpr (KvSource::kStaged) {
      GmemLoad::template tile<T::kBlockN, T::kChunks, T::kThreads, Layout, Pipeline::kAsync>(
          sK(stage), p.k + off, valid, tid);
      GmemLoad::template tile<T::kBlockN, T::kChunks, T::kThreads, Layout, Pipeline::kAsync>(
          sV(stage), p.v + off, valid, tid);
    }
    Barrier::sync();
  };

  float o[T::kMTiles][T::kDTiles][4];
#pragma unroll
  for (int mi = 0; mi < T::kMTiles; ++mi)
#pragma unroll
    for (int dt = 0; dt < T::kDTiles; ++dt)
#pragma unroll
      for (int i = 0; i < 4; ++i) o[mi][dt][i] = 0.f;
  ABLATE_SEAM_SOFTMAX<T::kMTiles, T::kNTiles, T::kDTiles> softmax;
  softmax.init();

  Pipeline::template prologue<kStages>(n_tiles, load_q, load_kv);
  QFrags<T, Layout> q;
  q.preload(sQ, warp_row0, lane);

  for (int j = 0; j < n_tiles; ++j) {
    Pipeline::template before_compute<kStages>(j, n_tiles, load_kv);
    const int stage = j % kStages;
    // This key tile in global memory, and how many of its keys lie inside the sequence.
    const half* gK = p.k + head + static_cast<int64_t>(j) * T::kBlockN * T::kHeadDim;
    const half* gV = p.v + head + static_cast<int64_t>(j) * T::kBlockN * T::kHeadDim;
    const int valid = p.seq_len - j * T::kBlockN;
    ScoreAccOf<E> s[T::kMTiles][T::kNTiles];
    QkLoop::template scores<T, Layout, Barrier, KvSource>(s, q, sQ, sK(stage), gK, valid, warp_row0,
                                                          lane);
    // Only the tile holding the sequence end, and tiles crossing the diagonal, need a mask.
    const int col0 = j * T::kBlockN;
    if (col0 + T::kBlockN > p.seq_len || (kCausal && col0 + T::kBlockN - 1 > row0))
      mask_scores<kCausal>(s, row0 + warp_row0 + (lane >> 2), col0 + (lane & 3) * 2, p.seq_len);
    uint32_t pf[T::kMTiles][T::kNTiles][2];
    softmax.step(s, pf, o, p.scale_log2);
    Barrier::sync();
    accumulate_pv<T, Layout, Barrier, KvSource, E>(o, pf, sV(stage), gV, valid, lane);
    Pipeline::template after_compute<kStages>(j, n_tiles, load_kv);
  }

  softmax.finish(o);
  store_o<T, Layout, Barrier, E>(o, sQ, p.o + head + static_cast<int64_t>(row0) * T::kHeadDim,
                              warp_row0, q_rows, lane);
}

template <class T, bool kCausal, class E>
__global__ void __launch_bounds__(T::kThreads) attention_fwd_kernel(const Params p) {
  extern __shared__ __align__(128) unsigned char smem_raw[];
  half* smem = reinterpret_cast<half*>(smem_raw);
  const int m_tiles = (p.seq_len + T::kBlockM - 1) / T::kBlockM;
  Schedule::template run<kCausal>(m_tiles, p.bh, [&](int m_tile, int bh) {
    attend_tile<T, kCausal, E>(p, m_tile, bh, smem);
  });
}

template <int D, bool kCausal, class E>
static cudaError_t launch(const Params& p, cudaStream_t stream) {
  using T = ABLATE_SEAM_TILE<D>;
  auto kernel = attention_fwd_kernel<T, kCausal, E>;
  // Above 48 KB a block must opt in to its shared memory; once per instance.
  static const cudaError_t opt_in = cudaFuncSetAttribute(
      kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, Smem<T>::kBytes);
  if (opt_in != cudaSuccess) return opt_in;
  const int m_tiles = (p.seq_len + T::kBlockM - 1) / T::kBlockM;
  kernel<<<Schedule::grid(m_tiles, p.bh), T::kThreads, Smem<T>::kBytes, stream>>>(p);
  return cudaGetLastError();
}

template <class E>
static cudaError_t launch(const Params& p, int D, int causal, cudaStream_t st) {
  if (D == 64) return causal ? launch<64, true, E>(p, st) : launch<64, false, E>(p, st);
  return causal ? launch<128, true, E>(p, st) : launch<128, false, E>(p, st);
}

extern "C" int ablate_attention_fwd_dtype(const void* q, const void* k, const void* v, void* o,
                                          int B, int H, int S, int D, int causal, float scale,
                                          int dtype, void* stream) {
  if (!ablate_attention_args_ok(q, k, v, o, B, H, S, D, scale) ||
      (dtype != ABLATE_ATTENTION_FP16 && dtype != ABLATE_ATTENTION_BF16))
    return static_cast<int>(cudaErrorInvalidValue);
  const Params p{static_cast<const half*>(q), static_cast<const half*>(k),
                 static_cast<const half*>(v), static_cast<half*>(o), S, B * H,
                 scale * 1.4426950408889634f};
  const auto st = static_cast<cudaStream_t>(stream);
  return static_cast<int>(dtype == ABLATE_ATTENTION_BF16 ? launch<Bf16>(p, D, causal, st)
                                                         : launch<Fp16>(p, D, causal, st));
}

extern "C" int ablate_attention_fwd(const void* q, const void* k, const void* v, void* o, int B,
                                    int H, int S, int D, int causal, float scale, void* stream) {
  return ablate_attention_fwd_dtype(q, k, v, o, B, H, S, D, causal, scale, ABLATE_ATTENTION_FP16,
                                    stream);
}

// ---- What was compiled ------------------------------------------------------------------
// One per head dim and element type: d64, d128 (FP16), d64_bf16, d128_bf16.
template <int D, class E>
static std::string config_json() {
  using T = ABLATE_SEAM_TILE<D>;
  const std::string dtype = E::kF16Acc ? "fp16" : "bf16";
  return "{\"name\": \"d" + std::to_string(D) + (E::kF16Acc ? "" : "_bf16") +
         "\", \"dtype\": \"" + dtype + "\", \"head_dim\": " + std::to_string(D) +
         ", \"block_m\": " + std::to_string(T::kBlockM) +
         ", \"block_n\": " + std::to_string(T::kBlockN) + ", \"warps\": " +
         std::to_string(T::kWarps) + ", \"threads\": " + std::to_string(T::kThreads) +
         ", \"stages\": " + std::to_string(Smem<T>::kStages) + ", \"q_in_regs\": " +
         (T::kQInRegs ? "true" : "false") + ", \"smem_bytes\": " + std::to_string(Smem<T>::kBytes) +
         "}";
}

extern "C" const char* ablate_variant_info(void) {
  static const std::string info =
      "{\"pathologies\": " + ablate::names_json(ABLATE_XSTR(ABLATE_PATHOLOGIES)) +
      ", \"seams\": " ABLATE_SEAMS_JSON ", \"configs\": [" +
      config_json<64, Fp16>() + ", " + config_json<128, Fp16>() + ", " + config_json<64, Bf16>() +
      ", " + config_json<128, Bf16>() + "]}";
  return info.c_str();
}
