// A Hopper (sm_90a) GEMM built from CUTLASS 3.x's collective builders: d = a b^T, FP16 or
// BF16 in and out, FP32 accumulation (base/ablate_gemm.h is the C ABI). CUTLASS is a
// dependency, read from the nvidia-cutlass package's headers (spec.py: include_dirs).
//
// Configurations, each an instance of Config below (Candidate: spec.CANDIDATES gives each one's
// index). A build compiles one of them, -DABLATE_GEMM_FORCE=<index> (large where none is
// named), and runs it at every shape: ablate times the candidates at a shape on the GPU and
// builds the base and every variant there on the fastest (spec.py; docs/design.md,
// "Configurations by measurement"); static mode builds the spec's stated guess. Among them:
//   large   ping-pong 128x128x64 tiles, TMA mainloop, no cluster (2x1 clusters with B multicast
//           measured 0.89-1.0x of 1x1's speed at the large shapes), a persistent data-parallel
//           tile scheduler with a swizzled raster (seams.cuh: Fitted), a TMA epilogue (one 128x128 tile per
//           consumer warpgroup, 64 FP32 accumulator registers x 2 per thread). The fastest of
//           the tuning builds at the large shapes (docs/benchmarks.md, "cutlass_gemm").
//   skinny  (decode-like m) ping-pong 64x64x64 tiles under the persistent data-parallel
//           scheduler: n / 64 = 64 tiles at n = 4096, as many stages as fit (13). Cooperative
//           128x64 tiles under stream-K measured 0.71x of cuBLAS at m = 64 where this reads 0.96x.
//   streamk cooperative 128x128x64 tiles under CUTLASS's stream-K scheduler, for shapes whose
//           128x128 tiles leave much of the last wave idle (m = n = 1000: 64 tiles on 132 SMs):
//           the scheduler shares the k loop of the tiles among all SMs (stream-K is cooperative
//           only: CUTLASS's ping-pong kernel refuses it).
//   swap_n32_4x1, swap_n64, swap_n96, swap_n128, swap_n160 (skinny m) the swapped problem,
//           d^T = b a^T (Operands::ba): the weight's n along the tile's 64 rows and m along its
//           N, fitted to m where the others pad m to 64-row tiles; a 4x1 cluster multicasts a's
//           tile to the four blocks along the weight ("The twelfth session"). swap_n64_4x2 is
//           swap_n64 on a 4x2 cluster, which multicasts the weight's tile to the pair of blocks
//           along m too ("The thirteenth session").
//   skinny_splitk skinny_n128's kernel over k cut into chunks (run): more blocks streaming the
//           weight, whose partial sums a second kernel adds.
//   wide, n192_1x2 (rows of A and B off 128-byte lines, k not a multiple of 64, where each TMA
//           box row reaches L2 as two or three requests): fewer requests per FLOP. wide:
//           cooperative 256x128x64 on a 1x2 cluster multicasting A (half large's requests per
//           FLOP); n192_1x2: ping-pong 128x192x64 on a 1x2 cluster multicasting A (two thirds).
//   n320, n224, n160_coop  cooperative 128x320x64 and 128x224x64 on a 2x1 cluster (each block
//           loads half of B, whose 320 rows one TMA box cannot hold, and multicasts it) and
//           128x160x64 on a 1x2 one: fewer, larger tiles or more, smaller ones past half a wave.
// Each knob is a seam (#ifndef ABLATE_SEAM_X below); a pathology (patches/*.cuh,
// force-included ahead of this file) redefines one. Which configurations a seam reaches is
// said beside it (spec.SEAMS_OF: where a seam does not reach the configuration a shape runs,
// the pathology is not applicable there); the instances are told apart by their
// problem-shape type (rank 3: large and streamk, rank 4: the skinny ones), their tile
// scheduler and their MMA atom, which spec.config_of reads from the kernel name.
#include "ablate_gemm.h"

#include "seams.cuh"  // first: it sets how CuTe picks wgmma shapes, before any CuTe header

#include <cuda_runtime.h>

#include <cstdint>
#include <mutex>
#include <string>
#include <type_traits>

#include <cute/tensor.hpp>
#include <cutlass/cutlass.h>
#include <cutlass/epilogue/collective/collective_builder.hpp>
#include <cutlass/gemm/collective/collective_builder.hpp>
#include <cutlass/gemm/device/gemm_universal_adapter.h>
#include <cutlass/gemm/dispatch_policy.hpp>
#include <cutlass/gemm/kernel/gemm_universal.hpp>
#include <cutlass/gemm/kernel/tile_scheduler.hpp>

#include <ablate/variant_info.h>

#ifndef ABLATE_SEAM_SCHEDULE     // large: how the two consumer warpgroups share the tensor cores
#define ABLATE_SEAM_SCHEDULE PingPong
#endif
#ifndef ABLATE_SEAM_MAINLOOP     // all: who moves A and B tiles into shared memory
#define ABLATE_SEAM_MAINLOOP TmaMainloop
#endif
#ifndef ABLATE_SEAM_CLUSTER      // large: thread-block cluster (a 2x1 pair would share B by TMA multicast)
#define ABLATE_SEAM_CLUSTER Cluster1x1
#endif
#ifndef ABLATE_SEAM_STAGES       // all: depth of the shared-memory pipeline
#define ABLATE_SEAM_STAGES StagesAuto
#endif
#ifndef ABLATE_SEAM_TILE         // large: the block's output tile (M x N x K-step)
#define ABLATE_SEAM_TILE Tile128x128
#endif
#ifndef ABLATE_SEAM_EPILOGUE     // all: how the accumulators reach global memory
#define ABLATE_SEAM_EPILOGUE TmaEpilogue
#endif
#ifndef ABLATE_SEAM_RASTER       // all: the order the persistent blocks walk the tiles in
#define ABLATE_SEAM_RASTER Fitted
#endif

// The configuration this build compiles and runs at every shape: candidate i of spec.CANDIDATES
// (the build of a job names the one its shape runs); large where none is named.
#ifndef ABLATE_GEMM_FORCE
#define ABLATE_GEMM_FORCE 1
#endif

namespace gemm {

using Schedule = ABLATE_SEAM_SCHEDULE;
using Mainloop = ABLATE_SEAM_MAINLOOP;
using Stages = ABLATE_SEAM_STAGES;
using Epilogue = ABLATE_SEAM_EPILOGUE;
using Raster = ABLATE_SEAM_RASTER;
using Launch = ABLATE_SEAM_LAUNCH;  // seams.cuh: chosen ahead of CUTLASS's headers
// cp.async cannot multicast: a cp.async mainloop runs without clusters.
using LargeCluster = cute::conditional_t<Mainloop::kMulticast, ABLATE_SEAM_CLUSTER, Cluster1x1>;
using WideCluster = cute::conditional_t<Mainloop::kMulticast, Cluster1x2, Cluster1x1>;
using QuadCluster = cute::conditional_t<Mainloop::kMulticast, Cluster2x2, Cluster1x1>;
using TallCluster = cute::conditional_t<Mainloop::kMulticast, Cluster2x1, Cluster1x1>;
using Tall4Cluster = cute::conditional_t<Mainloop::kMulticast, Cluster4x1, Cluster1x1>;
using Tall4x2Cluster = cute::conditional_t<Mainloop::kMulticast, Cluster4x2, Cluster1x1>;

constexpr int kAlign = 8;         // elements per 16 bytes: TMA's and the vector loads' alignment

// Which product the kernel computes. ab: d = a b^T, m along the tile's M. ba: d^T = b a^T,
// the weight's n along M and m along N, d written column-major (the same bytes as d row-major):
// at skinny m the wgmma's 64-row M is filled by n and the tile's N (8 to 256) fits m. cuBLAS's
// kernels at m = 1-64 do this (ncu names them nvjet_..._TNT: at m = 32, 64x16 tiles on 1x2
// clusters, 128 blocks; docs/benchmarks.md, "The fifth session").
enum class Operands { ab, ba };

// The epilogue's subtile: CUTLASS's (128x32 under the cooperative schedule) but where 32 columns do
// not divide the wgmma atom's N (64x144 atoms across a 288-wide tile), there 48.
template <class Tile>
using EpilogueTile = cute::conditional_t<cute::size<1>(Tile{}) == 288, cute::Shape<cute::_128, cute::Int<48>>,
                                         cutlass::epilogue::collective::EpilogueTileAuto>;

// One GEMM configuration: the collectives the builders make of the knobs, and the kernel.
// ElementD: the type the kernel writes; float for a split-k candidate, whose FP32 partial
// sums a second kernel adds into d (run).
template <class Element, class Tile, class Cluster, class Sched, class TileScheduler, class ProblemShape,
          class ElementD = Element, Operands kOperands = Operands::ab>
struct Config {
  static constexpr bool kSplitK = !std::is_same_v<ElementD, Element>;
  static constexpr bool kSwapped = kOperands == Operands::ba;
  using LayoutD = cute::conditional_t<kSwapped, cutlass::layout::ColumnMajor, cutlass::layout::RowMajor>;
  using MainSchedule = typename Mainloop::template Schedule<Sched>;
  using EpiSchedule = typename Epilogue::template Schedule<Sched>;
  using CollectiveEpilogue = typename cutlass::epilogue::collective::CollectiveBuilder<
      cutlass::arch::Sm90, cutlass::arch::OpClassTensorOp, Tile, Cluster,
      EpilogueTile<Tile>, float, float,
      void, LayoutD, kAlign,                            // no C: d = a b^T (beta = 0)
      ElementD, LayoutD, 16 / int(sizeof(ElementD)), EpiSchedule>::CollectiveOp;
  using CollectiveMainloop = typename cutlass::gemm::collective::CollectiveBuilder<
      cutlass::arch::Sm90, cutlass::arch::OpClassTensorOp,
      Element, cutlass::layout::RowMajor, kAlign,        // a (b where ba): (m, k), K-major
      Element, cutlass::layout::ColumnMajor, kAlign,     // b (a where ba): (n, k) row-major = K x N column-major
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

using Rank3 = cute::Shape<int, int, int>;
using Rank4 = cute::Shape<int, int, int, int>;

// The candidates, by spec.CANDIDATES' index. Only large takes the schedule, cluster and tile
// seams; the others' tiles, clusters and schedules are theirs (a 64-row tile is too short to
// split between two warpgroups; stream-K needs the cooperative schedule). The problem shape's
// rank, the scheduler and the MMA atom (64 x tile N) tell them apart in a kernel name.
template <int I, class Element> struct Candidate;
#define GEMM_CANDIDATE(index, config, ...)                             \
  template <class E> struct Candidate<index, E> {                      \
    static constexpr const char* name = #config;                       \
    using type = Config<E, __VA_ARGS__>;                               \
  };
//             index  name         tile             cluster       schedule     scheduler     problem
GEMM_CANDIDATE(1,     large,       ABLATE_SEAM_TILE, LargeCluster, Schedule,    DataParallel, Rank3)
GEMM_CANDIDATE(2,     skinny,      Tile64x64,        Cluster1x1,   PingPong,    DataParallel, Rank4)
GEMM_CANDIDATE(3,     streamk,     Tile128x128,      Cluster1x1,   Cooperative, StreamK,      Rank3)
GEMM_CANDIDATE(4,     skinny_n32,  Tile64x32,        Cluster1x1,   PingPong,    DataParallel, Rank4)
GEMM_CANDIDATE(5,     skinny_n128, Tile64x128,       Cluster1x1,   PingPong,    DataParallel, Rank4)
GEMM_CANDIDATE(6,     streamk_n64, Tile128x64,       Cluster1x1,   Cooperative, StreamK,      Rank3)
GEMM_CANDIDATE(7,     wide,        Tile256x128,      WideCluster,  Cooperative, DataParallel, Rank3)
GEMM_CANDIDATE(8,     large_1x2,   Tile128x128,      WideCluster,  PingPong,    DataParallel, Rank3)
GEMM_CANDIDATE(9,     large_2x2,   Tile128x128,      QuadCluster,  PingPong,    DataParallel, Rank3)
GEMM_CANDIDATE(10,    n192,        Tile128x192,      Cluster1x1,   PingPong,    DataParallel, Rank3)
GEMM_CANDIDATE(11,    n192_1x2,    Tile128x192,      WideCluster,  PingPong,    DataParallel, Rank3)
GEMM_CANDIDATE(12,    n192_2x1,    Tile128x192,      TallCluster,  PingPong,    DataParallel, Rank3)
GEMM_CANDIDATE(13,    skinny_splitk, Tile64x128,     Cluster1x1,   PingPong,    DataParallel, Rank4, float)
GEMM_CANDIDATE(14,    swap_n16,    Tile64x16,        WideCluster,  PingPong,    DataParallel, Rank4, E, Operands::ba)
GEMM_CANDIDATE(15,    swap_n32,    Tile64x32,        WideCluster,  PingPong,    DataParallel, Rank4, E, Operands::ba)
GEMM_CANDIDATE(16,    n144,        Tile128x144,      Cluster1x1,   PingPong,    DataParallel, Rank3)
GEMM_CANDIDATE(17,    n128_2x1,    Tile64x128,       TallCluster,  PingPong,    DataParallel, Rank3)
GEMM_CANDIDATE(18,    n320,        Tile128x320,      TallCluster,  Cooperative, DataParallel, Rank3)
GEMM_CANDIDATE(19,    n160,        Tile128x160,      WideCluster,  PingPong,    DataParallel, Rank3)
GEMM_CANDIDATE(20,    n160_coop,   Tile128x160,      WideCluster,  Cooperative, DataParallel, Rank3)
GEMM_CANDIDATE(21,    n288,        Tile128x288,      TallCluster,  Cooperative, DataParallel, Rank3)
GEMM_CANDIDATE(22,    n224,        Tile128x224,      TallCluster,  Cooperative, DataParallel, Rank3)
GEMM_CANDIDATE(23,    n176_coop,   Tile128x176,      WideCluster,  Cooperative, DataParallel, Rank3)
GEMM_CANDIDATE(24,    swap_n64,    Tile64x64,        Tall4Cluster, PingPong,    DataParallel, Rank4, E, Operands::ba)
GEMM_CANDIDATE(25,    swap_n80,    Tile64x80,        Tall4Cluster, PingPong,    DataParallel, Rank4, E, Operands::ba)
GEMM_CANDIDATE(26,    swap_n96,    Tile64x96,        Tall4Cluster, PingPong,    DataParallel, Rank4, E, Operands::ba)
GEMM_CANDIDATE(27,    swap_n128,   Tile64x128,       Tall4Cluster, PingPong,    DataParallel, Rank4, E, Operands::ba)
GEMM_CANDIDATE(28,    swap_n160,   Tile64x160,       Tall4Cluster, PingPong,    DataParallel, Rank4, E, Operands::ba)
GEMM_CANDIDATE(29,    swap_n192,   Tile64x192,       Tall4Cluster, PingPong,    DataParallel, Rank4, E, Operands::ba)
GEMM_CANDIDATE(30,    swap_n96_2x1, Tile64x96,       TallCluster,  PingPong,    DataParallel, Rank4, E, Operands::ba)
GEMM_CANDIDATE(31,    swap128_n96, Tile128x96,       Tall4Cluster, PingPong,    DataParallel, Rank4, E, Operands::ba)
GEMM_CANDIDATE(32,    swap_n32_4x1, Tile64x32,       Tall4Cluster, PingPong,    DataParallel, Rank4, E, Operands::ba)
GEMM_CANDIDATE(33,    swap_n48,    Tile64x48,        Tall4Cluster, PingPong,    DataParallel, Rank4, E, Operands::ba)
GEMM_CANDIDATE(34,    swap_n64_4x2, Tile64x64,       Tall4x2Cluster, PingPong,  DataParallel, Rank4, E, Operands::ba)
GEMM_CANDIDATE(35,    swap_n48_1x2, Tile64x48,       WideCluster,  PingPong,    DataParallel, Rank4, E, Operands::ba)
GEMM_CANDIDATE(36,    swap_n64_1x2, Tile64x64,       WideCluster,  PingPong,    DataParallel, Rank4, E, Operands::ba)
GEMM_CANDIDATE(37,    swap_n128_1x2, Tile64x128,     WideCluster,  PingPong,    DataParallel, Rank4, E, Operands::ba)
// skinny's 64x64 tiles on clusters of two, one operand's tile multicast to both (cuBLAS runs
// 64x64 tiles on clusters at m = 512, n = 1024, where skinny's 128 blocks each read their own
// A and B; measured slower than skinny at most shapes: spec.py)
GEMM_CANDIDATE(38,    skinny_1x2,  Tile64x64,        WideCluster,  PingPong,    DataParallel, Rank4)
GEMM_CANDIDATE(39,    skinny_2x1,  Tile64x64,        TallCluster,  PingPong,    DataParallel, Rank4)
// The swapped tile 128 rows of n tall, 144 or 160 columns of m, cooperative (one tile per block in one
// wave), on 4x1 clusters: at m 129-160 and n 7681-15360, where swap_n160's 64-row tiles take more than
// the 30 clusters of four the GPU holds at once (two waves), these take one (n / 512 clusters).
// H200: 0.80-1.22 of cuBLAS against swap_n160's 0.72-1.07 at 12 of 12 random shapes drawn after the
// rule was stated; swap_n160 ahead at n <= 7680 (docs/benchmarks.md, "The twentieth session").
GEMM_CANDIDATE(40,    swap128_n160, Tile128x160,     Tall4Cluster, Cooperative, DataParallel, Rank4, E, Operands::ba)
GEMM_CANDIDATE(41,    swap128_n144, Tile128x144,     Tall4Cluster, Cooperative, DataParallel, Rank4, E, Operands::ba)
// The same tall tile where m's other swapped tiles take two waves of clusters past n = 7680
// (swap_n64, swap_n128: n / 64 tiles), and the swapped tiles with k split, where n <= 7680 leaves
// half the SMs without a tile (swap_n160: 64 tiles at n = 4096). H200 (docs/benchmarks.md, "The
// twenty-first session"): swap128_n64 and swap128_n128 +2-40% at 15 of 18 shapes past n = 7680;
// swap128_n192 at m 161-192 +4-5% at n = 14336 but -22% at n = 11008 (86 tiles fill 65% of the
// SMs); both split-k builds 10-30% below swap_n160 at six shapes, m 136-160, n 3072-7168.
GEMM_CANDIDATE(42,    swap128_n128, Tile128x128,     Tall4Cluster, Cooperative, DataParallel, Rank4, E, Operands::ba)
GEMM_CANDIDATE(43,    swap128_n192, Tile128x192,     Tall4Cluster, Cooperative, DataParallel, Rank4, E, Operands::ba)
GEMM_CANDIDATE(44,    swap128_n64, Tile128x64,       Tall4Cluster, Cooperative, DataParallel, Rank4, E, Operands::ba)
GEMM_CANDIDATE(45,    swap_n160_splitk, Tile64x160,  Tall4Cluster, PingPong,    DataParallel, Rank4, float, Operands::ba)
GEMM_CANDIDATE(46,    swap128_n160_splitk, Tile128x160, Tall4Cluster, Cooperative, DataParallel, Rank4, float, Operands::ba)
// large's and streamk_n64's tiles, cooperative, under the persistent data-parallel scheduler: for
// grids of at most about one wave (issue 62's random check, H200, 2026-12-02: large 0.798 of cuBLAS
// at m = 800, n = 1776, k = 768, 98 tiles of 128x128; streamk the pick at 0.814 at m = 336,
// n = 3984, k = 144, 96 tiles; n128_2x1 0.866 at m = 496, n = 1632, k = 144, 104 tiles of 64x128).
// With one tile an SM the ping-pong kernel's second consumer warpgroup has no tile whose MMAs could
// hide the first's epilogue, and that one warpgroup holds the whole tile (128 accumulators a thread
// at 128x128); the cooperative kernel splits the tile between the two (64 rows each), halving each
// one's epilogue, which at short k (2-4 k steps) is much of a tile's time. streamk has that split
// but pays the stream-K scheduler (its workspace, and fix-ups where it shares a tile's k loop).
// A prediction, not measured: faster than large and streamk where 128x128 tiles make at most one
// wave, than skinny_n128 and n128_2x1 where 128x64 ones do; slower than large past a wave.
GEMM_CANDIDATE(47,    large_coop,  Tile128x128,      Cluster1x1,   Cooperative, DataParallel, Rank3)
GEMM_CANDIDATE(48,    coop_n64,    Tile128x64,       Cluster1x1,   Cooperative, DataParallel, Rank3)
#undef GEMM_CANDIDATE

// The workspace a configuration asks for (stream-K's partial sums and tile locks; none for the
// data-parallel scheduler), which the ABI has no argument for: one buffer per process, grown
// before use. It cannot grow inside a CUDA graph capture, where
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

// How many clusters of a kernel's shape the GPU holds at once (cudaOccupancyMaxActiveClusters, at
// the kernel's block size and shared memory); 0 where unknown or unclustered. CUTLASS's persistent
// scheduler launches that many where it is given; without it, a model of 18-SM GPCs that makes
// 116 blocks of clusters of four on the H100's 132 SMs, where 120 fit (30 clusters): 120 tiles
// then take two waves (docs/benchmarks.md, "The fourteenth session"). Not CUTLASS's own
// KernelHardwareInfo::query_device_max_active_clusters: it asks at no shared memory, where several
// blocks fit an SM, and its count then fails the scheduler's check and falls back to the model.
// -DABLATE_GEMM_CLUSTER_MODEL (a tuning build's switch) keeps the model, to measure what this buys.
#ifdef ABLATE_GEMM_CLUSTER_MODEL
constexpr bool kClusterModel = true;
#else
constexpr bool kClusterModel = false;
#endif
template <class Kernel>
static int max_active_clusters() {
  static const int count = [] {
    using Cluster = typename Kernel::ClusterShape;
    const int cm = cute::size<0>(Cluster{}), cn = cute::size<1>(Cluster{});
    if (kClusterModel || cm * cn == 1) return 0;
    const void* kernel = reinterpret_cast<const void*>(cutlass::device_kernel<Kernel>);
    const int smem = static_cast<int>(Kernel::SharedStorageSize);
    cudaLaunchAttribute cluster{};
    cluster.id = cudaLaunchAttributeClusterDimension;
    cluster.val.clusterDim.x = cm, cluster.val.clusterDim.y = cn, cluster.val.clusterDim.z = 1;
    cudaLaunchConfig_t config{};
    config.gridDim = dim3(cm, cn, 1), config.blockDim = dim3(Kernel::MaxThreadsPerBlock, 1, 1);
    config.dynamicSmemBytes = smem, config.attrs = &cluster, config.numAttrs = 1;
    int clusters = 0;
    if (cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, smem) == cudaSuccess &&
        cudaOccupancyMaxActiveClusters(&clusters, kernel, &config) == cudaSuccess)
      return clusters;
    cudaGetLastError();  // refused: CUTLASS's model, and no error left behind for the launch to report
    return 0;
  }();
  return count;
}

// Split-k over the batch mode (skinny_splitk): at decode m the output has
// too few tiles to keep the SMs streaming the weight (32 blocks of 64x128 at n = 4096 read
// DRAM at 43% of its peak; cuBLAS splits k, ncu, docs/benchmarks.md). The k loop is cut into
// `splits` chunks, each one batch of the rank-4 problem (m, n, k / splits, splits): A's and B's
// batch stride is the chunk's length, each batch writes FP32 partial sums of d into the
// workspace, and sum_partials adds them into d.
template <class Element>
__global__ void sum_partials(const float* partials, Element* d, int64_t mn, int splits) {
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < mn; i += int64_t(gridDim.x) * blockDim.x) {
    float sum = 0.f;
    for (int j = 0; j < splits; ++j) sum += partials[i + j * mn];
    d[i] = static_cast<Element>(sum);
  }
}

// As many chunks as the tiles leave SMs for (at most 8), each a multiple of 8 elements long
// (TMA's 16-byte aligned batch stride): 4 at k = 4096 and n = 4096, 5 at k = 1000.
static int split_count(int m, int n, int k, int tile_m, int tile_n, int sms) {
  const int64_t tiles = (int64_t(m) + tile_m - 1) / tile_m * ((int64_t(n) + tile_n - 1) / tile_n);
  int splits = static_cast<int>(cute::min(int64_t(8), cute::max(int64_t(1), sms / tiles)));
  while (splits > 1 && k % (splits * 8)) --splits;
  return splits;
}

// d's strides as the kernel's (M, N) output sees it: row-major d (n, 1), or, where the kernel
// computes d^T (Operands::ba), its column-major (1, n); the batch stride m n.
template <class Stride>
static Stride output_stride(int n, int64_t mn) {
  if constexpr (cute::is_static<cute::remove_cvref_t<decltype(cute::get<0>(Stride{}))>>::value)
    return cute::make_stride(cute::Int<1>{}, int64_t(n), mn);
  else
    return cute::make_stride(int64_t(n), cute::Int<1>{}, mn);
}

// One GEMM of configuration C: d = a b^T (or d^T = b a^T, C::kSwapped: the operands and m, n
// trade places). Where C writes FP32 partial sums (C::kSplitK), the k loop is cut into `splits`
// chunks, the rank-4 problem's batches (A's and B's batch stride a chunk's length), the
// partials at the workspace's start and CUTLASS's own workspace after them, and sum_partials
// adds them into d; otherwise one batch of the whole k.
template <class C>
static cudaError_t run(const void* a, const void* b, void* d, int m, int n, int k, cudaStream_t stream) {
  using Gemm = typename C::Gemm;
  using Kernel = typename Gemm::GemmKernel;
  using Element = typename Gemm::ElementA;
  using ProblemShape = typename Kernel::ProblemShape;
  using Tile = typename Kernel::TileShape;
  const int rows = C::kSwapped ? n : m, cols = C::kSwapped ? m : n;  // the kernel's M and N
  const void* first = C::kSwapped ? b : a;
  const void* second = C::kSwapped ? a : b;
  const int splits = C::kSplitK ? split_count(rows, cols, k, cute::size<0>(Tile{}), cute::size<1>(Tile{}), sm_count()) : 1;
  const int chunk = k / splits;
  const int64_t mn = int64_t(m) * n;
  ProblemShape problem;
  if constexpr (cute::rank(ProblemShape{}) == 3) problem = ProblemShape{rows, cols, k};
  else problem = ProblemShape{rows, cols, chunk, splits};
  const int64_t batch_a = C::kSplitK ? chunk : int64_t(rows) * k, batch_b = C::kSplitK ? chunk : int64_t(cols) * k;
  typename Kernel::StrideA sa = cute::make_stride(int64_t(k), cute::Int<1>{}, batch_a);
  typename Kernel::StrideB sb = cute::make_stride(int64_t(k), cute::Int<1>{}, batch_b);
  const auto sc = output_stride<typename Kernel::StrideC>(n, mn);
  const auto sd = output_stride<typename Kernel::StrideD>(n, mn);
  typename Gemm::Arguments args{
      cutlass::gemm::GemmUniversalMode::kGemm, problem,
      {static_cast<const Element*>(first), sa, static_cast<const Element*>(second), sb},
      {{1.0f, 0.0f}, nullptr, sc, nullptr, sd}};
  args.hw_info.sm_count = sm_count();
  args.hw_info.max_active_clusters = max_active_clusters<Kernel>();
  using Cluster = typename Kernel::ClusterShape;
  Raster::apply(args.scheduler, TileGrid{int(cute::ceil_div(rows, cute::size<0>(Tile{}))),
                                         int(cute::ceil_div(cols, cute::size<1>(Tile{}))),
                                         int(cute::size<0>(Cluster{})), int(cute::size<1>(Cluster{}))});
  const size_t partial_bytes = C::kSplitK ? (size_t(splits) * mn * sizeof(float) + 255) / 256 * 256 : 0;
  void* ws = nullptr;
  if (cudaError_t e = reserve(partial_bytes + Gemm::get_workspace_size(args), stream, &ws)) return e;
  using ElementD = std::remove_pointer_t<decltype(args.epilogue.ptr_D)>;
  args.epilogue.ptr_D = static_cast<ElementD*>(C::kSplitK ? ws : d);
  Gemm gemm;
  if (gemm.can_implement(args) != cutlass::Status::kSuccess) return cudaErrorInvalidValue;
  if (gemm.initialize(args, static_cast<char*>(ws) + partial_bytes, stream) != cutlass::Status::kSuccess)
    return cudaErrorInvalidValue;
  // Dependent (seams.cuh): launched with programmatic stream serialization, where the kernel waits
  // for the launch before it. Measured on the H200 (2026-12-02, issue 62's random check, against the
  // run before it): 0.7-1.8 us off each of the 13 launches under 8 us, 0.920 -> 1.052 of cuBLAS's
  // speed over the 24 shapes (docs/history/2026-12-02.md, "The twenty-eighth session").
  constexpr bool dependent = Launch::kDependent && Mainloop::kGridDependency;
  if (gemm.run(stream, nullptr, dependent) != cutlass::Status::kSuccess) {
    cudaError_t e = cudaGetLastError();
    return e == cudaSuccess ? cudaErrorLaunchFailure : e;
  }
  if constexpr (C::kSplitK) {
    const int threads = 256;
    const int blocks = static_cast<int>(cute::min(int64_t(sm_count()) * 8, (mn + threads - 1) / threads));
    sum_partials<<<blocks, threads, 0, stream>>>(static_cast<const float*>(ws), static_cast<Element*>(d), mn, splits);
  }
  return cudaGetLastError();
}

template <class Element>
static cudaError_t dispatch(const void* a, const void* b, void* d, int m, int n, int k, cudaStream_t stream) {
  return run<typename Candidate<ABLATE_GEMM_FORCE, Element>::type>(a, b, d, m, n, k, stream);
}

// A configuration as the variant info lists it ("fp16_large", ...).
template <int I, class Element>
static std::string config_json(const char* dtype) {
  using C = typename Candidate<I, Element>::type;
  return std::string("{\"name\": \"") + dtype + "_" + Candidate<I, Element>::name + "\", \"dtype\": \"" + dtype +
         "\", \"threads\": " + std::to_string(C::kThreads) + ", \"smem_bytes\": " + std::to_string(C::kSmem) +
         ", \"stages\": " + std::to_string(C::kStages) + "}";
}

// The configuration the build runs.
template <class Element>
static void configs_json(const char* dtype, std::string& out) {
  out += (out.empty() ? "" : ", ") + config_json<ABLATE_GEMM_FORCE, Element>(dtype);
}

}  // namespace gemm

extern "C" int ablate_cutlass_gemm(const void* a, const void* b, void* d, int m, int n, int k, int dtype,
                                   void* stream) {
  if (m < 1 || n < 1 || k < 1 || n % gemm::kAlign || k % gemm::kAlign) return cudaErrorInvalidValue;
  auto s = static_cast<cudaStream_t>(stream);
  switch (dtype) {
    case 0: return gemm::dispatch<cutlass::half_t>(a, b, d, m, n, k, s);
#ifndef ABLATE_GEMM_FP16_ONLY  // the FP16 instances alone: ~15% less compile (the CPU tests' builds)
    case 1: return gemm::dispatch<cutlass::bfloat16_t>(a, b, d, m, n, k, s);
#endif
    default: return cudaErrorInvalidValue;
  }
}

extern "C" const char* ablate_variant_info(void) {
  using namespace gemm;
  static const std::string info = [] {
    std::string configs;
    configs_json<cutlass::half_t>("fp16", configs);
#ifndef ABLATE_GEMM_FP16_ONLY
    configs_json<cutlass::bfloat16_t>("bf16", configs);
#endif
    return "{\"pathologies\": " + ablate::names_json(ABLATE_XSTR(ABLATE_PATHOLOGIES)) +
           ", \"seams\": " ABLATE_SEAMS_JSON ", \"configs\": [" + configs + "]}";
  }();
  return info.c_str();
}
