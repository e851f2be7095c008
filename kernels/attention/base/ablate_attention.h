// C ABI of the attention kernel library. The Python side loads it with ctypes,
// so nothing here needs PyTorch (or any C++) headers.
#pragma once
#ifdef __cplusplus
extern "C" {
#endif

// O = softmax(scale * Q K^T [+ causal mask]) V for FP16 tensors laid out (B, H, S, D),
// contiguous. D must be 64 or 128. Returns a cudaError_t as an int: cudaErrorInvalidValue
// (1) without launching for bad arguments (null or non-16-byte-aligned pointers,
// unsupported D, non-positive B, H or S, B*H over 65535, a scale that is not finite and
// positive), else the launch's own error.
// `stream` is a cudaStream_t (NULL for the legacy default stream).
int ablate_attention_fwd(const void* q, const void* k, const void* v, void* o,
                         int B, int H, int S, int D, int causal, float scale,
                         void* stream);

// The same for the element type `dtype` of Q, K, V and O: ABLATE_ATTENTION_FP16 (what
// ablate_attention_fwd computes) or ABLATE_ATTENTION_BF16; any other value is
// cudaErrorInvalidValue. A kernel library that exports only ablate_attention_fwd is FP16 only.
#define ABLATE_ATTENTION_FP16 0
#define ABLATE_ATTENTION_BF16 1
int ablate_attention_fwd_dtype(const void* q, const void* k, const void* v, void* o,
                               int B, int H, int S, int D, int causal, float scale,
                               int dtype, void* stream);

// JSON describing what was compiled into this library: the pathologies and seams it was
// built with, and per head dim and element type the tile shape, warps, stages and shared-memory bytes.
const char* ablate_variant_info(void);

#ifdef __cplusplus
}
#endif
