"""A kernel's tunables and their neighbours, as generated pathologies (`tune_*`), no yaml.

A tunable is a knob engineers actually turn: a Triton kernel's integer META entries (its
block sizes and other integer constexprs, `num_warps`, `num_stages`), or a CUDA kernel's
macros that its spec declares in `TUNABLES = {"NAME": (values, ...)}` and its source reads
with an `#ifndef NAME / #define NAME default` (the default is the base's value). Each gets
its neighbours (`neighbours`):

- declared values (a CUDA kernel's TUNABLES; a Triton spec's TUNABLES overrides its META's
  rule for the names it lists): the value just below and just above the base's in the tuple;
- `num_stages`: one fewer (at least 1) and one more;
- any other integer that is a power of two (`num_warps`, `BLOCK_M`, `GROUP_M`, ...): halved
  (at least 1) and doubled;
- other integers (`NUM_SMS = 132`) and booleans: no neighbours (a flag is an ablation: a
  pathology of its own); declare values in TUNABLES to give them some.

Each neighbour is a pathology `tune_<name, lower case>_<value>` (`tune_block_m_256`,
`tune_num_stages_2`), written by `write` as yaml into a folder of its own that Hydra's search
path holds after the kernel's conf/ and the generic pathologies (hydra_plugins/ablate_kernel,
ABLATE_KERNEL_TUNABLES; `Plugin.tunables`), so `pathology=glob(tune_*)` sweeps the whole
neighbourhood and `glob(*,exclude=tune_*)` leaves it out. A neighbour is a generic pathology
(`generic: true`): equal machine code is "not applicable", and its seam is
`generic.tune_<name>` (its yaml says `tune_<name>`, as every generic one says its own), so the interactions design never pairs two neighbours of one tunable
and the inversion leaves them out. Its `tuned:` says `{name, base, value}`: tracking logs it
(param `tuned`), and the report reads the sensitivity of each tunable from it
(ablate/report/findings.py). One that cannot compile or launch (a block over the problem's or
the GPU's limits, more shared memory than a block may have) is not applicable, with why
(ablate/pipeline.py), never a failure of the sweep.

**Extra configurations** (the seam for a kernel's own list, e.g. `@triton.autotune`'s
configs as dicts): `pathologies(plugin, extra=[{...}, ...])` adds each dict that differs from
the base as one more pathology, `tune_config_<i>` (its overrides together, each entry of the
dict a META name), beside the neighbours. `extra_configs(spec)` is the one place to read them
from a spec: its `TUNE_CONFIGS` (a list of dicts), which a Triton function under
`@triton.autotune` gets from its autotuner's configs where the spec declares none
(`thin.Spec._triton`, `triton_target.autotune_configs`): on a GPU the base is the autotuner's
pick for the shape, so the config it picked compiles to the base's machine code and is not
applicable there, and each other one says how far the pick beats it.
"""
import hashlib
import json
import os
import re
import tempfile
from pathlib import Path

import yaml

PREFIX = "tune_"
NAME_RE = re.compile(r"^[A-Z_][A-Za-z0-9_]*$")  # a tunable's name (a macro, or a META key)
STAGES = "num_stages"
SUFFIXES = (".cu", ".cuh", ".h", ".hpp", ".inc")
META_LANGUAGES = ("triton", "cute")  # kernels whose tunables are their META's integers


class TunableError(ValueError):
    """A spec's TUNABLES that cannot be used (named)."""


def is_power_of_two(v) -> bool:
    return isinstance(v, int) and not isinstance(v, bool) and v > 0 and v & (v - 1) == 0


def neighbours(name, base, values=None) -> list:
    """The values around `base` of the tunable `name`: the adjacent ones of `values` (a tuple
    that holds `base`), else by the rule of the module's docstring; [] for none."""
    if values is not None:
        values = sorted(set(values))
        if base not in values:
            raise TunableError(f"tunable {name}: its base value {base!r} is not one of {values}")
        i = values.index(base)
        return [v for v in (values[i - 1] if i > 0 else None, values[i + 1] if i + 1 < len(values) else None)
                if v is not None]
    if isinstance(base, bool) or not isinstance(base, int):
        return []
    if name == STAGES:
        return [v for v in (base - 1, base + 1) if v >= 1]
    if is_power_of_two(base):
        return [v for v in (base // 2, base * 2) if v >= 1 and v != base]
    return []


def pathology_name(name, value) -> str:
    return f"{PREFIX}{name.lower()}_{value}"


def base_values(plugin) -> dict:
    """{tunable: (base value, declared values or None)} of a kernel."""
    spec = plugin.spec
    declared = dict(getattr(spec, "TUNABLES", None) or {})
    for name, values in declared.items():
        if not isinstance(name, str) or not NAME_RE.match(name):
            raise TunableError(f"kernel {plugin.name!r}: TUNABLES name {name!r} must match {NAME_RE.pattern}")
        if (not isinstance(values, (tuple, list)) or len(values) < 2
                or not all(isinstance(v, int) and not isinstance(v, bool) for v in values)):
            raise TunableError(f"kernel {plugin.name!r}: TUNABLES[{name!r}] must be a tuple of at least two "
                               f"integers, got {values!r}")
    if plugin.language in META_LANGUAGES:
        meta = dict(spec.META)
        for name in declared:
            if name not in meta:
                raise TunableError(f"kernel {plugin.name!r}: TUNABLES names {name!r}, which is not in its META")
        return {k: (v, tuple(declared[k]) if k in declared else None) for k, v in meta.items()}
    defaults = source_defaults(plugin, list(declared))
    return {k: (defaults[k], tuple(v)) for k, v in declared.items()}


def source_defaults(plugin, names) -> dict:
    """{macro: its default} as the kernel's sources give it (`#ifndef NAME` then
    `#define NAME <integer>`); TunableError naming the first macro no source declares so."""
    files = [p for p in sorted(Path(plugin.dir).rglob("*")) if p.suffix in SUFFIXES and p.is_file()]
    text = "\n".join(p.read_text(errors="replace") for p in files)
    out = {}
    for name in names:
        m = re.search(rf"^[ \t]*#[ \t]*ifndef[ \t]+{name}\b[^\n]*\n[ \t]*#[ \t]*define[ \t]+{name}[ \t]+\(?(-?\d+)\)?",
                      text, re.M)
        if m is None:
            raise TunableError(f"kernel {plugin.name!r}: TUNABLES names {name!r}, but no source of {plugin.dir} "
                               f"gives it a default (#ifndef {name} / #define {name} <integer>)")
        out[name] = int(m.group(1))
    return out


def extra_configs(spec) -> list:
    """A kernel's own list of whole configurations to measure beside the neighbours
    (spec.TUNE_CONFIGS: dicts of META names; the seam where an autotuner's configs come in)."""
    return list(getattr(spec, "TUNE_CONFIGS", None) or [])


def pathologies(plugin, extra=None) -> dict:
    """{pathology name: its yaml content} of every neighbour (and extra configuration)."""
    triton = plugin.language in META_LANGUAGES  # its neighbours are meta: overrides
    out = {}
    for name, (base, values) in base_values(plugin).items():
        for value in neighbours(name, base, values):
            key = pathology_name(name, value)
            if key in out:
                raise TunableError(f"kernel {plugin.name!r}: two tunables give the pathology {key} "
                                   "(names that differ only in case)")
            side = "larger" if value > base else "smaller"
            body = {
                "generic": True,
                "seam": f"{PREFIX}{name.lower()}",  # generic: variant.py makes it generic.tune_<name>
                "tuned": {"name": name, "base": base, "value": value},
                "mechanism": f"Sensitivity of the tunable {name}: the base's {base} set to the {side} "
                             f"neighbour {value}, everything else as the base.",
                "expected": f"At most about 1x if the base's {name} = {base} is at a local optimum; a "
                            f"speed-up (below 1x) says the base is beaten by {name} = {value}.",
                "unchanged_means": f"{name} = {value} compiles to the base's machine code",
            }
            body["meta" if triton else "macros"] = {name: value}
            if name == "num_warps":  # the one static and counted consequence every kernel shares
                way = "increases" if value > base else "decreases"
                body["fingerprint"] = {"threads_per_block": way}
                body["counters"] = {"launch__block_size": way}
            out[key] = body
    meta = dict(plugin.spec.META) if triton else {k: v[0] for k, v in base_values(plugin).items()}
    configs = extra_configs(plugin.spec) if extra is None else list(extra)
    for i, config in enumerate(configs):
        if not isinstance(config, dict) or not config:
            raise TunableError(f"kernel {plugin.name!r}: extra configuration {i} must be a dict of "
                               f"{'META' if triton else 'TUNABLES'} names, got {config!r}")
        unknown = sorted(set(config) - set(meta))
        if unknown:
            raise TunableError(f"kernel {plugin.name!r}: extra configuration {i} names {unknown}, not "
                               f"{'in its META' if triton else 'among its TUNABLES'}")
        changed = {k: v for k, v in sorted(config.items()) if meta[k] != v}
        if not changed:
            continue  # the base itself
        words = ", ".join(f"{k} {meta[k]} -> {v}" for k, v in changed.items())
        out[f"{PREFIX}config_{i}"] = {
            "generic": True,
            "seam": f"{PREFIX}config",
            "tuned": {"name": "+".join(changed), "base": json.dumps({k: meta[k] for k in changed}),
                      "value": json.dumps(changed)},
            "mechanism": f"A whole configuration of the kernel's own list: {words}.",
            "expected": "A speed-up (below 1x) says this configuration beats the base's.",
            "unchanged_means": "this configuration compiles to the base's machine code",
            "meta" if triton else "macros": changed,
        }
    return out


def write(plugin, extra=None) -> Path:
    """A conf folder holding `pathology/tune_*.yaml` for the kernel (a folder per content, in
    the temporary directory: nothing is written into the checkout; each file is written whole,
    then moved into place, so that two processes never read half of one)."""
    found = pathologies(plugin, extra)
    text = {n: f"# Generated by ablate.job.tunables from kernel {plugin.name}'s spec: do not edit.\n"
               + yaml.safe_dump({n: body}, sort_keys=False, width=120) for n, body in found.items()}
    digest = hashlib.sha256(json.dumps(text, sort_keys=True).encode()).hexdigest()[:16]
    root = Path(tempfile.gettempdir()) / f"ablate-tunables-{os.getuid()}" / f"{plugin.name}-{digest}"
    folder = root / "pathology"
    if not folder.is_dir():
        folder.mkdir(parents=True, exist_ok=True)
    for name, body in text.items():
        path = folder / f"{name}.yaml"
        if path.is_file() and path.read_text() == body:
            continue
        tmp = folder / f".{name}.{os.getpid()}.tmp"
        tmp.write_text(body)
        os.replace(tmp, path)
    return root


def is_tuned(spec) -> bool:
    """Whether a pathology's yaml content is a generated neighbour."""
    return isinstance(spec, dict) and bool(spec.get("tuned"))
