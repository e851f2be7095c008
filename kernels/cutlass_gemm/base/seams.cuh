// The choices each seam of base/cutlass_gemm.cu can name: the base's and the pathologies'.
// Each is a CUTLASS template argument (or, for the raster, a tile-scheduler argument) wrapped
// in a type, so that a patch swaps one by redefining one ABLATE_SEAM_* macro.
#pragma once
// CuTe's wgmma selector takes the largest N dividing the tile's N from 256, 192, 128, 96, 64, ...
// unless this is defined, when it takes any multiple of 8: without it a 128x144 tile ran nine
// 64x16 wgmma a k step where one 64x144 does the work (6.4 M instructions against large's
// 1.9 M, ncu; docs/benchmarks.md, "The fifth session"). The tiles of 8 * 2^i wide pick the
// same atoms either way. Defined here, ahead of CuTe's headers, because a patch includes this
// file before base/cutlass_gemm.cu (force-included): defined in the .cu alone, the patches'
// builds ran n160_coop on five 64x32 atoms where the base has one 64x160 (static mode's
// fingerprints, the seventh session).
#ifndef CUTE_SM90_EXTENDED_MMA_SHAPES_ENABLED
#define CUTE_SM90_EXTENDED_MMA_SHAPES_ENABLED
#endif
// The launch seam: programmatic dependent launch, decided here for the same reason. CUTLASS
// compiles its TMA kernels' griddepcontrol instructions (each block waits for the launch before
// it to finish before it reads or writes, and lets the next launch start after its main loop)
// only where CUTLASS_ENABLE_GDC_FOR_SM90 is defined ahead of its headers, and a patch's header
// comes first; so the no_pdl pathology is a macro (its yaml's ABLATE_NO_PDL, on the command
// line), not a patch.
#ifdef ABLATE_NO_PDL
#define ABLATE_SEAM_LAUNCH Serial
#endif
#ifndef ABLATE_SEAM_LAUNCH       // all: programmatic dependent launch
#define ABLATE_SEAM_LAUNCH Dependent
#ifndef CUTLASS_ENABLE_GDC_FOR_SM90
#define CUTLASS_ENABLE_GDC_FOR_SM90
#endif
#endif
#include <cute/tensor.hpp>
#include <cutlass/epilogue/dispatch_policy.hpp>
#include <cutlass/gemm/collective/collective_builder.hpp>
#include <cutlass/gemm/dispatch_policy.hpp>
#include <cutlass/gemm/kernel/tile_scheduler.hpp>
#include <cutlass/gemm/kernel/tile_scheduler_params.h>
#include <cutlass/fast_math.h>

namespace gemm {

// Kernel schedules: the warp-specialized kernels' consumer arrangement, with the mainloop and
// epilogue policies each pairs with.
struct PingPong {  // two consumer warpgroups on two tiles, taking turns: one's epilogue under the other's MMAs
  using Tma = cutlass::gemm::KernelTmaWarpSpecializedPingpong;
  using CpAsync = cutlass::gemm::KernelCpAsyncWarpSpecializedPingpong;
  using TmaEpilogue = cutlass::epilogue::TmaWarpSpecialized;
};
struct Cooperative {  // two consumer warpgroups split one tile; the epilogue stalls both
  using Tma = cutlass::gemm::KernelTmaWarpSpecializedCooperative;
  using CpAsync = cutlass::gemm::KernelCpAsyncWarpSpecializedCooperative;
  using TmaEpilogue = cutlass::epilogue::TmaWarpSpecializedCooperative;
};

// Mainloops: the producer warp's copies. kGridDependency: whether the kernel CUTLASS builds on it
// waits for the launch before it (griddepcontrol.wait); its cp.async kernels do not, so they are
// never launched dependent (they could read and write ahead of the launch before them).
struct TmaMainloop {  // one thread issues TMA tile copies (multicast across the cluster)
  static constexpr bool kMulticast = true;
  static constexpr bool kGridDependency = true;
  template <class S> using Schedule = typename S::Tma;
};
struct CpAsyncMainloop {  // the producer warpgroup's 128 threads copy with cp.async, 16 bytes each
  static constexpr bool kMulticast = false;
  static constexpr bool kGridDependency = false;
  template <class S> using Schedule = typename S::CpAsync;
};

// Launches (the launch seam, chosen at the top of this file).
struct Dependent {  // programmatic dependent launch: this launch's start overlaps the last one's end
  static constexpr bool kDependent = true;
};
struct Serial {  // each launch starts after the one before it has ended and its writes are flushed
  static constexpr bool kDependent = false;
};

// Clusters.
using Cluster2x1 = cute::Shape<cute::_2, cute::_1, cute::_1>;
using Cluster1x1 = cute::Shape<cute::_1, cute::_1, cute::_1>;
using Cluster1x2 = cute::Shape<cute::_1, cute::_2, cute::_1>;  // a pair along N: A multicast to both
using Cluster2x2 = cute::Shape<cute::_2, cute::_2, cute::_1>;  // A multicast along N, B along M
using Cluster4x1 = cute::Shape<cute::_4, cute::_1, cute::_1>;  // four along M: B multicast to all four
using Cluster4x2 = cute::Shape<cute::_4, cute::_2, cute::_1>;  // and two along N: A multicast to both

// Pipeline depth.
struct StagesAuto {  // as many stages as shared memory holds beside the epilogue's
  template <int EpilogueBytes> using Count = cutlass::gemm::collective::StageCountAutoCarveout<EpilogueBytes>;
};
struct Stages2 {  // double buffering only
  template <int> using Count = cutlass::gemm::collective::StageCount<2>;
};

// Tiles (M x N x K-step).
using Tile128x128 = cute::Shape<cute::_128, cute::_128, cute::_64>;
using Tile64x64 = cute::Shape<cute::_64, cute::_64, cute::_64>;
using Tile128x64 = cute::Shape<cute::_128, cute::_64, cute::_64>;   // candidates of a tuning build (GEMM_FORCE)
using Tile64x32 = cute::Shape<cute::_64, cute::_32, cute::_64>;
using Tile64x16 = cute::Shape<cute::_64, cute::_16, cute::_64>;
using Tile64x128 = cute::Shape<cute::_64, cute::_128, cute::_64>;
using Tile64x80 = cute::Shape<cute::_64, cute::Int<80>, cute::_64>;   // the swapped ones: tile N fitted to m
using Tile64x48 = cute::Shape<cute::_64, cute::Int<48>, cute::_64>;
using Tile64x96 = cute::Shape<cute::_64, cute::Int<96>, cute::_64>;
using Tile64x160 = cute::Shape<cute::_64, cute::Int<160>, cute::_64>;
using Tile64x192 = cute::Shape<cute::_64, cute::Int<192>, cute::_64>;
using Tile128x96 = cute::Shape<cute::_128, cute::Int<96>, cute::_64>;
using Tile256x128 = cute::Shape<cute::_256, cute::_128, cute::_64>;
using Tile128x192 = cute::Shape<cute::_128, cute::_192, cute::_64>;
using Tile128x144 = cute::Shape<cute::_128, cute::Int<144>, cute::_64>;
using Tile128x160 = cute::Shape<cute::_128, cute::Int<160>, cute::_64>;  // 1496 / 160: 10 columns, 120 tiles at m = 1500
using Tile128x320 = cute::Shape<cute::_128, cute::Int<320>, cute::_64>;  // 5000 / 320: 16 columns, 112 tiles at m = 777 (two 64x160 atoms)
using Tile128x288 = cute::Shape<cute::_128, cute::Int<288>, cute::_64>;  // 3000 / 288: 11 columns, 264 tiles at m = 3000, two waves (two 64x144 atoms)
using Tile128x176 = cute::Shape<cute::_128, cute::Int<176>, cute::_64>;  // 1400 / 176: 8 columns, 120 tiles at m = 1800
using Tile128x224 = cute::Shape<cute::_128, cute::Int<224>, cute::_64>;  // 1304 / 224: 6 columns, 108 tiles at m = 2058 on 2x1 clusters

// Tile schedulers.
// CUTLASS 4.2's stream-K scheduler does not compile with its griddepcontrol (the launch seam's
// Dependent): its is_last_tile, a const method, hands a member to a non-const reference (fixed
// upstream, NVIDIA/cutlass#2686). StreamK is the same scheduler with is_last_tile asking a copy.
template <class TileShape, class ClusterShape>
struct StreamKFixed : cutlass::gemm::kernel::detail::PersistentTileSchedulerSm90StreamK<TileShape, ClusterShape> {
  using Base = cutlass::gemm::kernel::detail::PersistentTileSchedulerSm90StreamK<TileShape, ClusterShape>;
  using Base::Base;
  CUTLASS_DEVICE bool is_last_tile(typename Base::WorkTileInfo work, uint32_t advance_count = 1) const {
    if (this->continue_current_work(work)) return false;  // work: a copy, as CUTLASS's
    Base next = *this;
    next.advance_to_next_work(advance_count);
    return !next.get_current_work().is_valid();
  }
};
struct StreamK {};  // the tag GemmUniversal takes; the selector below maps it to StreamKFixed
}  // namespace gemm
namespace cutlass::gemm::kernel::detail {
template <class TileShape, class ClusterShape, uint32_t Stages>
struct TileSchedulerSelector<::gemm::StreamK, arch::Sm90, TileShape, ClusterShape, Stages> {
  using Scheduler = ::gemm::StreamKFixed<TileShape, ClusterShape>;
};
}  // namespace cutlass::gemm::kernel::detail
namespace gemm {
using DataParallel = cutlass::gemm::PersistentScheduler;

// Epilogues.
struct TmaEpilogue {  // accumulators -> shared memory -> TMA store
  template <class S> using Schedule = typename S::TmaEpilogue;
};
struct DirectEpilogue {  // accumulators -> registers -> global stores, no shared memory
  template <class S> using Schedule = cutlass::epilogue::NoSmemWarpSpecialized;
};

// Raster of the persistent scheduler's tiles: host-side arguments of the launch, given its grid
// of output tiles (the kernel's M and N over the tile's, and the cluster's extent in each).
struct TileGrid {
  int tiles_m, tiles_n, cluster_m, cluster_n;
};
struct Swizzled {  // tiles walked in groups of kSwizzle along the shorter side (L2 reuse of A and B)
  static constexpr int kSwizzle = 8;
  template <class A> static void apply(A& scheduler, TileGrid) {
    scheduler.max_swizzle_size = kSwizzle;
    using Order = decltype(scheduler.raster_order);
    scheduler.raster_order = Order::Heuristic;
  }
};
// The base's: Swizzled's walk with the largest swizzle (8, 4, 2, 1) that launches no tile the
// output does not need. CUTLASS's persistent scheduler rounds the grid's rows and columns up to a
// multiple of the swizzle it takes (times the cluster's extent) and runs each padded tile's whole
// k loop: with Swizzled's 8, 280 tiles become 320 at m = 777, n = 5000 and 144 become 256 at
// m = n = 1500 (ncu's wgmma counts match the rule at ten points). Against Swizzled, H100: the same
// where nothing is padded (8 is kept: sq4k, the m = 3000 rows), 0.617 -> 0.774 of cuBLAS at
// m = n = 1500 and 0.561 -> 0.830 at m = 1200, n = 2000 (docs/benchmarks.md, "The eighth session").
// A cap of 2 where the grid fits the SMs (one wave) was measured against it on the H200 (the
// twentieth session, 17 shapes): within 1% at 14, 1.5% faster at one, 2.8% and 5.8% slower at two.
struct Fitted {
  static int taken(TileGrid g, int max_swizzle) {  // the swizzle the scheduler takes, as Params::initialize does
    using Params = cutlass::gemm::kernel::detail::PersistentTileSchedulerSm90Params;
    return 1 << Params::get_log_swizzle_size(cutlass::round_up(g.tiles_m, g.cluster_m),
                                             cutlass::round_up(g.tiles_n, g.cluster_n), max_swizzle);
  }
  static long launched(TileGrid g, int max_swizzle) {  // the tiles it launches, padded ones included
    const int swizzle = taken(g, max_swizzle);
    return long(cutlass::round_up(g.tiles_m, swizzle * g.cluster_m)) * cutlass::round_up(g.tiles_n, swizzle * g.cluster_n);
  }
  static int swizzle(TileGrid g) {
    int s = Swizzled::kSwizzle;
    while (s > 1 && launched(g, s) > launched(g, 1)) s /= 2;
    return s;
  }
  static int walked(TileGrid g) { return taken(g, swizzle(g)); }  // 1: the grid walked unswizzled
  template <class A> static void apply(A& scheduler, TileGrid g) {
    scheduler.max_swizzle_size = swizzle(g);
    using Order = decltype(scheduler.raster_order);
    scheduler.raster_order = Order::Heuristic;
  }
};
struct RowByRow {  // one row of tiles after another, no swizzle
  template <class A> static void apply(A& scheduler, TileGrid) {
    scheduler.max_swizzle_size = 1;
    using Order = decltype(scheduler.raster_order);
    scheduler.raster_order = Order::AlongN;
  }
};

}  // namespace gemm
