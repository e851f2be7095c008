"""CUDA green contexts through the driver API (libcuda, by ctypes): a stream whose kernels run
on a part of the GPU's SMs, for the generic pathology half_sms (`sm_fraction:` in its yaml).

The kernel's C ABI already takes a stream, so the variant is the base's library launched on
such a stream (`OnStream`); the timing captures and replays its graphs there
(ablate/gpu/timing.py). Steps (CUDA driver API, "Green Contexts", CUDA 12.4+):
cuDeviceGetDevResource (the device's SMs) -> cuDevSmResourceSplitByCount (one group of at
least N SMs, which the driver aligns to its SM granularity) -> cuDevResourceGenerateDesc ->
cuGreenCtxCreate -> cuGreenCtxStreamCreate.

Importing this module loads nothing: `driver()` opens libcuda on first use, and
`unsupported()` says in one line why a machine cannot (no libcuda, a driver older than
green contexts).
"""
import ctypes
import functools

CU_DEV_RESOURCE_TYPE_SM = 1
CU_GREEN_CTX_DEFAULT_STREAM = 0x1
CU_STREAM_NON_BLOCKING = 0x1
# CUdevResource (cuda.h, RESOURCE_ABI_VERSION 1): int type; 92 bytes of padding; a union of 48
# bytes whose CUdevSmResource is {smCount, minSmPartitionSize, smCoscheduledAlignment} (the
# last two since CUDA 12.8). 144 bytes; a buffer of 512 leaves room for a later ABI's growth,
# and every call here passes one resource, never an array.
RESOURCE_BYTES = 512
SM_OFFSET = 96
FUNCTIONS = {  # name: argtypes (each returns CUresult, an int)
    "cuInit": [ctypes.c_uint],
    "cuDeviceGet": [ctypes.POINTER(ctypes.c_int), ctypes.c_int],
    "cuDeviceGetDevResource": [ctypes.c_int, ctypes.c_void_p, ctypes.c_int],
    "cuDevSmResourceSplitByCount": [ctypes.c_void_p, ctypes.POINTER(ctypes.c_uint), ctypes.c_void_p,
                                    ctypes.c_void_p, ctypes.c_uint, ctypes.c_uint],
    "cuDevResourceGenerateDesc": [ctypes.POINTER(ctypes.c_void_p), ctypes.c_void_p, ctypes.c_uint],
    "cuGreenCtxCreate": [ctypes.POINTER(ctypes.c_void_p), ctypes.c_void_p, ctypes.c_int, ctypes.c_uint],
    "cuGreenCtxStreamCreate": [ctypes.POINTER(ctypes.c_void_p), ctypes.c_void_p, ctypes.c_uint, ctypes.c_int],
    "cuGetErrorName": [ctypes.c_int, ctypes.POINTER(ctypes.c_char_p)],
}


class GreenContextError(RuntimeError):
    """Green contexts are unavailable here, or a driver call failed (named, with its CUresult)."""


@functools.cache
def driver():
    """libcuda with the functions above bound (argtypes, restype int); GreenContextError when
    it cannot be opened or lacks one of them (a driver older than CUDA 12.4)."""
    try:
        lib = ctypes.CDLL("libcuda.so.1")
    except OSError as e:
        raise GreenContextError(f"libcuda cannot be loaded: {e}") from None
    for name, argtypes in FUNCTIONS.items():
        fn = getattr(lib, name, None)
        if fn is None:
            raise GreenContextError(f"the driver has no {name}: green contexts need a CUDA 12.4+ driver")
        fn.argtypes, fn.restype = argtypes, ctypes.c_int
    return lib


def unsupported() -> str | None:
    """Why this machine cannot make green contexts, in one line; None when it can."""
    try:
        driver()
    except GreenContextError as e:
        return str(e)
    return None


def _check(lib, result, what):
    if result != 0:
        name = ctypes.c_char_p()
        lib.cuGetErrorName(result, ctypes.byref(name))
        raise GreenContextError(f"{what} failed: {(name.value or b'?').decode()} ({result})")


def sm_fields(resource) -> dict:
    """{sm_count, min_partition, alignment} of an SM resource buffer (0 where the driver's
    ABI has no such field)."""
    count, minimum, align = (ctypes.c_uint * 3).from_buffer_copy(resource, SM_OFFSET)
    return {"sm_count": count, "min_partition": minimum, "alignment": align}


def wanted(total: int, fraction: float, min_partition: int = 0, alignment: int = 0) -> int:
    """The SMs to ask for: `fraction` of `total`, rounded down to the driver's alignment (it
    rounds a request up, and half must not become more than half), at least its minimum."""
    n = max(1, int(total * fraction))
    if alignment > 1:
        n = max(alignment, n // alignment * alignment)
    return max(n, min_partition or 1)


@functools.cache
def stream(device: int, fraction: float) -> tuple[int, int, int]:
    """(CUstream handle, its SMs, the device's SMs): a stream of a green context holding
    `fraction` of device `device`'s SMs, made once per process and kept (its context lives
    as long as the process). Call it with the device's primary context current (torch's, once
    it has touched the device). GreenContextError when it cannot be made."""
    lib = driver()
    _check(lib, lib.cuInit(0), "cuInit")
    dev = ctypes.c_int()
    _check(lib, lib.cuDeviceGet(ctypes.byref(dev), device), "cuDeviceGet")
    whole = ctypes.create_string_buffer(RESOURCE_BYTES)
    _check(lib, lib.cuDeviceGetDevResource(dev, whole, CU_DEV_RESOURCE_TYPE_SM), "cuDeviceGetDevResource")
    fields = sm_fields(whole)
    total = fields["sm_count"]
    part, rest = ctypes.create_string_buffer(RESOURCE_BYTES), ctypes.create_string_buffer(RESOURCE_BYTES)
    groups = ctypes.c_uint(1)
    _check(lib, lib.cuDevSmResourceSplitByCount(part, ctypes.byref(groups), whole, rest, 0,
                                                wanted(total, fraction, fields["min_partition"],
                                                       fields["alignment"])),
           "cuDevSmResourceSplitByCount")
    if groups.value != 1:
        raise GreenContextError(f"cuDevSmResourceSplitByCount made {groups.value} groups, not 1")
    count = sm_fields(part)["sm_count"]
    desc, ctx, handle = ctypes.c_void_p(), ctypes.c_void_p(), ctypes.c_void_p()
    _check(lib, lib.cuDevResourceGenerateDesc(ctypes.byref(desc), part, 1), "cuDevResourceGenerateDesc")
    _check(lib, lib.cuGreenCtxCreate(ctypes.byref(ctx), desc, dev, CU_GREEN_CTX_DEFAULT_STREAM), "cuGreenCtxCreate")
    _check(lib, lib.cuGreenCtxStreamCreate(ctypes.byref(handle), ctx, CU_STREAM_NON_BLOCKING, 0),
           "cuGreenCtxStreamCreate")
    return handle.value, count, total


class OnStream:
    """A kernel (ablate.build.library.Kernel) launched on another stream than the caller's
    current one, ordered after what the current stream has queued and before what it queues
    next, as a launch on the current stream would be. During a graph capture on that stream
    itself (timing.py captures such a candidate there) it launches as it is."""

    def __init__(self, kernel, torch_stream):
        self.kernel, self.stream = kernel, torch_stream

    def __getattr__(self, name):
        """The kernel's own (spec, path, launch, ...): the gate and the timing read them."""
        return getattr(self.kernel, name)

    def __call__(self, tensors, shape):
        import torch

        current = torch.cuda.current_stream()
        if current.cuda_stream == self.stream.cuda_stream:
            return self.kernel(tensors, shape)
        self.stream.wait_stream(current)
        with torch.cuda.stream(self.stream):
            self.kernel(tensors, shape)
        current.wait_stream(self.stream)
        return None


def on_green_stream(kernel, device: int, fraction: float):
    """(OnStream(kernel) on a green context of `fraction` of the SMs, {params}); the params
    say how many SMs it got of how many."""
    import torch

    handle, count, total = stream(device, fraction)
    ext = torch.cuda.ExternalStream(handle, device=torch.device("cuda", device))
    return OnStream(kernel, ext), {"sm_count": count, "sm_total": total, "sm_fraction": fraction}
