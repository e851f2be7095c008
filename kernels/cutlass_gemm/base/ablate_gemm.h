// The CUTLASS GEMM plugin's C ABI: d = a b^T, a (m, k) and b (n, k) row-major (both K-major,
// b as an nn.Linear weight), d (m, n) row-major, all FP16 or all BF16, FP32 accumulation.
// Returns a cudaError_t: cudaErrorInvalidValue for a shape the kernel cannot run (n or k not
// a multiple of 8: TMA and the 16-byte vector loads need 16-byte aligned rows).
#pragma once
#ifdef __cplusplus
extern "C" {
#endif

int ablate_cutlass_gemm(const void* a, const void* b, void* d, int m, int n, int k, int dtype,
                        void* stream);

const char* ablate_variant_info(void);

#ifdef __cplusplus
}
#endif
