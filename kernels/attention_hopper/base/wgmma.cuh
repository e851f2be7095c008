// Warpgroup MMA (wgmma, sm_90a) in raw PTX: shared-memory matrix descriptors, the
// asynchronous MMAs this kernel issues, and the fence/commit/wait around them.
//
// Accumulators: a warpgroup computes a 64 x N tile; warp w of the group holds rows
// 16w..16w+15, laid out as mma.sync's m16n8 C fragments side by side: d[4j + 2h + e] is
// row lane/4 + 8h, column 8j + 2*(lane%4) + e.
#pragma once
#include <cstdint>
#include "base/elem.cuh"

// A shared-memory matrix descriptor (the PTX ISA's "Matrix Descriptor Format"): bits 0-13
// the start address, 16-29 the leading dimension byte offset (LBO), 32-45 the stride
// dimension byte offset (SBO), each >> 4; 49-51 the base offset (0: every tile starts on
// 1024 bytes); 62-63 the swizzle mode. What LBO and SBO mean depends on the swizzle mode and
// on the operand's major-ness: the layout that owns the tile says (base/layout.cuh).
constexpr uint32_t kSmemDescNone = 0, kSmemDesc128B = 1;  // (64B = 2, 32B = 3: not used)
__device__ __forceinline__ uint64_t smem_desc(uint32_t addr, uint32_t lbo, uint32_t sbo,
                                              uint32_t mode) {
  return ((addr & 0x3FFFFu) >> 4) | (uint64_t((lbo & 0x3FFFFu) >> 4) << 16) |
         (uint64_t((sbo & 0x3FFFFu) >> 4) << 32) | (uint64_t(mode) << 62);
}

__device__ __forceinline__ void wgmma_fence() {  // registers written before this are visible
  asm volatile("wgmma.fence.sync.aligned;" ::: "memory");
}
__device__ __forceinline__ void wgmma_commit() {
  asm volatile("wgmma.commit_group.sync.aligned;" ::: "memory");
}
template <int kPending>  // wait until at most kPending committed groups are still running
__device__ __forceinline__ void wgmma_wait() {
  asm volatile("wgmma.wait_group.sync.aligned %0;" ::"n"(kPending) : "memory");
}
// Tell the compiler the MMA wrote these registers (it cannot see the asynchronous writes).
template <int N>
__device__ __forceinline__ void fence_registers(float (&d)[N]) {
#pragma unroll
  for (int i = 0; i < N; ++i) asm volatile("" : "+f"(d[i])::"memory");
}

#define ABLATE_F8(i) "+f"(d[i]), "+f"(d[i + 1]), "+f"(d[i + 2]), "+f"(d[i + 3]), \
    "+f"(d[i + 4]), "+f"(d[i + 5]), "+f"(d[i + 6]), "+f"(d[i + 7])

// The accumulator operands %0 .. %(N/2 - 1) of an m64nNk16 wgmma, as the asm text names them.
#define ABLATE_D32 "%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, " \
    "%16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31"
#define ABLATE_D64 ABLATE_D32 ", %32, %33, %34, %35, %36, %37, %38, %39, %40, %41, %42, %43, " \
    "%44, %45, %46, %47, %48, %49, %50, %51, %52, %53, %54, %55, %56, %57, %58, %59, %60, " \
    "%61, %62, %63"

// d (64 x N, FP32) (+)= A (64 x 16, E, shared, K-major) * B (16 x N, E, shared, K-major)
template <int N, class E> __device__ void wgmma_ss(float (&d)[N / 2], uint64_t a, uint64_t b, int accumulate);
// d (64 x N, FP32) += A (64 x 16, E registers) * B (16 x N, E, shared, MN-major)
template <int N, class E> __device__ void wgmma_rs(float (&d)[N / 2], const uint32_t (&a)[4], uint64_t b);

// The four instructions of element type E, whose PTX type is TYPE ("f16", "bf16"): one text
// for both, so the two cannot drift apart (the FP16 ones are, character for character, those
// the kernel had before BF16 came).
#define ABLATE_WGMMA(E, TYPE)                                                                   \
  template <>                                                                                    \
  __device__ __forceinline__ void wgmma_ss<64, E>(float (&d)[32], uint64_t a, uint64_t b,       \
                                                  int accumulate) {                              \
    asm volatile(                                                                                \
        "{\n .reg .pred p;\n setp.ne.b32 p, %34, 0;\n"                                           \
        "wgmma.mma_async.sync.aligned.m64n64k16.f32." TYPE "." TYPE " {"                         \
        ABLATE_D32                                                                               \
        "}, %32, %33, p, 1, 1, 0, 0;\n}"                                                         \
        : ABLATE_F8(0), ABLATE_F8(8), ABLATE_F8(16), ABLATE_F8(24)                               \
        : "l"(a), "l"(b), "r"(accumulate));                                                      \
  }                                                                                              \
  template <>                                                                                    \
  __device__ __forceinline__ void wgmma_rs<64, E>(float (&d)[32], const uint32_t (&a)[4],       \
                                                  uint64_t b) {                                  \
    asm volatile(                                                                                \
        "{\n .reg .pred p;\n setp.ne.b32 p, 1, 0;\n"                                            \
        "wgmma.mma_async.sync.aligned.m64n64k16.f32." TYPE "." TYPE " {"                         \
        ABLATE_D32                                                                               \
        "}, {%32, %33, %34, %35}, %36, p, 1, 1, 1;\n}"                                           \
        : ABLATE_F8(0), ABLATE_F8(8), ABLATE_F8(16), ABLATE_F8(24)                               \
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(b));                                   \
  }                                                                                              \
  template <>                                                                                    \
  __device__ __forceinline__ void wgmma_ss<128, E>(float (&d)[64], uint64_t a, uint64_t b,      \
                                                   int accumulate) {                             \
    asm volatile(                                                                                \
        "{\n .reg .pred p;\n setp.ne.b32 p, %66, 0;\n"                                           \
        "wgmma.mma_async.sync.aligned.m64n128k16.f32." TYPE "." TYPE " {"                        \
        ABLATE_D64                                                                               \
        "}, %64, %65, p, 1, 1, 0, 0;\n}"                                                         \
        : ABLATE_F8(0), ABLATE_F8(8), ABLATE_F8(16), ABLATE_F8(24), ABLATE_F8(32), ABLATE_F8(40), \
          ABLATE_F8(48), ABLATE_F8(56)                                                           \
        : "l"(a), "l"(b), "r"(accumulate));                                                      \
  }                                                                                              \
  template <>                                                                                    \
  __device__ __forceinline__ void wgmma_rs<128, E>(float (&d)[64], const uint32_t (&a)[4],      \
                                                   uint64_t b) {                                 \
    asm volatile(                                                                                \
        "{\n .reg .pred p;\n setp.ne.b32 p, 1, 0;\n"                                            \
        "wgmma.mma_async.sync.aligned.m64n128k16.f32." TYPE "." TYPE " {"                        \
        ABLATE_D64                                                                               \
        "}, {%64, %65, %66, %67}, %68, p, 1, 1, 1;\n}"                                           \
        : ABLATE_F8(0), ABLATE_F8(8), ABLATE_F8(16), ABLATE_F8(24), ABLATE_F8(32), ABLATE_F8(40), \
          ABLATE_F8(48), ABLATE_F8(56)                                                           \
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(b));                                   \
  }

ABLATE_WGMMA(Fp16, "f16")
ABLATE_WGMMA(Bf16, "bf16")
#undef ABLATE_WGMMA
#undef ABLATE_F8
#undef ABLATE_D32
#undef ABLATE_D64
