"""A workload, named as its user has it: `pkg.module:function` (as spec.TRITON names a
kernel), a function that builds the model and its inputs once and returns what to time.

    def train(device="cuda", **options) -> {"step": ..., "reset": ..., "graphs": False}

- `step()`: one step (a training step, a prefill), returning its output (a tensor, or a
  tuple or dict of them: the loss, the last logits) so that base and variant can be compared;
- `reset()` (optional): puts back what a step changes (the weights, the optimizer's state),
  so that two steps from one state give the same output;
- `graphs` (optional, False): whether a step may be captured in a CUDA graph (static inputs,
  no host synchronization): then it is timed by graph replays, as kernels are;
- `reference()` (optional): the step computed without ablate's kernel (by the model's own
  layer), to check the kernel inside the model against it.

The shipped ones (ablate/workloads/llama.py) need no download: transformers configs with
random weights. `options` are the function's keyword arguments (insitu.options).
"""
import importlib
import re

_NAME = r"[A-Za-z_]\w*"
TARGET_RE = re.compile(rf"^{_NAME}(\.{_NAME})*:{_NAME}$")
KEYS = ("step", "reset", "graphs", "reference")


def load(target):
    """The workload function `target` names; ValueError in one line naming the problem."""
    if not isinstance(target, str) or not TARGET_RE.match(target):
        raise ValueError(f"insitu.workload must be 'package.module:function', got {target!r}")
    module_name, name = target.split(":")
    try:
        module = importlib.import_module(module_name)
    except ImportError as e:
        raise ValueError(f"insitu.workload {target!r} cannot be imported: {type(e).__name__}: {e}") from None
    fn = getattr(module, name, None)
    if not callable(fn):
        raise ValueError(f"insitu.workload {target!r}: module {module_name!r} has no function {name!r}")
    return fn


def build(target, options, device) -> dict:
    """The workload built: {"step", "reset", "graphs", "reference"} (None/False where it gives
    none); ValueError naming what it returned wrong."""
    made = load(target)(device=device, **dict(options or {}))
    if not isinstance(made, dict) or not callable(made.get("step")):
        raise ValueError(f"insitu.workload {target!r} must return {{'step': a function, ...}}, got "
                         f"{type(made).__name__}")
    unknown = sorted(set(made) - set(KEYS))
    if unknown:
        raise ValueError(f"insitu.workload {target!r} returned unknown keys {unknown} (it may return {list(KEYS)})")
    for key in ("reset", "reference"):
        if made.get(key) is not None and not callable(made[key]):
            raise ValueError(f"insitu.workload {target!r}: {key!r} must be a function, got {type(made[key]).__name__}")
    return {"step": made["step"], "reset": made.get("reset"), "graphs": bool(made.get("graphs", False)),
            "reference": made.get("reference")}
