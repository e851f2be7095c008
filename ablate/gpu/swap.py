"""The job's variant inside the model: the very library the kernel job timed, put where the
model launches its kernel, for the length of a `with`, and taken out again even when the
step raises.

Two ways in, by what the plugin is:

- **A Triton kernel named by module path** (`TRITON = "liger_kernel.ops.rms_norm:_rms_norm_
  forward_kernel"`): the library's function object is replaced, in every module that holds
  it (the library's own, and any that imported it by name), by a stand-in that launches the
  job's compiled variant (ablate/build/triton_launch.py's cubins) on the library's own call:
  its arguments bound by the function's parameter names, the variant's meta-parameters in
  place of the caller's (a pathology that sets BLOCK_SIZE runs its BLOCK_SIZE), the caller's
  grid evaluated with them. The library's Python around the launch (allocations, its choice
  of kernel) runs as it always does.
- **Any plugin** (a CUDA one's C ABI, or a Triton one): a torch custom op,
  `torch.ops.ablate.<plugin>`, built from the spec's TENSORS (`register`): its inputs are
  the `in` tensors, the `out` and `inout` tensors are mutated, and the last argument is the
  shape as JSON; it runs whichever library is active. A workload calls it where its model
  computes that kernel (ablate/workloads/llama.py's prefill makes it a layer of its model).

Either way each launch is counted and wrapped in a profiler range named `ablate::<plugin>`,
so that torch.profiler gives the kernel's device time in the step without matching kernel
names (ablate/gpu/insitu.py), and `launches` > 1 runs it that many times per call: the
calibrated 2x.
"""
import contextlib
import json
import sys

_active = {}  # plugin name: Active, while a `with active(...)` holds it
_ops = {}  # plugin name: its registered custom op


class Active:
    """The library a model's calls go to, how many times each runs, and how many calls came."""

    def __init__(self, plugin, kernel, launches=1):
        self.plugin, self.kernel, self.launches, self.calls = plugin, kernel, int(launches), 0

    @property
    def range_name(self):
        return f"ablate::{self.plugin.name}"

    def call(self, launch):
        """One call of the model's: `launch()` run `launches` times inside the profiler range."""
        import torch

        self.calls += 1
        with torch.profiler.record_function(self.range_name):
            for _ in range(self.launches):
                launch()


def is_library_triton(plugin) -> bool:
    """Whether the plugin names an installed package's @triton.jit function (the swap route)."""
    from ablate.build import triton_target

    target = getattr(plugin.spec, "TRITON", None)
    return target is not None and triton_target.split(target)[0] == "module"


# ---- a library's Triton function, replaced where the library launches it ----------------------

class Standin:
    """What the library's module holds in place of its function while a variant is active:
    `standin[grid](*args, **kwargs)` as the library calls its kernel."""

    def __init__(self, original, fn, plugin_name):
        self.original, self.fn, self.plugin_name = original, fn, plugin_name
        self.params = list(fn.arg_names)

    def __getitem__(self, grid):
        return lambda *args, **kwargs: self.run(grid, args, kwargs)

    def run(self, grid, args, kwargs):
        import torch

        now = _active[self.plugin_name]
        kernel = now.kernel
        call = {**dict(zip(self.params, args)), **{k: v for k, v in kwargs.items() if k in self.params}}
        meta = kernel.meta_of({k: v for k, v in call.items() if k not in kernel.meta})
        runtime = {k: v for k, v in call.items() if k not in meta}
        where = grid({**call, **meta}) if callable(grid) else grid
        where = (where,) if isinstance(where, int) else tuple(where)
        stream = torch.cuda.current_stream().cuda_stream if torch.cuda.is_available() else 0
        now.call(lambda: kernel.launch_grid(runtime, where, stream, meta))

    def __getattr__(self, name):  # anything else the library reads of its function (fn, cache_key, ...)
        return getattr(self.original, name)


def _holders(original):
    """[(module, attribute)] of every loaded module that holds `original` by name."""
    found = []
    for module in list(sys.modules.values()):
        try:
            items = list(vars(module).items())
        except TypeError:  # a module object without a __dict__
            continue
        found.extend((module, name) for name, value in items if value is original)
    return found


@contextlib.contextmanager
def _replaced(plugin):
    from ablate.build import triton_target

    original = triton_target.load(str(plugin.dir), plugin.spec.TRITON)
    standin = Standin(original, triton_target.unwrap(original), plugin.name)
    holders = _holders(original)
    for module, name in holders:
        setattr(module, name, standin)
    try:
        yield
    finally:
        for module, name in holders:
            setattr(module, name, original)


# ---- a torch custom op from the spec's TENSORS -------------------------------------------------

def schema(spec) -> str:
    """The op's schema: each tensor of TENSORS by name in order (`out` and `inout` ones
    mutated), then the shape as JSON: `(Tensor q, Tensor k, Tensor v, Tensor(a!) o, str shape) -> ()`."""
    args = [f"Tensor{'(' + chr(ord('a') + i) + '!)' if t.role != 'in' else ''} {name}"
            for i, (name, t) in enumerate(spec.tensors.items())]
    return f"({', '.join(args)}, str shape) -> ()"


def register(plugin) -> str:
    """`torch.ops.ablate.<plugin>` (once per process), running the active library; its name."""
    import torch

    if plugin.name in _ops:
        return f"ablate::{plugin.name}"
    names = list(plugin.spec.tensors)
    mutated = [n for n, t in plugin.spec.tensors.items() if t.role != "in"]

    def impl(*tensors_and_shape):
        *tensors, shape = tensors_and_shape
        now = _active.get(plugin.name)
        if now is None:
            raise RuntimeError(f"torch.ops.ablate.{plugin.name} was called outside an ablate job: no library "
                               f"of kernel {plugin.name} is active")
        tensors = dict(zip(names, tensors))
        shape = plugin.spec.validate_shape(json.loads(shape))
        now.call(lambda: now.kernel(tensors, shape))

    _ops[plugin.name] = torch.library.custom_op(f"ablate::{plugin.name}", impl, mutates_args=mutated,
                                                 schema=schema(plugin.spec))
    return f"ablate::{plugin.name}"


@contextlib.contextmanager
def active(plugin, kernel, launches=1):
    """Inside: every launch the model makes of the plugin's kernel runs `kernel` (a loaded
    library of the job: base or variant), `launches` times; yields the Active, whose `calls`
    counts them. The library's own function is back in place afterwards, even on an error."""
    now = Active(plugin, kernel, launches)
    before = _active.get(plugin.name)
    _active[plugin.name] = now
    try:
        with _replaced(plugin) if is_library_triton(plugin) else contextlib.nullcontext():
            yield now
    finally:
        if before is None:
            _active.pop(plugin.name, None)
        else:
            _active[plugin.name] = before
