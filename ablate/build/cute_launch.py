"""A built CuTe DSL variant on the GPU: each instance's TVM-FFI object (ablate/build/cute_aot.py),
loaded by the DSL's own `cute.runtime.load_module`, called as the library calls what it compiled.

`CuteKernel(manifest, spec)(tensors, shape)` is what `ablate.build.library.Kernel` is for a
CUDA library: the gate, the timing, the profile driver and the sanitizer call it alike. Per
call the shape's instance (spec.instance_of: its STATIC fields and dtypes) is called with
spec.call_args(tensors, shape): torch tensors go to TVM-FFI as they are (DLPack), and the
kernel is launched on TVM-FFI's environment stream, which is torch's current stream, so a
CUDA graph capture records the launch and a green context's stream (half_sms) runs it. The
compiled function checks its arguments (device, dtype, rank, the STATIC dimensions) and
raises naming the one at fault; a shape no instance was compiled for is an error naming the
instances.

The host side of a call (TVM-FFI's conversion of the arguments, ~µs) is not timed: the timing
replays CUDA graphs of the launches (ablate/gpu/timing.py), which hold the kernels alone.
"""
import json
from pathlib import Path


class CuteKernel:
    def __init__(self, path, spec=None):
        self.path = Path(path)
        if not self.path.is_file():
            raise FileNotFoundError(f"CuTe DSL variant manifest not found: {self.path}")
        self.manifest = json.loads(self.path.read_text())
        self.spec = spec
        self._functions = {}  # instance -> its loaded TVM-FFI function
        self._instances = {}  # a shape, as JSON -> its instance

    @property
    def has_info(self):
        return True

    def info(self):
        return self.manifest["info"]

    def instance(self, shape) -> str:
        key = json.dumps(shape, sort_keys=True)
        if key not in self._instances:
            name = self.spec.instance_of(shape)
            if name not in self.manifest["instances"]:
                raise ValueError(f"no built instance of {self.manifest['function']} for shape {shape} "
                                 f"(instances: {', '.join(self.manifest['instances'])}; spec.INSTANCES must hold "
                                 "a shape of each STATIC fields' values and dtypes the shapes need)")
            self._instances[key] = name
        return self._instances[key]

    def function(self, name):
        """The instance's compiled function, loaded from its TVM-FFI object once."""
        if name not in self._functions:
            import cutlass.cute as cute

            obj = self.path.parent / self.manifest["instances"][name]["files"]["o"]
            self._functions[name] = cute.runtime.load_module(str(obj), enable_tvm_ffi=True)["func"]
        return self._functions[name]

    def __call__(self, tensors, shape):
        """Run on torch tensors on the current CUDA stream of their device."""
        import torch

        fn = self.function(self.instance(shape))
        device = next(iter(tensors.values())).device
        with torch.cuda.device(device):
            fn(*self.spec.call_args(tensors, shape))

    def launch(self, pointers, shape, stream=None):
        """Run on raw device addresses ({tensor name: int}), as the sanitizer's driver does: each
        becomes a torch tensor over that memory (__cuda_array_interface__, no copy)."""
        import torch

        tensors = {}
        for name, address in pointers.items():
            t = self.spec.tensors[name]
            dtype = getattr(torch, t.dtype_name(shape))
            size = torch.empty((), dtype=dtype).element_size()
            tensors[name] = torch.as_tensor(_Memory(address, t.size(shape), size), device="cuda").view(dtype)
        with torch.cuda.stream(torch.cuda.ExternalStream(stream)) if stream else torch.cuda.stream(None):
            self(tensors, shape)
        return 0


class _Memory:
    """Device memory as __cuda_array_interface__ describes it: integers of the element's width
    (torch views them as the dtype: the interface has no BF16)."""

    def __init__(self, address, dims, itemsize):
        typestr = {1: "|i1", 2: "<i2", 4: "<i4", 8: "<i8"}[itemsize]
        self.__cuda_array_interface__ = {"shape": tuple(dims), "typestr": typestr, "data": (int(address), False),
                                         "strides": None, "version": 2}
