// A Hopper (sm_90a) GEMM built from CUTLASS 3.x's collective builders: d = a b^T, FP16 or
// BF16 in and out, FP32 accumulation (base/ablate_gemm.h is the C ABI). CUTLASS is a
// dependency, read from the nvidia-cutlass package's headers (spec.py: include_dirs).
//
// Two configurations, chosen per call by m (kSkinnyMaxM), each the fastest of the tuning
// builds timed against cuBLAS on the H100 (docs/benchmarks.md, "cutlass_gemm"):
//   large  (m > kSkinnyMaxM): warp-specialized ping-pong, TMA mainloop, no cluster (2x1
//          clusters with B multicast measured 0.89-1.0x of 1x1's speed at the large shapes),
//          a persistent data-parallel tile scheduler with a swizzled raster, a TMA epilogue;
//          tile 128x128x64 (one 128x128 tile per consumer warpgroup, 64 FP32 accumulator
//          registers x 2 per thread).
//   skinny (m <= kSkinnyMaxM, decode-like): ping-pong 64x64x64 tiles under the persistent
//          data-parallel scheduler: n / 64 = 64 tiles at n = 4096, as many stages as fit (13).
//          Cooperative 128x64 tiles under stream-K, which shares the k loop of the few tiles
//          among all SMs, measured 0.71x of cuBLAS at m = 64 where this reads 0.96x.
// Each knob is a seam (#ifndef ABLATE_SEAM_X below); a pathology (patches/*.cuh,
// force-included ahead of this file) redefines one. Which configuration a seam reaches is
// said beside it; the two instances are told apart by their problem-shape type (rank 3 for
// large, rank 4 for skinny), which spec.config_of reads from the demangled kernel name.
#include "ablate_gemm.h"

#include <cuda_runtime.h>

#include <cstdint>
#include <mutex>
#include <string>

#include <cute/tensor.hpp>
#include <cutlass/cutlass.h>
#include <cutlass/epilogue/collective/collective_builder.hpp>
#include <cutlass/gemm/collective/collective_builder.hpp>
#include <cutlass/gemm/device/gemm_universal_adapter.h>
#include <cutlass/gemm/dispatch_policy.hpp>
#include <cutlass/gemm/kernel/gemm_universal.hpp>
#include <cutlass/gemm/kernel/tile_scheduler.hpp>

#include <ablate/variant_info.h>

#include "seams.cuh"

#ifndef ABLATE_SEAM_SCHEDULE     // large: how the two consumer warpgroups share the tensor cores
#define ABLATE_SEAM_SCHEDULE PingPong
#endif
#ifndef ABLATE_SEAM_MAINLOOP     // both: who moves A and B tiles into shared memory
#define ABLATE_SEAM_MAINLOOP TmaMainloop
#endif
#ifndef ABLATE_SEAM_CLUSTER      // large: thread-block cluster (a 2x1 pair would share B by TMA multicast)
#define ABLATE_SEAM_CLUSTER Cluster1x1
#endif
#ifndef ABLATE_SEAM_STAGES       // both: depth of the shared-memory pipeline
#define ABLATE_SEAM_STAGES StagesAuto
#endif
#ifndef ABLATE_SEAM_TILE         // large: the block's output tile (M x N x K-step)
#define ABLATE_SEAM_TILE Tile128x128
#endif
#ifndef ABLATE_SEAM_EPILOGUE     // both: how the accumulators reach global memory
#define ABLATE_SEAM_EPILOGUE TmaEpilogue
#endif
#ifndef ABLATE_SEAM_RASTER       // large: the order the persistent blocks walk the tiles in
#define ABLATE_SEAM_RASTER Swizzled
#endif

// Tuning knobs, not seams (no pathology replaces them): the rest of each configuration, named
// here so that a tuning build can try others.
#ifndef GEMM_LARGE_SCHEDULER     // large: its tile scheduler
#define GEMM_LARGE_SCHEDULER DataParallel
#endif
#ifndef GEMM_SKINNY_TILE
#define GEMM_SKINNY_TILE Tile64x64
#endif
#ifndef GEMM_SKINNY_SCHEDULE
#define GEMM_SKINNY_SCHEDULE PingPong
#endif
#ifndef GEMM_SKINNY_SCHEDULER    // skinny: how output tiles map to SMs (stream-K needs Cooperative)
#define GEMM_SKINNY_SCHEDULER DataParallel
#endif
#ifndef GEMM_SKINNY_CLUSTER
#define GEMM_SKINNY_CLUSTER Cluster1x1
#endif
#ifndef GEMM_SKINNY_MAX_M        // m up to this runs the skinny configuration (spec.SKINNY_MAX_M)
#define GEMM_SKINNY_MAX_M 128
#endif

namespace gemm {

using Schedule = ABLATE_SEAM_SCHEDULE;
using Mainloop = ABLATE_SEAM_MAINLOOP;
using Stages = ABLATE_SEAM_STAGES;
using Epilogue = ABLATE_SEAM_EPILOGUE;
using Raster = ABLATE_SEAM_RASTER;
// cp.async cannot multicast: a cp.async mainloop runs without clusters.
using LargeCluster = cute::conditional_t<Mainloop::kMulticast, ABLATE_SEAM_CLUSTER, Cluster1x1>;

constexpr int kSkinnyMaxM = GEMM_SKINNY_MAX_M;  // m up to which the skinny configuration runs (two rows of its 64-row tiles)
constexpr int kAlign = 8;         // elements per 16 bytes: TMA's and the vector loads' alignment

// One GEMM configuration: the collectives the builders make of the knobs, and the kernel.
template <class Element, class Tile, class Cluster, class Sched, class TileScheduler, class ProblemShape>
struct Config {
  using MainSchedule = typename Mainloop::template Schedule<Sched>;
  using EpiSchedule = typename Epilogue::template Schedule<Sched>;
  using CollectiveEpilogue = typename cutlass::epilogue::collective::CollectiveBuilder<
      cutlass::arch::Sm90, cutlass::arch::OpClassTensorOp, Tile, Cluster,
      cutlass::epilogue::collective::EpilogueTileAuto, float, float,
      void, cutlass::layout::RowMajor, kAlign,          // no C: d = a b^T (beta = 0)
      Element, cutlass::layout::RowMajor, kAlign, EpiSchedule>::CollectiveOp;
  using CollectiveMainloop = typename cutlass::gemm::collective::CollectiveBuilder<
      cutlass::arch::Sm90, cutlass::arch::OpClassTensorOp,
      Element, cutlass::layout::RowMajor, kAlign,        // a: (m, k), K-major
      Element, cutlass::layout::ColumnMajor, kAlign,     // b: (n, k) row-major = K x N column-major
      float, Tile, Cluster,
      typename Stages::template Count<static_cast<int>(sizeof(typename CollectiveEpilogue::SharedStorage))>,
      MainSchedule>::CollectiveOp;
  using Kernel = cutlass::gemm::kernel::GemmUniversal<ProblemShape, CollectiveMainloop, CollectiveEpilogue,
                                                      TileScheduler>;
  using Gemm = cutlass::gemm::device::GemmUniversalAdapter<Kernel>;
  static constexpr int kThreads = Kernel::MaxThreadsPerBlock;
  static constexpr int kSmem = Kernel::SharedStorageSize;
  static constexpr int kStages = CollectiveMainloop::DispatchPolicy::Stages;
};

template <class Element>
using Large = Config<Element, ABLATE_SEAM_TILE, LargeCluster, Schedule, GEMM_LARGE_SCHEDULER,
                     cute::Shape<int, int, int>>;
template <class Element>
using Skinny = Config<Element, GEMM_SKINNY_TILE,
                      cute::conditional_t<Mainloop::kMulticast, GEMM_SKINNY_CLUSTER, Cluster1x1>,
                      GEMM_SKINNY_SCHEDULE, GEMM_SKINNY_SCHEDULER, cute::Shape<int, int, int, int>>;

// The workspace a configuration asks for (stream-K's partial sums and tile locks, in a tuning
// build that picks it; none for the data-parallel scheduler), which the ABI has no argument for: one
// buffer per process, grown before use. It cannot grow inside a CUDA graph capture, where
// allocation is illegal; ablate's gate runs each shape uncaptured first.
struct Workspace {
  std::mutex lock;
  void* ptr = nullptr;
  size_t bytes = 0;
};
static Workspace workspace;

static cudaError_t reserve(size_t bytes, cudaStream_t stream, void** out) {
  std::lock_guard<std::mutex> guard(workspace.lock);
  if (bytes > workspace.bytes) {
    cudaStreamCaptureStatus capturing = cudaStreamCaptureStatusNone;
    if (cudaStreamIsCapturing(stream, &capturing) != cudaSuccess || capturing != cudaStreamCaptureStatusNone)
      return cudaErrorStreamCaptureUnsupported;
    if (workspace.ptr) cudaFree(workspace.ptr);
    workspace.ptr = nullptr;
    workspace.bytes = 0;
    if (cudaError_t e = cudaMalloc(&workspace.ptr, bytes)) return e;
    workspace.bytes = bytes;
  }
  *out = workspace.ptr;
  return cudaSuccess;
}

static int sm_count() {
  static int count = [] {
    int device = 0, n = 0;
    cudaGetDevice(&device);
    cudaDeviceGetAttribute(&n, cudaDevAttrMultiProcessorCount, device);
    return n;
  }();
  return count;
}

template <class C>
static cudaError_t run(const void* a, const void* b, void* d, int m, int n, int k, cudaStream_t stream) {
  using Gemm = typename C::Gemm;
  using Element = typename Gemm::ElementA;
  using StrideA = typename Gemm::GemmKernel::StrideA;
  using StrideB = typename Gemm::GemmKernel::StrideB;
  using StrideC = typename Gemm::GemmKernel::StrideC;
  using StrideD = typename Gemm::GemmKernel::StrideD;
  using ProblemShape = typename Gemm::GemmKernel::ProblemShape;
  ProblemShape problem;
  if constexpr (cute::rank(ProblemShape{}) == 3) problem = ProblemShape{m, n, k};
  else problem = ProblemShape{m, n, k, 1};
  const int64_t mk = int64_t(m) * k, nk = int64_t(n) * k, mn = int64_t(m) * n;
  StrideA sa = cute::make_stride(int64_t(k), cute::Int<1>{}, mk);
  StrideB sb = cute::make_stride(int64_t(k), cute::Int<1>{}, nk);
  StrideC sc = cute::make_stride(int64_t(n), cute::Int<1>{}, mn);
  StrideD sd = cute::make_stride(int64_t(n), cute::Int<1>{}, mn);
  typename Gemm::Arguments args{
      cutlass::gemm::GemmUniversalMode::kGemm, problem,
      {static_cast<const Element*>(a), sa, static_cast<const Element*>(b), sb},
      {{1.0f, 0.0f}, nullptr, sc, static_cast<Element*>(d), sd}};
  args.hw_info.sm_count = sm_count();
  Raster::apply(args.scheduler);
  Gemm gemm;
  if (gemm.can_implement(args) != cutlass::Status::kSuccess) return cudaErrorInvalidValue;
  void* ws = nullptr;
  if (cudaError_t e = reserve(Gemm::get_workspace_size(args), stream, &ws)) return e;
  if (gemm.initialize(args, ws, stream) != cutlass::Status::kSuccess) return cudaErrorInvalidValue;
  if (gemm.run(stream) != cutlass::Status::kSuccess) {
    cudaError_t e = cudaGetLastError();
    return e == cudaSuccess ? cudaErrorLaunchFailure : e;
  }
  return cudaGetLastError();
}

template <class Element>
static cudaError_t dispatch(const void* a, const void* b, void* d, int m, int n, int k, cudaStream_t stream) {
  if (m <= kSkinnyMaxM) return run<Skinny<Element>>(a, b, d, m, n, k, stream);
  return run<Large<Element>>(a, b, d, m, n, k, stream);
}

// A configuration as the variant info lists it; m in [min_m, max_m] runs it (0: no bound).
template <class C>
static std::string config_json(const char* name, const char* dtype, int min_m, int max_m) {
  return std::string("{\"name\": \"") + name + "\", \"dtype\": \"" + dtype + "\", \"threads\": " +
         std::to_string(C::kThreads) + ", \"smem_bytes\": " + std::to_string(C::kSmem) +
         ", \"stages\": " + std::to_string(C::kStages) + ", \"min_m\": " + std::to_string(min_m) +
         ", \"max_m\": " + std::to_string(max_m) + "}";
}

}  // namespace gemm

extern "C" int ablate_cutlass_gemm(const void* a, const void* b, void* d, int m, int n, int k, int dtype,
                                   void* stream) {
  if (m < 1 || n < 1 || k < 1 || n % gemm::kAlign || k % gemm::kAlign) return cudaErrorInvalidValue;
  auto s = static_cast<cudaStream_t>(stream);
  switch (dtype) {
    case 0: return gemm::dispatch<cutlass::half_t>(a, b, d, m, n, k, s);
#ifndef GEMM_TUNE_FP16_ONLY  // a tuning build's shortcut: half the instances, half the compile
    case 1: return gemm::dispatch<cutlass::bfloat16_t>(a, b, d, m, n, k, s);
#endif
    default: return cudaErrorInvalidValue;
  }
}

extern "C" const char* ablate_variant_info(void) {
  using namespace gemm;
  static const std::string info =
      "{\"pathologies\": " + ablate::names_json(ABLATE_XSTR(ABLATE_PATHOLOGIES)) +
      ", \"seams\": " ABLATE_SEAMS_JSON ", \"configs\": [" +
      config_json<Large<cutlass::half_t>>("fp16_large", "fp16", kSkinnyMaxM + 1, 0) + ", " +
      config_json<Skinny<cutlass::half_t>>("fp16_skinny", "fp16", 1, kSkinnyMaxM) +
#ifndef GEMM_TUNE_FP16_ONLY
      ", " + config_json<Large<cutlass::bfloat16_t>>("bf16_large", "bf16", kSkinnyMaxM + 1, 0) + ", " +
      config_json<Skinny<cutlass::bfloat16_t>>("bf16_skinny", "bf16", 1, kSkinnyMaxM) +
#endif
      "]}";
  return info.c_str();
}
