"""ctypes wrapper over one variant's shared library (C ABI: kernels/base/ablate_attention.h).

Importing this module needs no torch: `info()` works on a machine without a GPU, and
`forward` imports torch only when called.
"""
import ctypes
import json
import math
from pathlib import Path

# Names of the cudaError_t values a launch or a faulting kernel can return
# (from the CUDA runtime's driver_types.h; the values are stable across versions).
CUDA_ERRORS = {
    0: "cudaSuccess",
    1: "cudaErrorInvalidValue",
    2: "cudaErrorMemoryAllocation",
    3: "cudaErrorInitializationError",
    4: "cudaErrorCudartUnloading",
    9: "cudaErrorInvalidConfiguration",
    35: "cudaErrorInsufficientDriver",
    98: "cudaErrorInvalidDeviceFunction",
    100: "cudaErrorNoDevice",
    101: "cudaErrorInvalidDevice",
    200: "cudaErrorInvalidKernelImage",
    209: "cudaErrorNoKernelImageForDevice",
    218: "cudaErrorInvalidPtx",
    222: "cudaErrorUnsupportedPtxVersion",
    400: "cudaErrorInvalidResourceHandle",
    700: "cudaErrorIllegalAddress",
    701: "cudaErrorLaunchOutOfResources",
    702: "cudaErrorLaunchTimeout",
    710: "cudaErrorAssert",
    714: "cudaErrorHardwareStackError",
    715: "cudaErrorIllegalInstruction",
    716: "cudaErrorMisalignedAddress",
    717: "cudaErrorInvalidAddressSpace",
    718: "cudaErrorInvalidPc",
    719: "cudaErrorLaunchFailure",
    900: "cudaErrorStreamCaptureUnsupported",
    901: "cudaErrorStreamCaptureInvalidated",
    999: "cudaErrorUnknown",
}


def cuda_error_name(code):
    return CUDA_ERRORS.get(code, f"cudaError {code}")


class KernelError(RuntimeError):
    """The library returned a non-zero cudaError_t; `.code` holds it."""

    def __init__(self, code, path):
        self.code = code
        super().__init__(f"ablate_attention_fwd returned {cuda_error_name(code)} ({code}) in {path}")


class Kernel:
    def __init__(self, path):
        self.path = Path(path)
        if not self.path.is_file():
            raise FileNotFoundError(f"kernel library not found: {self.path}")
        self._lib = ctypes.CDLL(str(self.path))
        fwd = self._lib.ablate_attention_fwd
        fwd.restype = ctypes.c_int
        fwd.argtypes = [ctypes.c_void_p] * 4 + [ctypes.c_int] * 5 + [ctypes.c_float, ctypes.c_void_p]
        self._fwd = fwd
        self._lib.ablate_variant_info.restype = ctypes.c_char_p
        self._lib.ablate_variant_info.argtypes = []

    def info(self):
        """What was compiled into the library (pathologies, seams, tile configs), as a dict."""
        return json.loads(self._lib.ablate_variant_info().decode())

    def forward(self, q, k, v, o, causal, scale=None):
        """o = attention(q, k, v) on the current CUDA stream; all FP16 (B, H, S, D) contiguous
        CUDA tensors of one shape on one device. Raises KernelError on a non-zero return."""
        import torch

        for name, t in (("q", q), ("k", k), ("v", v), ("o", o)):
            if not isinstance(t, torch.Tensor):
                raise TypeError(f"{name} must be a torch.Tensor, got {type(t).__name__}")
            if t.dtype != torch.float16:
                raise TypeError(f"{name} must be float16, got {t.dtype}")
            if t.dim() != 4:
                raise ValueError(f"{name} must be (B, H, S, D), got shape {tuple(t.shape)}")
            if t.shape != q.shape:
                raise ValueError(f"{name} has shape {tuple(t.shape)}, q has {tuple(q.shape)}")
            if not t.is_contiguous():
                raise ValueError(f"{name} must be contiguous")
            if t.device.type != "cuda" or t.device != q.device:
                raise ValueError(f"{name} is on {t.device}; all must be on one CUDA device, q is on {q.device}")
        B, H, S, D = q.shape
        if scale is None:
            scale = 1.0 / math.sqrt(D)
        with torch.cuda.device(q.device):
            stream = torch.cuda.current_stream().cuda_stream
            err = self._fwd(q.data_ptr(), k.data_ptr(), v.data_ptr(), o.data_ptr(),
                            B, H, S, D, int(bool(causal)), float(scale), stream)
        if err != 0:
            raise KernelError(err, self.path)
