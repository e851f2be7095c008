// How the work shares the GPU: which query tiles a block computes; and how the warpgroups
// share the SM: their roles and registers, and the order in which the two consumer
// warpgroups issue their GEMMs.
#pragma once
#include <algorithm>
#include "base/tile.cuh"
#include "base/tma.cuh"

// Persistent blocks: without causal masking every query tile costs the same, so the launch
// has one block per SM, and block b computes tiles b, b + grid, b + 2 grid, ...: the next
// tile's Q and K/V load while the current one finishes, and no block starts cold after the
// first. Causal tiles differ in length: one block each, the hardware handing the next (the
// longest first) to whichever SM frees up.
struct Persistent {
  static int blocks(int tiles, bool causal, int sms) { return causal ? tiles : std::min(tiles, sms); }
  __device__ __forceinline__ static int next(int t) { return t + gridDim.x; }
};

// Warp specialization: warpgroup 0 is the producer (the loader's copies, the producer's
// registers), warpgroups 1.. are the consumers, which never load. The hooks a role without
// a producer fills in (prefetch, refill) do nothing here.
struct WarpSpecialized {
  static constexpr int kProducers = 1;  // warpgroups ahead of the consumers
  template <class T> static constexpr int threads() { return 128 * (kProducers + T::kConsumers); }
  __device__ __forceinline__ static bool producer(int wg) { return wg < kProducers; }
  template <class Registers>
  __device__ __forceinline__ static void consumer_registers() { Registers::consumer(); }
  template <class T, class Loader, class Sh, class P>
  __device__ __forceinline__ static void prefetch(const P&, const Sh&, const Work&, int, int, int, int) {}
  template <class T, class Loader, class Sh, class P>
  __device__ __forceinline__ static void refill_k(const P&, const Sh&, int, int, int, int, int, int) {}
  template <class T, class Loader, class Sh, class P>
  __device__ __forceinline__ static void refill_v(const P&, const Sh&, int, int, int, int, int, int) {}
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
