// Fused RMSNorm forward: y[r, :] = x[r, :] / sqrt(mean(x[r, :]^2) + eps) * w, FP16 or BF16 in
// and out, FP32 statistics. Memory-bound: x is read once, y written once, w (one row's worth)
// stays in L1/L2; the aim is the copy bandwidth of the device.
//
// Every optimization sits behind one seam below. A pathology patch (patches/, force-included
// ahead of this file) redefines one ABLATE_SEAM_* macro to its own stage. Seams talk through
// narrow interfaces (a chunk of words, a chunk index, a sum over a row's threads, an Acc type)
// so that any two patches on different seams compose.
#include <cuda_runtime.h>
#include <cuda_fp16.h>
#include <cuda_bf16.h>
#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstdint>
#include <string>

#include <ablate/variant_info.h>

#include "base/ablate_rmsnorm.h"
#include "base/dtype.cuh"
#include "base/vector.cuh"
#include "base/access.cuh"
#include "base/row.cuh"
#include "base/reduce.cuh"
#include "base/math.cuh"
#include "base/residency.cuh"
#include "base/launch.cuh"

// ---- Seams: the base's choice for each stage --------------------------------------------
#ifndef ABLATE_SEAM_VECTOR      // elements per global access
#define ABLATE_SEAM_VECTOR Vector16
#endif
#ifndef ABLATE_SEAM_ACCESS      // which thread touches which chunk of a row
#define ABLATE_SEAM_ACCESS Interleaved
#endif
#ifndef ABLATE_SEAM_REDUCE      // sum over a row's threads
#define ABLATE_SEAM_REDUCE WarpShuffleReduce
#endif
#ifndef ABLATE_SEAM_RESIDENCY   // where x comes from when it is scaled
#define ABLATE_SEAM_RESIDENCY KeepInRegisters
#endif
#ifndef ABLATE_SEAM_LAUNCH      // template <int bucket, bool few_rows>: the block's shape
#define ABLATE_SEAM_LAUNCH BaseLaunch
#endif
#ifndef ABLATE_SEAM_MATH        // precision of the statistics and the scaling
#define ABLATE_SEAM_MATH Fp32Math
#endif
#ifndef ABLATE_PATHOLOGIES
#define ABLATE_PATHOLOGIES
#endif

using Vector = ABLATE_SEAM_VECTOR;
using Access = ABLATE_SEAM_ACCESS;
using Reduce = ABLATE_SEAM_REDUCE;
using Residency = ABLATE_SEAM_RESIDENCY;
using Math = ABLATE_SEAM_MATH;
template <int kBucket, bool kFewRows>
using Launch = ABLATE_SEAM_LAUNCH<kBucket, kFewRows>;

struct Params {
  const uint16_t* x;  // raw element bits; the kernel's T says how to read them
  const uint16_t* w;
  uint16_t* y;
  long long rows;
  int hidden;
  float inv_hidden;  // 1 / hidden
  float eps;
};

// One row per kLanes threads, kRows rows per block, one row group per block (no loop: a row
// past the end of the tensor, in the last block only, loads and stores nothing but still takes
// part in the block's barriers).
template <class T, int kBucket, bool kFewRows>
__global__ void __launch_bounds__(Launch<kBucket, kFewRows>::kThreads)
    rmsnorm_fwd_kernel(const Params p) {
  using L = Launch<kBucket, kFewRows>;
  using IO = RowIO<Vector, Access, L::kLanes, L::kElems>;
  using Acc = typename Math::Acc;
  static_assert(L::kMaxHidden >= kBucket, "the launch shape must cover its bucket");

  const int lane = threadIdx.x % L::kLanes;
  const long long row = static_cast<long long>(blockIdx.x) * L::kRows + threadIdx.x / L::kLanes;
  const int limit = row < p.rows ? p.hidden : 0;
  const long long offset = row * p.hidden;

  uint32_t x[IO::kWords], w[IO::kWords], y[IO::kWords];  // 2 elements a word
  IO::template load<StreamOnce>(x, p.x + offset, lane, limit);     // load the row (read once)
  IO::template load<KeepCached>(w, p.w, lane, limit);             // and the weight (L1/L2)
  const Acc partial = sum_squares<Math, T>(x);                     // this thread's sum of squares
  const Acc total = Reduce::template sum<L::kLanes, L::kThreads>(partial);  // the row's
  const Acc rstd = Math::rstd(total, p.hidden, p.inv_hidden, p.eps);       // 1/sqrt(mean + eps)
  Residency::template refetch<IO, StreamOnce>(x, p.x + offset, lane, limit);  // x again
  normalize<Math, T>(y, x, w, rstd);                               // y = x * rstd * w
  IO::store(y, p.y + offset, lane, limit);                         // store the row
}

template <class T, int kBucket, bool kFewRows>
static cudaError_t launch(const Params& p, cudaStream_t stream) {
  using L = Launch<kBucket, kFewRows>;
  const long long blocks = (p.rows + L::kRows - 1) / L::kRows;  // <= rows <= 2^31 - 1
  rmsnorm_fwd_kernel<T, kBucket, kFewRows>
      <<<static_cast<unsigned>(blocks), L::kThreads, 0, stream>>>(p);
  return cudaGetLastError();
}

// The current device's SMs and resident threads per SM, read once per device (attribute
// queries: no synchronization, allowed while a stream is being captured).
struct DeviceSize {
  int sms = 132, threads_per_sm = 2048;  // the H100's, if a query fails
};
static DeviceSize device_size() {
  static std::atomic<int> sms[64] = {}, threads[64] = {};
  int device = 0;
  DeviceSize d;
  if (cudaGetDevice(&device) != cudaSuccess || device < 0 || device >= 64) return d;
  if (sms[device].load(std::memory_order_relaxed) == 0) {
    int n = 0, t = 0;
    if (cudaDeviceGetAttribute(&n, cudaDevAttrMultiProcessorCount, device) != cudaSuccess || n < 1)
      n = d.sms;
    if (cudaDeviceGetAttribute(&t, cudaDevAttrMaxThreadsPerMultiProcessor, device) != cudaSuccess ||
        t < 32)
      t = d.threads_per_sm;
    threads[device].store(t, std::memory_order_relaxed);
    sms[device].store(n, std::memory_order_relaxed);
  }
  d.threads_per_sm = threads[device].load(std::memory_order_relaxed);
  d.sms = sms[device].load(std::memory_order_relaxed);
  return d;
}

// The smallest bucket that holds the row, and the few-rows instance while it runs every row
// at once: at most (SMs x blocks per SM at full occupancy, 32 at most) x its rows per block.
// Beyond one wave of it, the many-rows instance's shorter waves win (launch.cuh).
template <class T>
static cudaError_t dispatch(const Params& p, cudaStream_t stream) {
  return Buckets::dispatch(p.hidden, [&](auto bucket) {
    constexpr int kBucket = decltype(bucket)::value;
    using Few = Launch<kBucket, true>;
    const DeviceSize d = device_size();
    const long long blocks_per_sm = std::min(32, std::max(1, d.threads_per_sm / Few::kThreads));
    const long long one_wave = d.sms * blocks_per_sm * Few::kRows;
    return p.rows <= one_wave ? launch<T, kBucket, true>(p, stream)
                              : launch<T, kBucket, false>(p, stream);
  });
}

extern "C" int ablate_rmsnorm_fwd(const void* x, const void* w, void* y, long long rows,
                                  int hidden, int dtype, float eps, void* stream) {
  auto aligned = [](const void* ptr) {
    return ptr != nullptr && reinterpret_cast<uintptr_t>(ptr) % 16 == 0;
  };
  if (!aligned(x) || !aligned(w) || !aligned(y) || rows < 1 || rows > 2147483647LL ||
      hidden < 8 || hidden > 16384 || hidden % 8 != 0 || (dtype != 0 && dtype != 1) ||
      !std::isfinite(eps) || eps < 0.f)
    return static_cast<int>(cudaErrorInvalidValue);
  const Params p{static_cast<const uint16_t*>(x), static_cast<const uint16_t*>(w),
                 static_cast<uint16_t*>(y), rows, hidden, 1.0f / static_cast<float>(hidden), eps};
  const auto st = static_cast<cudaStream_t>(stream);
  const cudaError_t err = dtype == 0 ? dispatch<__half>(p, st) : dispatch<__nv_bfloat16>(p, st);
  return static_cast<int>(err);
}

// ---- What was compiled ------------------------------------------------------------------
static std::string bucket_label(int n) {  // 256 -> "256", 4096 -> "4k"
  return n % 1024 == 0 ? std::to_string(n / 1024) + "k" : std::to_string(n);
}

// "kernel" is the instance's demangled name (as c++filt prints it) up to its parameter list,
// for telling the instances apart in ptxas and cuobjdump output. A call runs the few_rows
// instance of its bucket while rows <= SMs x min(32, threads per SM / its threads) x its
// rows_per_block, the other one beyond.
template <class T, int kBucket, bool kFewRows>
static std::string config_json() {
  using L = Launch<kBucket, kFewRows>;
  auto field = [](const char* key, long long v) {
    return std::string(", \"") + key + "\": " + std::to_string(v);
  };
  return std::string("{\"name\": \"") + Dtype<T>::kName + "_h" + bucket_label(kBucket) +
         (kFewRows ? "_few" : "") + "\", \"dtype\": \"" + Dtype<T>::kName +
         "\", \"kernel\": \"void rmsnorm_fwd_kernel<" + Dtype<T>::kType + ", " +
         std::to_string(kBucket) + (kFewRows ? ", true>" : ", false>") +
         "\", \"few_rows\": " + (kFewRows ? "true" : "false") +
         field("max_hidden", kBucket) + field("threads", L::kThreads) + field("smem_bytes", 0) +
         field("rows_per_block", L::kRows) + field("threads_per_row", L::kLanes) +
         field("vectors_per_thread", L::kVecs) + field("elements_per_thread", L::kElems) +
         field("elements_per_access", Vector::kWidth) +
         field("x_bytes_per_block", 2LL * L::kRows * kBucket) + "}";
}

static std::string configs_json() {
  std::string out;
  auto add = [&](std::string item) { out += (out.empty() ? "" : ", ") + item; };
  Buckets::for_each([&](auto b) { add(config_json<__half, decltype(b)::value, false>()); });
  Buckets::for_each([&](auto b) { add(config_json<__half, decltype(b)::value, true>()); });
  Buckets::for_each([&](auto b) { add(config_json<__nv_bfloat16, decltype(b)::value, false>()); });
  Buckets::for_each([&](auto b) { add(config_json<__nv_bfloat16, decltype(b)::value, true>()); });
  return "[" + out + "]";
}

extern "C" const char* ablate_variant_info(void) {
  static const std::string info =
      "{\"pathologies\": " + ablate::names_json(ABLATE_XSTR(ABLATE_PATHOLOGIES)) + ", \"seams\": " ABLATE_SEAMS_JSON
      ", \"configs\": " + configs_json() + "}";
  return info.c_str();
}
