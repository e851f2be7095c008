// Which (query tile, batch*head) pairs each thread block computes.
#pragma once

// One pair per block: grid = (query tiles, B*H). When causal, the last query tiles have
// the most keys, so they are handed out first and the short ones fill the tail.
struct TilePerBlock {
  static dim3 grid(int m_tiles, int bh) { return dim3(m_tiles, bh); }
  template <bool kCausal, class F>
  __device__ __forceinline__ static void run(int m_tiles, int, F&& attend) {
    const int m = kCausal ? m_tiles - 1 - static_cast<int>(blockIdx.x) : blockIdx.x;
    attend(m, static_cast<int>(blockIdx.y));
  }
};

// Key tiles a query tile visits: when causal, only up to its diagonal; the tiles above it
// would be computed only to be masked to zero.
struct CausalSkip {
  template <bool kCausal>
  __device__ __forceinline__ static int key_end(int row0, int q_rows, int seq_len) {
    return kCausal ? row0 + q_rows : seq_len;
  }
};

// No extra barriers: the base synchronizes only where data crosses warps.
struct NoExtraBarrier {
  __device__ __forceinline__ static void sync() {}
};
