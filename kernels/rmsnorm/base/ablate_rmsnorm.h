// C ABI of the RMSNorm kernel library. The Python side loads it with ctypes,
// so nothing here needs PyTorch (or any C++) headers.
#pragma once
#ifdef __cplusplus
extern "C" {
#endif

// y[r, :] = x[r, :] / sqrt(mean(x[r, :]^2) + eps) * w for every row r < rows: x and y are
// (rows, hidden) row-major contiguous, w is (hidden), all three of one dtype (0 = FP16,
// 1 = BF16); the statistics and the scaling are computed in FP32 and y is rounded once.
// hidden must be a multiple of 8 in [8, 16384]; rows in [1, 2^31 - 1]; y must not overlap
// x or w (they are read through the non-coherent cache).
// Returns a cudaError_t as an int: cudaErrorInvalidValue (1) without launching anything for
// bad arguments (null or non-16-byte-aligned pointers, rows or hidden out of range, hidden
// not a multiple of 8, an unknown dtype, eps not finite or negative), else the launch's own
// error. `stream` is a cudaStream_t (NULL for the legacy default stream).
int ablate_rmsnorm_fwd(const void* x, const void* w, void* y, long long rows, int hidden,
                       int dtype, float eps, void* stream);

// JSON describing what was compiled into this library, made without any CUDA call: the
// pathologies and seams it was built with, and per kernel instance (one per dtype and hidden
// bucket) its name, dtype, largest hidden, threads per block, rows per block, threads per
// row, elements per thread and dynamic shared-memory bytes.
const char* ablate_variant_info(void);

#ifdef __cplusplus
}
#endif
