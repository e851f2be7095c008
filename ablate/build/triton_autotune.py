"""The base of an autotuned Triton kernel on a GPU: the config its own @triton.autotune picks
for a shape.

A Triton plugin whose function is under @triton.autotune and whose spec declares no META takes
as its base, for each shape, the config the kernel's autotuner picks (triton_target): the
function is run once through Triton's JIT on the shape's inputs (spec.make_inputs on the GPU,
spec.args, the grid spec.grid(shape, META)), the autotuner benchmarks its configs as it does
in the library, and `best_config` is read. The pick is kept in the build folder
(`autotune/<key>.json`, the key hashing the plugin's provenance, the function, the shape and
the GPU's name), so that every job of a sweep, and every later sweep on that GPU, builds the
same base; delete the file to tune again. Without a GPU (static mode) the base is the first
config (thin.Spec), said once per process by `say_static_base`.
"""
import hashlib
import json
import logging
import os
from pathlib import Path

from ablate.build import triton_target

log = logging.getLogger("ablate")
_said = set()


def configs(spec) -> list[dict]:
    """The plugin's autotune configs as dicts (triton_target.autotune_configs)."""
    return triton_target.autotune_configs(triton_target.load(str(spec.folder), spec.TRITON))


def gpu_name():
    import torch

    return torch.cuda.get_device_name() if torch.cuda.is_available() else None


def tune(spec, shape) -> dict:
    """Run the autotuned function once on the shape's inputs on the current GPU; its
    autotuner's pick as a dict ({**kwargs, num_warps, num_stages, ...})."""
    import torch

    obj = triton_target.load(str(spec.folder), spec.TRITON)
    tuner = triton_target.autotuner(obj)
    gen = torch.Generator(device="cuda").manual_seed(0)
    inputs = spec.make_inputs(shape, gen, "cuda")
    args = spec.args(inputs, shape)
    obj[lambda meta: tuple(spec.grid(shape, meta))](**args)
    torch.cuda.synchronize()
    return triton_target.config_dict(tuner.best_config)


def base_meta(plugin, shape, build_dir) -> dict:
    """The autotuner's pick for `shape` on this GPU, from the build folder's record, else
    tuned now and recorded; {} where the spec declares META, or no GPU is visible."""
    spec = plugin.spec
    if getattr(spec, "META_FROM", None) != "autotune":
        return {}
    name = gpu_name()
    if name is None:
        return {}
    key = hashlib.sha256(json.dumps([plugin.sources_digest(), spec.TRITON, shape, name], sort_keys=True,
                                    default=str).encode()).hexdigest()[:16]
    path = Path(build_dir) / "autotune" / f"{key}.json"
    if path.is_file():
        return json.loads(path.read_text())["meta"]
    picked = tune(spec, shape)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.{os.getpid()}")
    tmp.write_text(json.dumps({"meta": picked, "shape": shape, "gpu": name, "function": spec.TRITON,
                               "configs": configs(spec)}, indent=1, default=str))
    os.replace(tmp, path)
    log.info("%s: the autotuner picked %s for %s on %s (of %d configs)", plugin.name, picked, shape, name,
             len(configs(spec)))
    return picked


def say_static_base(plugin) -> None:
    """One line, once per process and kernel: an autotuned kernel's base without a GPU."""
    if getattr(plugin.spec, "META_FROM", None) == "autotune" and plugin.name not in _said:
        _said.add(plugin.name)
        log.warning("%s: @triton.autotune: without a GPU the base is its first of %d configs, with spec.META over "
                    "it: %s (on a GPU, the config its autotuner picks for each shape)", plugin.name,
                    len(configs(plugin.spec)), plugin.spec.META)
