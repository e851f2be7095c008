"""A built Triton variant on the GPU: the cubins of its manifest (ablate/build/triton_aot.py)
loaded through Triton's own driver and launched as Triton's JIT would launch them.

`TritonKernel(manifest, spec)(tensors, shape)` is what `ablate.build.library.Kernel` is for a
CUDA library: the gate, the timing (CUDA graphs: a Triton launch is one cuLaunchKernelEx on
the current stream, which a capture records), the profile driver and the sanitizer call it
alike. Per call, the arguments (spec.args) go through the kernel function's own binder with
the variant's meta-parameters; the instance whose specialization they take is launched, on
the grid spec.grid(shape, meta). Arguments that take none of the built specializations (an
unaligned pointer, a dimension not a multiple of 16 where the instances assumed one) are an
error naming the shape: an AOT kernel never runs on arguments it was not compiled for.

A kernel that needs global scratch memory (tl.make_tensor_descriptor on the device) gets it
from torch's allocator (triton.set_allocator), which a graph capture takes from its own pool.
"""
import json
from pathlib import Path

from ablate.build import triton_aot


def _scratch(size, alignment, stream):
    import torch

    return torch.empty(size, dtype=torch.int8, device="cuda")


class Pointer:
    """A device address as Triton's binder reads a tensor (its dtype, its address; its dims and
    contiguous strides, for a host-side descriptor over it): the sanitizer's driver launches on
    raw allocations, without torch's tensors."""

    def __init__(self, address, dtype, shape=()):
        self.address, self.dtype, self.shape = int(address), dtype, tuple(int(d) for d in shape)

    def data_ptr(self):
        return self.address

    def stride(self):
        strides, step = [], 1
        for dim in reversed(self.shape):
            strides.insert(0, step)
            step *= dim
        return tuple(strides)


class TritonKernel:
    def __init__(self, path, spec=None):
        self.path = Path(path)
        if not self.path.is_file():
            raise FileNotFoundError(f"Triton variant manifest not found: {self.path}")
        self.manifest = json.loads(self.path.read_text())
        self.spec = spec
        self.meta = self.manifest["meta"]
        self._compiled = {}  # instance -> CompiledKernel
        self._fn = self._binder = None

    @property
    def has_info(self):
        return True

    def info(self):
        return self.manifest["info"]

    def _bind(self):
        if self._fn is None:
            self._fn = triton_aot.load_function(str(self.spec.folder), self.manifest["function"])
            _, _, self._binder = triton_aot.binder_of(self._fn, int(self.manifest["capability"]))
        return self._fn, self._binder

    def _kernel(self, name):
        if name not in self._compiled:
            from triton.compiler import ASTSource, CompiledKernel

            inst = self.manifest["instances"][name]
            constexprs = {tuple(k): v for k, v in inst["constexprs"]}
            src = ASTSource(self._fn, inst["signature"], constexprs)
            group = {key: str(self.path.parent / f) for key, f in inst["files"].items()
                     if key.endswith((".json", ".cubin"))}
            self._compiled[name] = CompiledKernel(src, group, inst["hash"])
        return self._compiled[name]

    def meta_of(self, args):
        """The variant's meta-parameters with its @triton.heuristics' values for `args`."""
        return triton_aot.full_meta(str(self.spec.folder), self.manifest["function"], args, self.meta)

    def instance(self, args, meta=None):
        """(instance name, bound args) of the arguments `args` ({parameter: value}); `meta`: their
        meta_of, where the caller has worked it out already."""
        fn, binder = self._bind()
        bound, spec_list, _ = triton_aot.specialization(fn, binder, args, self.meta_of(args) if meta is None else meta)
        for name, inst in self.manifest["instances"].items():
            if inst["specialization"] == spec_list:
                return name, bound
        runtime = triton_aot.runtime_part(spec_list, fn)
        raise ValueError(f"no built instance of {fn.__name__} takes these arguments' specialization {runtime} "
                         f"(instances: {', '.join(self.manifest['instances'])}; spec.INSTANCES must hold a "
                         "shape of each specialization the shapes need)")

    def launched(self, args):
        """(`args` as the spec's launch passes them, the host-made descriptors added (spec.descriptors),
        their meta_of)."""
        meta = self.meta_of(args)
        return triton_aot.with_descriptors(self.spec, args, meta), meta

    def launch_args(self, args, shape, stream):
        args, meta = self.launched(args)
        return self.launch_grid(args, self.spec.grid(shape, meta), stream, meta)

    def launch_grid(self, args, grid, stream, meta=None):
        """Run on `args` ({parameter: value}, none of the variant's meta-parameters) over `grid`
        (1 to 3 dimensions) on `stream`: the spec's launch, or a library's own call in a model
        (ablate/gpu/swap.py). `meta`: meta_of(args), where the caller has it (else worked out here)."""
        import triton

        triton.set_allocator(_scratch)  # a context variable: set where the launch runs
        name, bound = self.instance(args, meta)
        kernel = self._kernel(name)
        grid = tuple(int(g) for g in grid) + (1, 1)
        kernel.run(grid[0], grid[1], grid[2], stream, kernel.function, kernel.packed_metadata, None, None, None,
                   *bound.values())
        return 0

    def launch(self, pointers, shape, stream=None):
        """Run on raw device addresses ({tensor name: int}), as the sanitizer's driver does."""
        import torch

        fake = {n: Pointer(p, getattr(torch, self.spec.tensors[n].dtype_name(shape)), self.spec.tensors[n].size(shape))
                for n, p in pointers.items()}
        return self.launch_args(self.spec.args(fake, shape), shape, stream or 0)

    def __call__(self, tensors, shape):
        """Run on torch tensors on the current CUDA stream of their device."""
        import torch

        device = next(iter(tensors.values())).device
        self._bind()
        with torch.cuda.device(device):
            self.launch_args(self.spec.args(tensors, shape), shape, torch.cuda.current_stream().cuda_stream)
