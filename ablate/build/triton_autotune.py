"""The base of an autotuned Triton kernel on a GPU: the config its own autotuner picks for a
shape, with the kernel called as the library's launcher calls it.

A Triton plugin whose function is under @triton.autotune (Triton's Autotuner or a library's
subclass of it, with @triton.heuristics above or below, prune_configs_by, reset_to_zero,
restore_value, do_not_specialize: Triton runs them all, as in the library) and whose spec's
META does not pin every tuned key takes as its base, for each shape, the config the autotuner
picks. What each name of the call comes from (`call_plan`, recorded as `sources`):

- the shape: the tensors, the scalars and the constexprs the launcher derives from the shape
  (`N` of Liger's DyT), as spec.args gives them (ablate/job/thin.py);
- spec.META: the constexprs the launcher fixes (DyT's `HAVE_BETA`), passed to the call; a
  tuned key META names too (`num_warps: 8`) is pinned: the autotuner times only its configs
  that agree (each config set to it where none does), and the spec's value wins;
- the autotuner: every other tuned key (`BLOCK_N`, `num_warps`, `num_stages`);
- @triton.heuristics: what they compute, unless META names it.

`tune` runs the autotuner on this process's GPU; the sweep runs it in its GPU child, which
keeps the pick per GPU model and shape in the build folder (ablate/gpu/autotune.py). Without
a GPU (static mode) the base is the first config (thin.Spec), said once per process by
`say_static_base`.
"""
import contextlib
import copy
import hashlib
import json
import logging
from pathlib import Path

from ablate.build import triton_target

log = logging.getLogger("ablate")
_said = set()
OPTIONS = ("num_warps", "num_stages", "num_ctas", "maxnreg")  # a triton.Config's own fields


class AutotuneError(RuntimeError):
    """The library's autotuner failed on the GPU; the message names the config it was timing."""


def configs(spec) -> list[dict]:
    """The plugin's autotune configs as dicts (triton_target.autotune_configs)."""
    return triton_target.autotune_configs(triton_target.load(str(spec.folder), spec.TRITON))


def tuned_keys(obj) -> set:
    """The names the autotuner's configs set: their kwargs, num_warps and num_stages (and
    num_ctas, maxnreg where a config sets them)."""
    return {k for c in triton_target.autotune_configs(obj) for k in c}


def call_plan(spec, shape, inputs) -> dict:
    """How the autotuned function is called at `shape` (the module's list): {"kwargs": the
    call's arguments, "pinned": {tuned key: the spec's META value}, "sources": {name: "shape",
    "spec.META", "autotuner" or "heuristics"}}. Nothing here needs a GPU: `inputs` may be
    tensors on torch's meta device (triton_aot.fake_inputs)."""
    obj = triton_target.load(str(spec.folder), spec.TRITON)
    fn = triton_target.unwrap(obj)
    constexprs = {p.name for p in fn.params if p.is_constexpr}
    tuned, declared = tuned_keys(obj), dict(spec.META_DECLARED)
    args = spec.args(inputs, shape)
    pinned = {k: v for k, v in declared.items() if k in tuned}
    fixed = {k: v for k, v in declared.items() if k not in tuned}
    sources = {k: "shape" for k in args if k in constexprs}
    sources.update({k: "autotuner" for k in sorted(tuned) if k not in pinned})
    sources.update({k: "heuristics" for k in sorted(triton_target.heuristic_names(obj)) if k not in declared})
    sources.update({k: "spec.META" for k in declared})
    return {"kwargs": {**args, **fixed}, "pinned": pinned, "sources": sources}


def positional(fn, given: dict) -> tuple[list, dict]:
    """(args, kwargs) of a call with `given`: the function's parameters in their order as far
    as `given` holds each, the rest by name, as libraries' launchers call (DyT's passes X ... N
    in order). Triton's Autotuner hands only the positional ones to prune_configs_by and the
    hooks as `named_args` (a pruner that reads named_args["n"] fails on a call by name)."""
    names = []
    for p in fn.params:
        if p.name not in given:
            break
        names.append(p.name)
    return [given[n] for n in names], {k: v for k, v in given.items() if k not in names}


def _value(config, key):
    return config.kwargs[key] if key in config.kwargs else getattr(config, key, None)


def pinned_configs(configs, pinned: dict) -> list:
    """The autotuner's configs (triton.Config) that agree with every pinned key; where none
    does, each config with the pinned values put in, duplicates dropped, in their order."""
    if not pinned:
        return list(configs)
    agree = [c for c in configs if all(_value(c, k) == v for k, v in pinned.items())]
    if agree:
        return agree
    out, seen = [], set()
    for c in configs:
        c = copy.copy(c)
        c.kwargs = dict(c.kwargs)
        for k, v in pinned.items():
            if k in OPTIONS:
                setattr(c, k, v)
            else:
                c.kwargs[k] = v
        key = json.dumps(triton_target.config_dict(c), sort_keys=True, default=str)
        if key not in seen:
            seen.add(key)
            out.append(c)
    return out


@contextlib.contextmanager
def _as_the_spec_says(obj, tuner, plan, current):
    """The autotuner limited to the pinned configs with a fresh cache, the heuristics without
    the names META gives, and each config being timed noted in `current`; all restored after."""
    saved = {"configs": tuner.configs, "cache": tuner.cache}
    heuristics = [(w, w.values) for w in triton_target.wrappers(obj) if hasattr(w, "values") and w is not tuner]
    declared = {k for k, source in plan["sources"].items() if source == "spec.META"}
    bench = tuner._bench  # the bound method, Triton's or a subclass's

    def noted(*args, config, **kwargs):
        current["config"] = config
        return bench(*args, config=config, **kwargs)

    tuner.configs, tuner.cache, tuner._bench = pinned_configs(tuner.configs, plan["pinned"]), {}, noted
    for w, values in heuristics:
        w.values = {k: f for k, f in values.items() if k not in declared}
    try:
        yield
    finally:
        tuner.configs, tuner.cache = saved["configs"], saved["cache"]
        vars(tuner).pop("_bench", None)
        for w, values in heuristics:
            w.values = values


def tune(spec, shape) -> dict:
    """Run the autotuned function once on the shape's inputs on this process's GPU, as the
    library's launcher calls it (call_plan); {"meta": the pick with META over it, "sources",
    "pinned", "timings": {config as JSON: [median, p20, p80] ms} where the autotuner timed}.
    AutotuneError naming the config being timed when it fails."""
    import torch

    obj = triton_target.load(str(spec.folder), spec.TRITON)
    tuner = triton_target.autotuner(obj)
    gen = torch.Generator(device="cuda").manual_seed(0)
    inputs = spec.make_inputs(shape, gen, "cuda")
    plan = call_plan(spec, shape, inputs)
    current = {}
    args, kwargs = positional(triton_target.unwrap(obj), plan["kwargs"])
    with _as_the_spec_says(obj, tuner, plan, current):
        timed = len(tuner.configs)
        try:
            obj[lambda meta: tuple(spec.grid(shape, meta))](*args, **kwargs)
            torch.cuda.synchronize()
        except Exception as e:  # noqa: BLE001 - any failure of the library's code is the job's, named
            config = current.get("config") or getattr(tuner, "best_config", None)
            where = f" while timing config {triton_target.config_dict(config)}" if config is not None else ""
            text = str(e).strip().splitlines()
            raise AutotuneError(f"{spec.TRITON}: its autotuner failed{where}: {type(e).__name__}: "
                                f"{text[0] if text else ''}") from None
        timings = {json.dumps(triton_target.config_dict(c), sort_keys=True): list(map(float, t))
                   for c, t in (getattr(tuner, "configs_timings", None) or {}).items()}
        picked = triton_target.config_dict(tuner.best_config)
    return {"meta": {**picked, **spec.META_DECLARED}, "sources": plan["sources"], "pinned": plan["pinned"],
            "timings": timings, "configs_timed": timed}


def record_path(plugin, shape, build_dir, model) -> Path:
    """Where the pick of `plugin` at `shape` on GPU `model` is kept: build_dir/autotune/<key>.json."""
    spec = plugin.spec
    key = hashlib.sha256(json.dumps([plugin.sources_digest(), spec.TRITON, shape, spec.META_DECLARED, model],
                                    sort_keys=True, default=str).encode()).hexdigest()[:16]
    return Path(build_dir) / "autotune" / f"{key}.json"


ORDER = ("autotuner", "first autotune config", "spec.META", "shape", "heuristics")


def _by_source(sources) -> list:
    """[(source, [names])] in ORDER."""
    by = {}
    for name, source in sorted(sources.items()):
        by.setdefault(source, []).append(name)
    return sorted(by.items(), key=lambda kv: ORDER.index(kv[0]) if kv[0] in ORDER else len(ORDER))


def said(record, n_configs) -> str:
    """One line: the base's meta-parameters by where each came from."""
    meta = record["meta"]
    parts = [f"{source}: " + ", ".join(f"{n}={meta[n]}" if n in meta else n for n in names)
             for source, names in _by_source(record.get("sources", {}))]
    return (f"the base at {record['shape']} on {record.get('gpu', '?')}: " + "; ".join(parts)
            + f" (the autotuner timed {record.get('configs_timed', '?')} of {n_configs} configs)")


def sources_text(sources) -> str:
    """Where each name came from, as a param: `autotuner: BLOCK_N, num_stages, num_warps;
    spec.META: HAVE_BETA; shape: N`."""
    return "; ".join(f"{source}: {', '.join(names)}" for source, names in _by_source(sources))


def static_sources(plugin, shape) -> dict:
    """call_plan's sources without a GPU: the autotuner's keys are its first config's."""
    from ablate.build import triton_aot

    plan = call_plan(plugin.spec, shape, triton_aot.fake_inputs(plugin.spec, shape))
    return {k: "first autotune config" if v == "autotuner" else v for k, v in plan["sources"].items()}


def say_static_base(plugin) -> None:
    """One line, once per process and kernel: an autotuned kernel's base without a GPU."""
    if getattr(plugin.spec, "META_FROM", None) == "autotune" and plugin.name not in _said:
        _said.add(plugin.name)
        log.warning("%s: @triton.autotune: without a GPU the base is its first of %d configs, with spec.META over "
                    "it: %s (on a GPU, the config its autotuner picks for each shape)", plugin.name,
                    len(configs(plugin.spec)), plugin.spec.META)
