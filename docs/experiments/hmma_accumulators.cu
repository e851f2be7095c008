// Microbenchmark: mma.sync m16n8k16 with FP16 vs FP32 accumulators on this GPU.
// latency: one warp, a dependent chain; throughput: many warps, 8 independent chains each.
#include <cstdio>
#include <cstdint>
#include "base/mma.cuh"
// Build and run on the GPU machine, from the repository root:
//   nvcc -O3 -std=c++17 -gencode arch=compute_90,code=sm_90 -I kernels \
//        docs/experiments/hmma_accumulators.cu -o /tmp/hmma && /tmp/hmma
template <bool F32, int CHAINS>
__global__ void k(uint32_t* out, int iters, long long* cycles) {
  uint32_t a[4] = {threadIdx.x, 2u, 3u, 4u};
  float df[CHAINS][4] = {};
  uint32_t dh[CHAINS][2] = {};
  long long t0 = clock64();
  for (int i = 0; i < iters; ++i)
#pragma unroll
    for (int c = 0; c < CHAINS; ++c) {
      if constexpr (F32) mma_f32(df[c], a, 5u, 6u); else mma_f16(dh[c], a, 5u, 6u);
    }
  long long t1 = clock64();
  uint32_t s = 0;
  for (int c = 0; c < CHAINS; ++c) s += F32 ? __float_as_uint(df[c][0]) : dh[c][0];
  out[blockIdx.x * blockDim.x + threadIdx.x] = s;
  if (threadIdx.x == 0 && blockIdx.x == 0) *cycles = t1 - t0;
}
template <bool F32, int CHAINS>
void run(const char* name, int blocks, int threads, int iters) {
  uint32_t* out; long long* cyc; cudaMalloc(&out, blocks * threads * 4); cudaMalloc(&cyc, 8);
  k<F32, CHAINS><<<blocks, threads>>>(out, iters, cyc);
  cudaEvent_t e0, e1; cudaEventCreate(&e0); cudaEventCreate(&e1);
  cudaEventRecord(e0); k<F32, CHAINS><<<blocks, threads>>>(out, iters, cyc); cudaEventRecord(e1);
  cudaEventSynchronize(e1); float ms; cudaEventElapsedTime(&ms, e0, e1);
  long long c; cudaMemcpy(&c, cyc, 8, cudaMemcpyDeviceToHost);
  double flops = 2.0 * 16 * 8 * 16 * CHAINS * (double)iters * blocks * threads / 32;
  printf("%-28s cycles per mma per warp %.1f  TFLOP/s %.0f  err %s\n", name, (double)c / iters / CHAINS, flops / ms / 1e9,
         cudaGetErrorString(cudaGetLastError()));
}
int main() {
  run<false, 1>("f16 latency (1 chain)", 1, 32, 100000);
  run<true, 1>("f32 latency (1 chain)", 1, 32, 100000);
  run<false, 8>("f16 tput 132x8 warps", 132 * 4, 256, 20000);
  run<true, 8>("f32 tput 132x8 warps", 132 * 4, 256, 20000);
  run<false, 8>("f16 1 warp/subpart 8ch", 132, 128, 20000);
  run<true, 8>("f32 1 warp/subpart 8ch", 132, 128, 20000);
}
