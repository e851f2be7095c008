// FlashAttention-3-style forward pass for Hopper (sm_90a): O = softmax(scale * Q K^T) V,
// FP16 or BF16 in and out (the element type E of the tile, base/elem.cuh), FP32 softmax
// statistics and O accumulator. The copy engine (TMA) fills a
// ring of K/V tiles for the tensor cores' asynchronous MMAs (wgmma); a producer warpgroup
// issues the copies, two consumer warpgroups compute, taking turns on the tensor cores; a
// block stays on its SM for query tile after query tile, and at D = 128 the last waves'
// tiles are shared out by keys so that every SM gets the same work (stream-K).
//
// Every optimization sits behind one seam below. A pathology patch (../patches/,
// force-included ahead of this file) redefines one ABLATE_SEAM_* macro to its own stage.
#include <cuda_runtime.h>
#include <cuda_fp16.h>
#include <cmath>
#include <cstdint>
#include <string>

#include <ablate/variant_info.h>

#include "../attention/base/ablate_attention.h"  // the C ABI both attention kernels share
#include "../attention/base/abi_args.cuh"
#include "base/elem.cuh"
#include "base/tile.cuh"
#include "base/pipeline.cuh"
#include "base/layout.cuh"
#include "base/tma.cuh"
#include "base/gemm.cuh"
#include "base/softmax.cuh"
#include "base/schedule.cuh"
#include "base/loader.cuh"
#include "base/mainloop.cuh"

// ---- Seams: the base's choice for each stage --------------------------------------------
#ifndef ABLATE_SEAM_SCHEDULE     // which query tiles (and which of their keys) a block computes
#define ABLATE_SEAM_SCHEDULE StreamK
#endif
#ifndef ABLATE_SEAM_LOADER       // who moves Q, K, V into shared memory, and how
#define ABLATE_SEAM_LOADER TmaLoader
#endif
#ifndef ABLATE_SEAM_MMA          // the GEMMs' instructions
#define ABLATE_SEAM_MMA Wgmma
#endif
#ifndef ABLATE_SEAM_ROLES        // which warpgroups load and which compute
#define ABLATE_SEAM_ROLES WarpSpecialized
#endif
#ifndef ABLATE_SEAM_REGISTERS    // registers per warpgroup role
#define ABLATE_SEAM_REGISTERS Rebalanced
#endif
#ifndef ABLATE_SEAM_TURNS        // the order the consumer warpgroups issue GEMMs in
#define ABLATE_SEAM_TURNS PingPong
#endif
#ifndef ABLATE_SEAM_MAINLOOP     // the order of one warpgroup's stages
#define ABLATE_SEAM_MAINLOOP SoftmaxOverlapsGemm
#endif
#ifndef ABLATE_SEAM_PIPELINE     // depth of the K/V ring
#define ABLATE_SEAM_PIPELINE Ring
#endif
#ifndef ABLATE_SEAM_SWIZZLE      // the tiles' shared-memory layout, its descriptors and copies
#define ABLATE_SEAM_SWIZZLE Swizzle128
#endif
#ifndef ABLATE_PATHOLOGIES
#define ABLATE_PATHOLOGIES
#endif

using Schedule = ABLATE_SEAM_SCHEDULE;
using Loader = ABLATE_SEAM_LOADER;
using Mma = ABLATE_SEAM_MMA;
using Roles = ABLATE_SEAM_ROLES;
using Registers = ABLATE_SEAM_REGISTERS;
using Turns = ABLATE_SEAM_TURNS;
using MainLoop = ABLATE_SEAM_MAINLOOP;
using Pipeline = ABLATE_SEAM_PIPELINE;
using Layout = ABLATE_SEAM_SWIZZLE;    // reached as T::Layout through the tile (HopperTile<D, Layout, E>)

struct Params {
  CUtensorMap tm_q, tm_k, tm_v, tm_o;  // the layout's maps of the (B*H, S, D) tensors
  const half* q;                       // the same tensors, for loaders without the copy engine
                                       // (as 16-bit words: they move bytes, whatever the type)
  const half* k;
  const half* v;
  int seq_len;
  int batch_heads;                     // B * H
  float scale_log2;                    // softmax scale * log2(e)
};

template <class T>
using Plan = SmemPlan<T, Pipeline::template stages<T::kHeadDim>()>;

// The producer's steps: Q of the block's query tile numbered `count`, and K or V of key tile j
// into the K/V rings' stage at `at`, each a fill (base/loader.cuh) with the loader seam's
// copies by the loader's threads (the first kArrivals; the others pass). The producer
// warpgroup takes them in turn; roles without one take them in a consumer.
template <class T>
struct Producer {
  using Sh = Shared<T, Plan<T>>;
  const Params& p;
  const Sh& sh;
  const int tid;
  __device__ __forceinline__ bool copies() const { return tid < Loader::kArrivals; }
  __device__ __forceinline__ void q(const Work& w, int count) const {
    if (copies())
      fill<Loader, T, T::kBlockM, 1>(sh.q_stage(PipelineState<1>::at(count)),
                                     {&p.tm_q, p.q, p.seq_len}, w.row0, w.bh, tid);
  }
  __device__ __forceinline__ void k(typename Sh::State at, int j, int bh) const {
    if (copies())
      fill<Loader, T, T::kBlockN, T::kBlockN>(sh.k_stage(at), {&p.tm_k, p.k, p.seq_len}, j, bh, tid);
  }
  __device__ __forceinline__ void v(typename Sh::State at, int j, int bh) const {
    if (copies())
      fill<Loader, T, T::kBlockN, T::kBlockN>(sh.v_stage(at), {&p.tm_v, p.v, p.seq_len}, j, bh, tid);
  }
};

// One consumer warpgroup on one query tile: 64 query rows against the key tiles of the block's
// work (all of them, unless the tile is split between two blocks), one method per stage.
template <class T, bool kCausal>
struct Consumer {
  using Sh = Shared<T, Plan<T>>;
  const Params& p;
  const Sh& sh;
  const int wg, tid, row0;         // warpgroup 0 or 1; thread in it; its first query row
  const int bh, j0, n_tiles;       // its (batch, head); its first key tile, and how many
  const int slot0;                 // key tiles through the K/V rings before the work's
  float s[T::kBlockN / 2];         // scores of the newest key tile, then its probabilities
  uint32_t pf[T::kBlockN / 4];     // those probabilities as A fragments of T::Elem
  float o[T::kHeadDim / 2];        // the output accumulator
  OnlineSoftmax stats;

  __device__ Consumer(const Params& p_, const Sh& sh_, int wg_, int tid_, const Work& w,
                      int slot0_, int count)
      : p(p_), sh(sh_), wg(wg_), tid(tid_), row0(w.row0 + 64 * wg_), bh(w.bh), j0(w.j0),
        n_tiles(w.j1 - w.j0), slot0(slot0_) {
#pragma unroll
    for (int i = 0; i < T::kHeadDim / 2; ++i) o[i] = 0.f;
    Turns::start(wg);
    wait_full(sh.q_stage(PipelineState<1>::at(count)));
  }

  // The K/V rings' position of key tile j, counted from the work's first.
  __device__ __forceinline__ typename Sh::State at(int j) const { return Sh::State::at(slot0 + j); }

  __device__ __forceinline__ void take_turn() { Turns::take_turn(wg); }
  __device__ __forceinline__ void pass_turn(bool last) { Turns::pass_turn(wg, last); }
  // This warpgroup's first row in a tile of kBlockM rows (Q, or O on its way out).
  __device__ __forceinline__ uint8_t* rows(uint8_t* tile) const {
    return tile + T::Layout::template offset<T::kBlockM>(64 * wg, 0);
  }
  // Key tile j (counted from the work's first) from its stage, once it is in. (The tile's
  // address is taken after the wait: taken before, the SASS differs.)
  __device__ __forceinline__ void issue_qk(int j) {
    wait_full(sh.k_stage(at(j)));
    Mma::template qk<T>(s, rows(sh.q()), sh.k_stage(at(j)).data);
  }
  __device__ __forceinline__ void issue_pv(int j) {
    wait_full(sh.v_stage(at(j)));
    Mma::template pv<T>(o, pf, sh.v_stage(at(j)).data);
  }
  template <int kPending>
  __device__ __forceinline__ void wait() {
    Mma::template wait<kPending>();
    fence_registers(s);
    fence_registers(o);
  }
  // A stage released; with the last K, Q too (the next query tile may load; a release needs
  // the stage's barriers only, not its phase).
  __device__ __forceinline__ void release_k(int j) {
    release(sh.k_stage(at(j)));
    if (j == n_tiles - 1) release(sh.q_stage({}));
  }
  __device__ __forceinline__ void release_v(int j) { release(sh.v_stage(at(j))); }

  __device__ __forceinline__ void softmax(int j) {
    const int col0 = (j0 + j) * T::kBlockN;
    // Only the tile holding the sequence end, and tiles crossing the diagonal, need a mask.
    if (col0 + T::kBlockN > p.seq_len || (kCausal && col0 + T::kBlockN - 1 > row0)) {
      const int lane = tid & 31;
      mask_scores<kCausal>(s, row0 + (tid >> 5) * 16 + (lane >> 2), col0 + 2 * (lane & 3),
                           p.seq_len);
    }
    stats.update(s, p.scale_log2);
  }
  __device__ __forceinline__ void rescale() { stats.rescale(o); }
  __device__ __forceinline__ void to_p() { pack_p<typename T::Elem>(s, pf); }

  // A split tile (base/partials.cuh). With its last keys: O, maxima and sums as they stand,
  // left for the block before, which has the first keys.
  __device__ __forceinline__ void leave_partial() {
#pragma unroll
    for (int i = 0; i < T::kHeadDim / 2; i += 4)
      __stcg(partial_vector(blockIdx.x, wg, i / 4, tid), make_float4(o[i], o[i + 1], o[i + 2], o[i + 3]));
    __stcg(partial_vector(blockIdx.x, wg, T::kHeadDim / 8, tid),
           make_float4(stats.m[0], stats.m[1], stats.l[0], stats.l[1]));
    bar_sync(3 + wg, 128);
    if (tid == 0) partial_raise(blockIdx.x, wg);
  }
  // With its first keys: the next block's part merged in, once it is there.
  __device__ __forceinline__ void add_partial() {
    const int slot = blockIdx.x + 1;
    if (tid == 0) partial_wait(slot, wg);
    bar_sync(3 + wg, 128);
    float o2[T::kHeadDim / 2];
#pragma unroll
    for (int i = 0; i < T::kHeadDim / 2; i += 4) {
      const float4 v = __ldcg(partial_vector(slot, wg, i / 4, tid));
      o2[i] = v.x, o2[i + 1] = v.y, o2[i + 2] = v.z, o2[i + 3] = v.w;
    }
    const float4 ml = __ldcg(partial_vector(slot, wg, T::kHeadDim / 8, tid));
    stats.merge(o, o2, {ml.x, ml.y}, {ml.z, ml.w}, p.scale_log2);
  }

  // O / l in T::Elem into this warpgroup's rows of the O tile (in the layout TMA reads), once
  // the previous query tile's store has read them out; then one thread has the copy engine
  // store them, rows past the sequence end dropped, and goes on without waiting.
  __device__ __forceinline__ void store() {
    stats.finish(o);
    uint8_t* out = rows(sh.o());
    if (tid == 0) tma_store_wait();
    bar_sync(3 + wg, 128);
    const int lane = tid & 31;
#pragma unroll
    for (int i = 0; i < T::kHeadDim / 2; i += 2) {
      const int col = (i / 4) * 8, r = (tid >> 5) * 16 + (lane >> 2) + ((i >> 1) & 1) * 8;
      *reinterpret_cast<uint32_t*>(T::Layout::template at<T::kBlockM>(out, r, col / 8) +
                                   (lane & 3) * 4) = T::Elem::pack(o[i], o[i + 1]);
    }
    fence_async_smem();
    bar_sync(3 + wg, 128);
    if (tid == 0) {
      T::Layout::template store<T>(&p.tm_o, out, row0, bh);
      tma_store_commit();
    }
  }
};

template <class T, bool kCausal>
__global__ void __launch_bounds__(Roles::template threads<T>(), 1) hopper_attention_kernel(const __grid_constant__ Params p) {
  extern __shared__ uint8_t smem_raw[];
  const Shared<T, Plan<T>> sh{reinterpret_cast<uint8_t*>(
      (reinterpret_cast<uintptr_t>(smem_raw) + 1023) & ~uintptr_t(1023))};
  constexpr int kStages = Plan<T>::kStages;
  const int m_tiles = (p.seq_len + T::kBlockM - 1) / T::kBlockM;
  const int tiles = m_tiles * p.batch_heads;
  const int wg = threadIdx.x / 128, tid = threadIdx.x % 128;

  if (threadIdx.x == 0) {
    mbar_init(sh.q_full(), Loader::kArrivals);
    mbar_init(sh.q_empty(), 128 * T::kConsumers);
    for (int st = 0; st < kStages; ++st) {
      mbar_init(sh.k_full(st), Loader::kArrivals);
      mbar_init(sh.v_full(st), Loader::kArrivals);
      mbar_init(sh.k_empty(st), 128 * T::kConsumers);
      mbar_init(sh.v_empty(st), 128 * T::kConsumers);
    }
    mbar_init_fence();
  }
  __syncthreads();

  // Every warpgroup walks the block's work in the same order; `slot` counts the key tiles that
  // have gone through the K/V rings, `count` the works (each loads its query tile's Q once):
  // the rings' positions (base/pipeline.cuh).
  using State = typename Shared<T, Plan<T>>::State;
  const QueryTiles q{m_tiles, tiles, p.seq_len};
  int slot = 0, count = 0;
  if (Roles::producer(wg)) {
    Registers::producer();
    const Producer<T> load{p, sh, tid};
    for (Work w = Schedule::template first<T, kCausal>(q); w.t < tiles;
         w = Schedule::template next<T, kCausal>(w, q), ++count) {
      load.q(w, count);
      for (int j = w.j0; j < w.j1; ++j, ++slot) {
        load.k(State::at(slot), j, w.bh);
        load.v(State::at(slot), j, w.bh);
      }
    }
  } else {
    Roles::template consumer_registers<Registers>();
    const int cwg = wg - Roles::kProducers;
    using C = typename Roles::template Consumer<Consumer<T, kCausal>, Producer<T>>;  // as the roles have it
    for (Work w = Schedule::template first<T, kCausal>(q); w.t < tiles;
         w = Schedule::template next<T, kCausal>(w, q), ++count) {
      C c(p, sh, cwg, tid, w, slot, count);
      MainLoop::run(c, w.j1 - w.j0);
      if (w.j0 > 0) {                       // the tile's last keys: the block before stores it
        c.leave_partial();
      } else {
        if (w.j1 < w.n_tiles) c.add_partial();  // the next block has its last keys
        c.store();
      }
      slot += w.j1 - w.j0;
    }
    if (tid == 0) tma_store_wait();  // the last O tile has left shared memory
  }
}

// The number of SMs of the current device, asked once per device.
static int sm_count() {
  static int counts[64] = {};
  int dev = 0;
  if (cudaGetDevice(&dev) != cudaSuccess || dev < 0 || dev >= 64) return 1;
  if (counts[dev] == 0 &&
      cudaDeviceGetAttribute(&counts[dev], cudaDevAttrMultiProcessorCount, dev) != cudaSuccess)
    counts[dev] = 0;
  return counts[dev] > 0 ? counts[dev] : 1;
}

template <int D, bool kCausal, class E>
static cudaError_t launch(const Params& p, cudaStream_t stream) {
  using T = HopperTile<D, Layout, E>;
  auto kernel = hopper_attention_kernel<T, kCausal>;
  static const cudaError_t opt_in = cudaFuncSetAttribute(
      kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, Plan<T>::kBytes);
  if (opt_in != cudaSuccess) return opt_in;
  const int tiles = (p.seq_len + T::kBlockM - 1) / T::kBlockM * p.batch_heads;
  kernel<<<Schedule::blocks(tiles, kCausal, sm_count()), Roles::template threads<T>(),
           Plan<T>::kBytes, stream>>>(p);
  return cudaGetLastError();
}

// The tensor maps of element type E, then the instance of D and the causal flag.
template <class E>
static cudaError_t launch(Params& p, const void* q, const void* k, const void* v, void* o, int S,
                          int D, int causal, cudaStream_t st) {
  // The tensor maps are encoded on every call (about a microsecond of host time each); a
  // CUDA graph captures them with the launch.
  const int bh = p.batch_heads;
  cudaError_t err;
  if ((err = Layout::load_map(&p.tm_q, E::kMapType, q, bh, S, D, 128)) != cudaSuccess ||  // kBlockM rows
      (err = Layout::load_map(&p.tm_k, E::kMapType, k, bh, S, D, 128)) != cudaSuccess ||  // kBlockN rows
      (err = Layout::load_map(&p.tm_v, E::kMapType, v, bh, S, D, 128)) != cudaSuccess ||
      (err = Layout::store_map(&p.tm_o, E::kMapType, o, bh, S, D, 64)) != cudaSuccess)   // a warpgroup's rows
    return err;
  if (D == 64) return causal ? launch<64, true, E>(p, st) : launch<64, false, E>(p, st);
  return causal ? launch<128, true, E>(p, st) : launch<128, false, E>(p, st);
}

extern "C" int ablate_attention_fwd_dtype(const void* q, const void* k, const void* v, void* o,
                                          int B, int H, int S, int D, int causal, float scale,
                                          int dtype, void* stream) {
  if (!ablate_attention_args_ok(q, k, v, o, B, H, S, D, scale) ||
      (dtype != ABLATE_ATTENTION_FP16 && dtype != ABLATE_ATTENTION_BF16))
    return static_cast<int>(cudaErrorInvalidValue);
  Params p{};
  p.q = static_cast<const half*>(q);
  p.k = static_cast<const half*>(k);
  p.v = static_cast<const half*>(v);
  p.seq_len = S;
  p.batch_heads = B * H;
  p.scale_log2 = scale * 1.4426950408889634f;
  const auto st = static_cast<cudaStream_t>(stream);
  return static_cast<int>(dtype == ABLATE_ATTENTION_BF16 ? launch<Bf16>(p, q, k, v, o, S, D, causal, st)
                                                         : launch<Fp16>(p, q, k, v, o, S, D, causal, st));
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
  using T = HopperTile<D, Layout, E>;
  return "{\"name\": \"d" + std::to_string(D) + (E::kBf16 ? "_bf16" : "") + "\", \"dtype\": \"" +
         (E::kBf16 ? "bf16" : "fp16") + "\", \"head_dim\": " + std::to_string(D) +
         ", \"block_m\": " + std::to_string(T::kBlockM) + ", \"block_n\": " +
         std::to_string(T::kBlockN) + ", \"warps\": " + std::to_string(Roles::template threads<T>() / 32) +
         ", \"threads\": " + std::to_string(Roles::template threads<T>()) + ", \"stages\": " +
         std::to_string(Plan<T>::kStages) + ", \"smem_bytes\": " + std::to_string(Plan<T>::kBytes) + "}";
}

extern "C" const char* ablate_variant_info(void) {
  static const std::string info =
      "{\"pathologies\": " + ablate::names_json(ABLATE_XSTR(ABLATE_PATHOLOGIES)) +
      ", \"seams\": " ABLATE_SEAMS_JSON ", \"configs\": [" +
      config_json<64, Fp16>() + ", " + config_json<128, Fp16>() + ", " + config_json<64, Bf16>() +
      ", " + config_json<128, Bf16>() + "]}";
  return info.c_str();
}
