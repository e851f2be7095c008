"""ctypes wrapper over one variant's shared library.

A kernel library exports `const char* ablate_variant_info(void)` (JSON: the pathologies,
seams and configs compiled in, made without any CUDA call; a plain kernel's spec says instead,
in CONFIGS: `variant_info`) and the kernel's own function, whose name and ctypes signature
its spec gives (spec.SYMBOL, spec.ARGTYPES: a thin spec's are read from the function's
prototype, ablate/build/abi.py; it returns a cudaError_t as int, or nothing: a void
launcher's errors then surface at the next synchronization). Importing this module needs no
torch: `info()` works on a machine
without a GPU, and a call imports torch only for the current stream.
"""
import ctypes
import json
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


def variant_info(lib, spec, pathologies=()) -> dict:
    """The library's own `ablate_variant_info()` where it exports one; else, for a kernel
    written without ablate's header (a plain kernel), what its spec says instead:
    `{"pathologies": [the variant's], "seams": {}, "configs": spec.CONFIGS}`. ValueError when
    neither says. A Triton variant's manifest carries its own (ablate/build/triton_aot.py)."""
    from ablate.build import cute_aot, triton_aot

    if triton_aot.is_manifest(lib):
        return triton_aot.info(lib)
    if cute_aot.is_manifest(lib):
        return cute_aot.info(lib)
    kernel = Kernel(lib)
    if kernel.has_info:
        return kernel.info()
    configs = getattr(spec, "CONFIGS", None)
    if not configs:
        raise ValueError(f"{lib} does not export ablate_variant_info and the kernel's spec has no "
                         "CONFIGS: one of them must list its configs ({name, threads, smem_bytes})")
    return {"pathologies": list(pathologies), "seams": {}, "configs": [dict(c) for c in configs]}


def load(path, spec):
    """The built variant at `path`, bound to its spec, to run: a Kernel (a CUDA plugin's shared
    library), a TritonKernel (a Triton plugin's manifest: ablate/build/triton_launch.py) or a
    CuteKernel (a CuTe DSL plugin's: ablate/build/cute_launch.py);
    both are called as kernel(tensors, shape) and kernel.launch(pointers, shape, stream)."""
    from ablate.build import cute_aot, triton_aot

    if triton_aot.is_manifest(path):
        from ablate.build.triton_launch import TritonKernel

        return TritonKernel(path, spec)
    if cute_aot.is_manifest(path):
        from ablate.build.cute_launch import CuteKernel

        return CuteKernel(path, spec)
    return Kernel(path, spec)


def cuda_error_name(code):
    return CUDA_ERRORS.get(code, f"cudaError {code}")


class KernelError(RuntimeError):
    """The library returned a non-zero cudaError_t; `.code` holds it."""

    def __init__(self, code, symbol, path):
        self.code = code
        super().__init__(f"{symbol} returned {cuda_error_name(code)} ({code}) in {path}")


class Kernel:
    """One built library. `Kernel(path)` reads its info; `Kernel(path, spec)` also binds the
    kernel's function, so that `kernel(tensors, shape)` runs it."""

    def __init__(self, path, spec=None):
        self.path = Path(path)
        if not self.path.is_file():
            raise FileNotFoundError(f"kernel library not found: {self.path}")
        self._lib = ctypes.CDLL(str(self.path))
        self._info = getattr(self._lib, "ablate_variant_info", None)  # a plain kernel has none
        if self._info is not None:
            self._info.restype = ctypes.c_char_p
            self._info.argtypes = []
        self.spec = spec
        if spec is not None:
            self._fn = getattr(self._lib, spec.SYMBOL)
            self._fn.restype = getattr(spec, "RESTYPE", ctypes.c_int)
            self._fn.argtypes = list(spec.ARGTYPES)

    @property
    def has_info(self) -> bool:
        """Whether the library exports ablate_variant_info."""
        return self._info is not None

    def info(self):
        """What was compiled into the library (pathologies, seams, configs), as a dict."""
        if self._info is None:
            raise AttributeError(f"{self.path} does not export ablate_variant_info")
        return json.loads(self._info().decode())

    def launch(self, pointers, shape, stream=None):
        """Run the kernel on raw device addresses ({name: int}); the cudaError_t it returns."""
        return self._fn(*self.spec.arguments(pointers, shape, stream)) or 0

    def __call__(self, tensors, shape):
        """Run the kernel on torch tensors ({name: tensor}, as spec.make_inputs makes them) on
        the current CUDA stream of their device. Raises KernelError on a non-zero return."""
        import torch

        device = next(iter(tensors.values())).device
        with torch.cuda.device(device):
            stream = torch.cuda.current_stream().cuda_stream
            err = self.launch({name: t.data_ptr() for name, t in tensors.items()}, shape, stream)
        if err != 0:
            raise KernelError(err, self.spec.SYMBOL, self.path)
