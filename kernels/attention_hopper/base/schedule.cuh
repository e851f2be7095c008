// How the work shares the GPU: which query tiles a block computes; and how the warpgroups
// share the SM: their roles and registers, and the order in which the two consumer
// warpgroups issue their GEMMs.
#pragma once
#include <algorithm>
#include "base/tile.cuh"
#include "base/tma.cuh"
#include "base/partials.cuh"

// Persistent blocks sharing the work evenly (stream-K): without causal masking every query
// tile costs the same n key tiles, so the launch has one block per SM, and block b computes
// tiles b, b + grid, b + 2 grid, ... (the next tile's Q and K/V load while the current one
// finishes; the tiles running at once are neighbours, sharing their heads' K/V in L2). That
// alone would leave SMs idle in a last, partial wave (1024 tiles on 132 SMs: 8 tiles on 100
// SMs, 7 on the others), so the last full wave and the partial one are shared out by keys
// instead: block b takes the b-th of equal runs through their tiles x n key tiles (7.76
// tiles' worth in all for each block, not 8 or 7). A run starting inside a tile computes that
// tile's last keys and hands its partial result to the block before (base/partials.cuh); a
// run holds at least n keys, so a tile is split in two at most. Only at D = 128: at D = 64
// the last partial wave costs nothing measurable (docs/benchmarks.md), so all tiles are
// whole there. Causal tiles differ in length: one block each, the hardware handing the next
// (the longest first) to whichever SM frees up.
struct StreamK {
  static constexpr int kMaxBlocks = kPartialSlots;
  static int blocks(int tiles, bool causal, int sms) {
    return causal ? tiles : std::min({tiles, sms, kMaxBlocks});
  }
  template <class T, bool kCausal>
  __device__ __forceinline__ static Work first(const QueryTiles& q) {
    const Work w = work_of<T, kCausal>(blockIdx.x, q);
    if (kCausal || !splits<T>() || w.t < whole_tiles<T>(q)) return w;
    return shared<T>(run_start<T>(blockIdx.x, w.n_tiles, q), w.n_tiles, q);
  }
  template <class T, bool kCausal>
  __device__ __forceinline__ static Work next(const Work& w, const QueryTiles& q) {
    if (kCausal) return work_of<T, kCausal>(q.count, q);  // its one tile, then done
    const int whole = whole_tiles<T>(q), n = w.n_tiles;
    if (w.t >= whole) return shared<T>((w.t - whole) * n + w.j1, n, q);
    const int t = w.t + gridDim.x;
    if (!splits<T>() || t < whole) return work_of<T, false>(t, q);
    return shared<T>(run_start<T>(blockIdx.x, n, q), n, q);
  }

  // Whether tiles are split at all (D = 128; see above). first and next test it as well as
  // whole_tiles does, so that at D = 64 the compiler drops the hand-over (the kernel is then
  // no_stream_k's, instruction for instruction).
  template <class T>
  __host__ __device__ static constexpr bool splits() { return T::kHeadDim == 128; }
  // The tiles computed whole, a grid apart: all of them at D = 64 or when they fill the last
  // wave, otherwise all but the last full wave and the partial one.
  template <class T>
  __device__ __forceinline__ static int whole_tiles(const QueryTiles& q) {
    if (!splits<T>() || q.count % gridDim.x == 0) return q.count;
    return (q.count / gridDim.x - 1) * gridDim.x;
  }
  // Where block b's run starts, as key tile u of the shared tiles (n key tiles each; fewer
  // than 2 x 144 tiles, so u fits an int for sequences up to 6 million keys).
  template <class T>
  __device__ __forceinline__ static int run_start(int b, int n, const QueryTiles& q) {
    return (q.count - whole_tiles<T>(q)) * n * b / gridDim.x;
  }
  // The work from key tile u of the shared tiles to the end of this block's run, or past the
  // last tile once the run is done.
  template <class T>
  __device__ __forceinline__ static Work shared(int u, int n, const QueryTiles& q) {
    const int end = run_start<T>(blockIdx.x + 1, n, q);
    Work w = work_of<T, false>(u < end ? whole_tiles<T>(q) + u / n : q.count, q);
    w.j0 = u % n;
    w.j1 = min(n, w.j0 + end - u);
    return w;
  }
};

// Warp specialization: warpgroup 0 is the producer (the loader's copies, the producer's
// registers), warpgroups 1.. are the consumers, which never load: their consumer is the
// kernel's as it is (a role that loads in the consumers wraps it, with the producer's steps).
struct WarpSpecialized {
  static constexpr int kProducers = 1;  // warpgroups ahead of the consumers
  template <class T> static constexpr int threads() { return 128 * (kProducers + T::kConsumers); }
  __device__ __forceinline__ static bool producer(int wg) { return wg < kProducers; }
  template <class Registers>
  __device__ __forceinline__ static void consumer_registers() { Registers::consumer(); }
  template <class C, class Producer>
  using Consumer = C;
};

// Warp specialization with registers moved to where the math is: the producer warpgroup
// (which only issues copies) drops to 24 registers a thread, the consumers rise to 240
// (128 x 24 + 256 x 240 = 64512 of the SM's 65536).
struct Rebalanced {
  __device__ __forceinline__ static void producer() {
    asm volatile("setmaxnreg.dec.sync.aligned.u32 24;");
  }
  __device__ __forceinline__ static void consumer() {
    asm volatile("setmaxnreg.inc.sync.aligned.u32 240;");
  }
};

// Ping-pong: the consumers take turns to issue their GEMMs, so that one warpgroup's softmax
// runs while the other's GEMMs occupy the tensor cores. Named barrier 1 + w is warpgroup w's
// turn; consumer 1 hands consumer 0 the first turn. Its last hand-over is skipped, so every
// barrier completes as many times as it is waited on.
struct PingPong {
  static constexpr int kThreads = 256;  // both consumer warpgroups
  __device__ __forceinline__ static void start(int wg) {
    if (wg == 1) bar_arrive(1, kThreads);
  }
  __device__ __forceinline__ static void take_turn(int wg) { bar_sync(1 + wg, kThreads); }
  __device__ __forceinline__ static void pass_turn(int wg, bool last) {
    if (!(last && wg == 1)) bar_arrive(2 - wg, kThreads);
  }
};
