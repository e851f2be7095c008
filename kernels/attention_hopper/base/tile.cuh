// A block's work and its shared memory: tiles of 128 query rows of one (batch, head), keys
// 128 at a time, two consumer warpgroups of 64 query rows each (and the producer of the
// roles seam).
#pragma once
#include <cstdint>
#include "base/pipeline.cuh"

// L: the tiles' shared-memory layout (the swizzle seam, base/layout.cuh), reached by everything
// templated on the tile as T::Layout; E: the element type (base/elem.cuh: Fp16, Bf16), reached
// as T::Elem by the MMAs and the packing of P and O.
template <int D, class L, class E>
struct HopperTile {
  using Layout = L;
  using Elem = E;
  static constexpr int kHeadDim = D;
  static constexpr int kBlockM = 128;             // query rows per block
  static constexpr int kBlockN = 128;             // keys per K/V tile
  static constexpr int kConsumers = 2;            // warpgroups of 64 rows (one wgmma M each)
  static constexpr int kQBytes = kBlockM * D * 2;  // 16-bit elements, FP16 or BF16
  static constexpr int kKVBytes = kBlockN * D * 2;
};

// The query tiles of a launch: kBlockM rows of each (batch, head), `per_head` of them a head,
// `count` in all.
struct QueryTiles {
  int per_head, count, seq_len;
};
// A block's work on one query tile: key tiles [j0, j1) of the n_tiles its rows read. A tile's
// keys split between two blocks (base/partials.cuh) give j0 > 0 to one and j1 < n_tiles to
// the other; t past the last tile ends a block's walk.
struct Work {
  int t, row0, bh, j0, j1, n_tiles;
};
// Query tile t of the launch, all of its keys: (batch, head) t / per_head, the longest tiles
// of a head first when causal (the last rows see the most keys).
template <class T, bool kCausal>
__device__ __forceinline__ Work work_of(int t, const QueryTiles& q) {
  const int m = t % q.per_head;
  const int row0 = (kCausal ? q.per_head - 1 - m : m) * T::kBlockM;
  const int key_end = kCausal ? min(q.seq_len, row0 + T::kBlockM) : q.seq_len;
  const int n_tiles = (key_end + T::kBlockN - 1) / T::kBlockN;
  return {t, row0, t / q.per_head, 0, n_tiles, n_tiles};
}

// Byte offsets in dynamic shared memory: Q, the K ring, the V ring, the O tile on its way
// out, then the mbarriers. Every tile starts on 1024 bytes, the period of the 128-byte
// swizzle.
template <class T, int kStages_>
struct SmemPlan {
  static constexpr int kStages = kStages_;
  static constexpr int kQ = 0;
  static constexpr int kK = kQ + T::kQBytes;
  static constexpr int kV = kK + kStages * T::kKVBytes;
  static constexpr int kO = kV + kStages * T::kKVBytes;
  static constexpr int kBars = kO + T::kQBytes;
  static constexpr int kBytes = kBars + 8 * (2 + 4 * kStages) + 1024;  // + room to align
};

// Pointers into one block's shared memory.
template <class T, class Plan>
struct Shared {
  static constexpr int kStages = Plan::kStages;
  uint8_t* base;
  __device__ __forceinline__ uint8_t* q() const { return base + Plan::kQ; }
  __device__ __forceinline__ uint8_t* k(int st) const { return base + Plan::kK + st * T::kKVBytes; }
  __device__ __forceinline__ uint8_t* v(int st) const { return base + Plan::kV + st * T::kKVBytes; }
  __device__ __forceinline__ uint8_t* o() const { return base + Plan::kO; }
  __device__ __forceinline__ uint64_t* bar(int i) const {
    return reinterpret_cast<uint64_t*>(base + Plan::kBars) + i;
  }
  __device__ __forceinline__ uint64_t* q_full() const { return bar(0); }
  __device__ __forceinline__ uint64_t* k_full(int st) const { return bar(1 + st); }
  __device__ __forceinline__ uint64_t* v_full(int st) const { return bar(1 + Plan::kStages + st); }
  __device__ __forceinline__ uint64_t* k_empty(int st) const { return bar(1 + 2 * Plan::kStages + st); }
  __device__ __forceinline__ uint64_t* v_empty(int st) const { return bar(1 + 3 * Plan::kStages + st); }
  __device__ __forceinline__ uint64_t* q_empty() const { return bar(1 + 4 * Plan::kStages); }

  // The rings' stages at a position (base/pipeline.cuh): K's and V's, which move together,
  // and Q's, a ring of one stage whose n-th tile is the block's n-th query tile.
  using State = PipelineState<kStages>;
  __device__ __forceinline__ Stage k_stage(State s) const {
    return {k(s.index), k_full(s.index), k_empty(s.index), s.phase()};
  }
  __device__ __forceinline__ Stage v_stage(State s) const {
    return {v(s.index), v_full(s.index), v_empty(s.index), s.phase()};
  }
  __device__ __forceinline__ Stage q_stage(PipelineState<1> s) const {
    return {q(), q_full(), q_empty(), s.phase()};
  }
};

// The K/V ring: how many tiles in flight. D=128: Q and O 2 x 32 KB + 2 x (32 + 32) KB =
// 192 KB; D=64: 2 x 16 KB + 4 x (16 + 16) KB = 160 KB (one block per SM either way: 384
// threads at up to 240 registers).
struct Ring {
  template <int D> static constexpr int stages() { return D == 64 ? 4 : 2; }
};
