"""What a Triton plugin's spec.TRITON names, as libraries ship their kernels.

TRITON is either a file of the plugin (`base/matmul.py:matmul_kernel`, relative to its folder)
or a function of an installed package (`a_library.ops.norm:_norm_fwd_kernel`,
a module path): the plugin then holds no copy of the kernel's code. Either names a
`@triton.jit` function, bare or under Triton's own wrappers, `@triton.autotune` (an Autotuner)
and `@triton.heuristics` (a Heuristics), in any order: `unwrap` follows each wrapper's `fn` to
the JITFunction, which is what ablate compiles and binds.

- `autotune_configs(obj)` is the autotuner's configs as plain dicts ({**kwargs, num_warps,
  num_stages[, num_ctas, maxnreg]}): the base's META where the spec declares none (the first,
  in static mode; on a GPU the one the autotuner picks for the shape: gpu_autotune.py), and the
  kernel's own neighbourhood of its tunables.
- `heuristic_values(obj, args, meta)` is what Triton's Heuristics.run computes at a launch:
  each wrapper's functions, outermost first, called with {**args, **meta}. A name the meta
  already gives (the spec's META or a pathology's `meta:`) keeps that value, so that a
  pathology may override a heuristic's choice as it overrides any META.
- `package(target)`: the installed distribution a module path comes from, its version and a
  hash of the function's source (Triton's own cache key: its source and every @jit function
  and global it reads), which the plugin's provenance (plugin_sources) folds in, so that two
  versions of the library's kernel never pair in a ranking.
"""
import functools
import hashlib
import importlib
import importlib.util
import re
import sys
from pathlib import Path

from ablate.build import manifests

_NAME = r"[A-Za-z_]\w*"
MODULE_RE = re.compile(rf"^{_NAME}(\.{_NAME})*$")


class MissingPackage(ValueError):
    """spec.TRITON names a module that is not installed."""


def split(text) -> tuple[str, str, str]:
    """("file", FILE.py, NAME) or ("module", package.module, NAME) of spec.TRITON; ValueError
    naming TRITON and both forms."""
    where, sep, name = str(text).rpartition(":")
    if sep and re.fullmatch(_NAME, name):
        if where.endswith(".py"):
            return "file", where, name
        if MODULE_RE.match(where):
            return "module", where, name
    raise ValueError(f"spec.TRITON must be 'FILE.py:FUNCTION' (relative to the plugin folder) or "
                     f"'package.module:FUNCTION' (an installed package's), got {text!r}")


def import_module(module_name):
    """The installed module; MissingPackage in one line naming it."""
    try:
        return importlib.import_module(module_name)
    except ModuleNotFoundError as e:
        raise MissingPackage(f"spec.TRITON: module {module_name!r} is not installed ({e})") from None


@functools.cache
def load(folder, target):
    """The object spec.TRITON names (a JITFunction, Autotuner or Heuristics): a file's module
    imported by path with the plugin folder on sys.path, or an installed package's module."""
    kind, where, name = split(target)
    module, origin = module_of(folder, kind, where, "ablate_triton")
    obj = getattr(module, name, None)
    if obj is None or unwrap(obj) is None:
        raise ValueError(f"spec.TRITON: {origin} has no @triton.jit function {name!r}")
    return obj


def module_of(folder, kind, where, prefix):
    """(module, its file) of a target: an installed package's module, or a file of the plugin
    imported by path (as `<prefix>_<folder>_<stem>`) with the plugin folder on sys.path."""
    if kind == "module":
        module = import_module(where)
        return module, module.__file__
    path = Path(folder) / where
    if str(folder) not in sys.path:
        sys.path.insert(0, str(folder))
    module_name = f"{prefix}_{Path(folder).name}_{Path(where).stem}"
    loader = importlib.util.spec_from_file_location(module_name, path)
    module = importlib.util.module_from_spec(loader)
    sys.modules[module_name] = module
    loader.loader.exec_module(module)
    return module, path


def _is_jit(obj) -> bool:
    return hasattr(obj, "params") and hasattr(obj, "arg_names") and hasattr(obj, "signature")


def wrappers(obj) -> list:
    """Triton's wrappers around the JITFunction, outermost first (Autotuner, Heuristics)."""
    out = []
    while obj is not None and not _is_jit(obj) and len(out) < 16:
        out.append(obj)
        obj = getattr(obj, "fn", None)
    return out


def unwrap(obj):
    """The JITFunction under obj's wrappers, or None where there is none."""
    for _ in range(16):
        if obj is None or _is_jit(obj):
            return obj
        obj = getattr(obj, "fn", None)
    return None


def autotuner(obj):
    """The Autotuner among obj's wrappers, or None."""
    return next((w for w in wrappers(obj) if hasattr(w, "configs") and hasattr(w, "keys")), None)


def autotune_configs(obj) -> list[dict]:
    """The configs of the kernel's @triton.autotune as plain dicts, in its order:
    {**config.kwargs, num_warps, num_stages} (num_ctas and maxnreg where a config sets them
    otherwise than Triton's default); [] for a kernel without an autotuner. These are the
    kernel's own neighbourhood of its tunables (docs/design.md, "Triton kernels")."""
    tuner = autotuner(obj)
    return [config_dict(config) for config in tuner.configs] if tuner is not None else []


def config_dict(config) -> dict:
    """A triton.Config as META: {**kwargs, num_warps, num_stages[, num_ctas, maxnreg]}."""
    d = {**config.kwargs, "num_warps": config.num_warps, "num_stages": config.num_stages}
    if getattr(config, "num_ctas", 1) not in (None, 1):
        d["num_ctas"] = config.num_ctas
    if getattr(config, "maxnreg", None) is not None:
        d["maxnreg"] = config.maxnreg
    return d


def heuristic_names(obj) -> set:
    """The names every @triton.heuristics around the function computes."""
    return {name for w in wrappers(obj) if hasattr(w, "values") and not hasattr(w, "configs") for name in w.values}


def heuristic_values(obj, args: dict, meta: dict) -> dict:
    """{name: value} of every @triton.heuristics around the function, as Triton computes them
    at a launch: each function called with {**args, **meta so far}, outermost wrapper first;
    a name the meta gives already is left to it."""
    out = {}
    for w in wrappers(obj):
        if hasattr(w, "values") and not hasattr(w, "configs"):
            for name, heur in w.values.items():
                if name not in meta and name not in out:
                    out[name] = heur({**args, **meta, **out})
    return out


def package(target) -> dict:
    """{triton_module, triton_package ("name version"), triton_function (a hash of the
    function's source and what it reads: Triton's cache key)} of a module-path TRITON; {} for a
    file of the plugin (its own files are its sources)."""
    kind, where, name = split(target)
    if kind != "module":
        return {}
    import_module(where)
    top = where.split(".")[0]
    dist = manifests.distribution(top)
    fn = unwrap(load(None, target))
    return {"triton_module": f"{where}:{name}", "triton_package": dist,
            "triton_function": hashlib.sha256(fn.cache_key.encode()).hexdigest()[:16]}


def source_file(target, folder) -> Path:
    """The file holding the function: the plugin's own, or the installed module's."""
    kind, where, _ = split(target)
    return Path(import_module(where).__file__) if kind == "module" else Path(folder) / where
