"""A kernel's configurations, of which its base is the fastest at a shape (docs/design.md,
"Configurations by measurement").

A spec declares them in `CANDIDATES = {name: configuration}`: for a CUDA kernel the value its
`FORCE_MACRO` is given (`-DABLATE_GEMM_FORCE=7`: the source compiles that configuration alone)
or a dict of macros (`{"TILE_M": 128, "STAGES": 4}`); for a Triton kernel a dict of META
overrides. `DEFAULT_CANDIDATE` (a name, or a function of the shape; the first candidate where the
spec says nothing) is the base where nothing is timed (static mode), and `candidates(shape)` the
ones worth timing at a shape (all of them by default; a cheap model may prune, the timing picks).

A job's variants are all built on one candidate (`on`): its base's build sets it, a CUDA one by
`Variant.base_macros`, a Triton one by `Variant.base_meta`; so a build compiles the one
configuration its shape runs. On a GPU the candidates are built, checked and timed in the GPU
worker (ablate/gpu/autotune.py), and the pick is kept per GPU model, shape and plugin sources.
"""
import inspect
import re
from dataclasses import replace

NAME_RE = re.compile(r"^[A-Za-z0-9_]+$")
MACRO_RE = re.compile(r"^[A-Z_][A-Z0-9_]*$")
VALUE_RE = re.compile(r"^[A-Za-z0-9_]*$")


class CandidateError(ValueError):
    """A spec's CANDIDATES, FORCE_MACRO, DEFAULT_CANDIDATE or candidates that cannot be used (named)."""


def declared(own, language, meta=None) -> dict:
    """{candidate: what its build sets} of a spec module's names (`own`): a CUDA kernel's
    {macro: value}, a Triton kernel's {META name: value}; {} where it declares none.
    CandidateError, one line naming the entry at fault."""
    given = own.get("CANDIDATES")
    if given is None:
        return {}
    if not isinstance(given, dict) or not given:
        raise CandidateError(f"spec.CANDIDATES must map each configuration's name to how it is built, got {given!r}")
    if own.get("base_meta") is not None:
        raise CandidateError("spec.base_meta and spec.CANDIDATES both say the base at a shape: keep one "
                             "(CANDIDATES, with DEFAULT_CANDIDATE for the base where nothing is timed)")
    force = own.get("FORCE_MACRO")
    if force is not None and (language != "cuda" or not isinstance(force, str) or not MACRO_RE.match(force)):
        raise CandidateError(f"spec.FORCE_MACRO must be a macro name of a CUDA kernel ({MACRO_RE.pattern}), got {force!r}")
    out = {}
    for name, config in given.items():
        where = f"spec.CANDIDATES[{name!r}]"
        if not isinstance(name, str) or not NAME_RE.match(name):
            raise CandidateError(f"spec.CANDIDATES: name {name!r} must match {NAME_RE.pattern}")
        if language == "triton":
            out[name] = _meta(where, config, meta or {})
        elif isinstance(config, dict):
            out[name] = _macros(where, config)
        elif force is None:
            raise CandidateError(f"{where} = {config!r}: a bare value needs spec.FORCE_MACRO, the macro it is "
                                 f"passed in (or give the candidate's macros as a dict)")
        else:
            out[name] = _macros(where, {force: config})
    default = own.get("DEFAULT_CANDIDATE")
    if default is not None and not callable(default) and default not in out:
        raise CandidateError(f"spec.DEFAULT_CANDIDATE must be one of CANDIDATES ({', '.join(out)}) or a function "
                             f"of the shape, got {default!r}")
    if own.get("candidates") is not None and not callable(own["candidates"]):
        raise CandidateError(f"spec.candidates must be a function of the shape (the candidates worth timing "
                             f"there), got {own['candidates']!r}")
    return out


def _macros(where, macros) -> dict:
    if not macros:
        raise CandidateError(f"{where}: a candidate's macros must set at least one")
    for k, v in macros.items():
        if not isinstance(k, str) or not MACRO_RE.match(k):
            raise CandidateError(f"{where}: macro name {k!r} must match {MACRO_RE.pattern}")
        if isinstance(v, bool) or not isinstance(v, (int, str)) or not VALUE_RE.match(str(v)):
            raise CandidateError(f"{where}: {k} = {v!r} must be an integer or a word ({VALUE_RE.pattern})")
    return {k: str(v) for k, v in sorted(macros.items())}


def _meta(where, config, meta) -> dict:
    """A Triton candidate: META overrides, each a constexpr or compile option by name (META's, or
    one the function defaults, as SPLIT_K) set to a number or a bool."""
    if not isinstance(config, dict):
        raise CandidateError(f"{where} must be a dict of META overrides (a Triton kernel's), got {config!r}")
    for k, v in config.items():
        if not isinstance(k, str) or not k.isidentifier():
            raise CandidateError(f"{where}: {k!r} is no meta-parameter name")
        if not isinstance(v, (bool, int, float)):
            raise CandidateError(f"{where}: {k} = {v!r} must be a number or a bool")
    return dict(config)


def default(spec, shape) -> str:
    """The candidate the base runs where nothing is timed: DEFAULT_CANDIDATE's, else the first.
    ValueError naming DEFAULT_CANDIDATE when its function names no candidate."""
    sets = spec.CANDIDATE_SETS
    given = getattr(spec, "DEFAULT_CANDIDATE", None)
    name = given(shape) if callable(given) else given or next(iter(sets))
    if name not in sets:
        raise ValueError(f"spec.DEFAULT_CANDIDATE(shape) gave {name!r} at {shape}, not one of CANDIDATES "
                         f"({', '.join(sets)})")
    return name


def timed(spec, shape) -> list[str]:
    """The candidates worth timing at `shape`: spec.candidates(shape), else all. ValueError naming
    spec.candidates when it gives none or a name that is no candidate."""
    says = getattr(spec, "candidates", None)
    names = list(spec.CANDIDATE_SETS) if says is None else list(says(shape))
    unknown = [n for n in names if n not in spec.CANDIDATE_SETS]
    if not names or unknown:
        raise ValueError(f"spec.candidates(shape) must give some of CANDIDATES at {shape}, got {names!r}")
    return list(dict.fromkeys(names))


def on(variant, spec, name):
    """`variant` built on candidate `name`: a CUDA kernel's macros as its base_macros, a Triton
    kernel's META (spec.META with the candidate's overrides) as its base_meta."""
    config = spec.CANDIDATE_SETS[name]
    if spec.LANGUAGE == "triton":
        return replace(variant, base_meta={**spec.META, **config})
    return replace(variant, base_macros=dict(config))


def base_on(base, spec, name):
    """The base built on candidate `name`, under a name of its own (`none@<candidate>`), beside the
    base's other candidates in one build."""
    return replace(on(base, spec, name), name=f"{base.name}@{name}")


def not_applicable(spec, pathology, shape, candidate):
    """spec.not_applicable's reason at `shape`, where its base runs `candidate` (passed to a
    not_applicable that takes a third argument; a spec's of two arguments is asked as it was)."""
    says = spec.not_applicable
    if candidate is not None and _takes_candidate(says):
        return says(pathology, shape, candidate)
    return says(pathology, shape)


def _takes_candidate(fn) -> bool:
    try:
        params = list(inspect.signature(fn).parameters.values())
    except (TypeError, ValueError):
        return False
    return len(params) >= 3 or any(p.kind == p.VAR_POSITIONAL for p in params)
