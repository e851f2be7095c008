"""Counter rules: the hardware mechanism a pathology names, stated as predictions on Nsight
Compute metrics and held against the counters of one launch of the base and one of the
variant (ablate/gpu/profile.py reads them).

A pathology's yaml declares them under `counters:`, in the fingerprint's style
(ablate/job/fingerprint.py), plus ratios against the base:

    counters:
      when: {causal: true}           # optional: the shapes the rules apply to (a field's value,
                                     #   or {at_least: N} / {at_most: N}); other shapes: n/a
      l1tex__data_bank_conflicts_pipe_lsu_mem_shared.sum: {ratio_at_least: 100}
      sm__warps_active.avg.pct_of_peak_sustained_active: decreases
      smsp__inst_executed_op_ldgsts.sum: zero

`counters:` may also be a list of such blocks, each with its own `when` (a prediction per
kind of shape: on causal shapes the tensor work doubles, on the others it is the same).

Rules: increases, decreases, differs, same, zero, nonzero, {equals|at_least|at_most: N} on
the variant's value, {ratio_at_least|ratio_at_most: N} on variant / base (a base of 0 makes
any positive value an infinite ratio). Metric names are checked before anything runs against
ncu's own list for GH100 (ablate/data/ncu_metrics_gh100.txt). The mechanism is *confirmed*
when every rule of every pathology of the variant holds, *refuted* when one does not; the
counters that moved most are shown beside a refuted one. A report reads a refuted mechanism
whose slowdown is not significant as *no effect* (`judged`): the pathology did not act at
that shape, and nothing needs explaining.
"""
import functools
import json
import math
from collections.abc import Mapping

from ablate.job import fingerprint
from ablate.paths import DATA

KNOWN = DATA / "ncu_metrics_gh100.txt"
WHEN = "when"
_RATIO = {"ratio_at_least": lambda r, n: r >= n, "ratio_at_most": lambda r, n: r <= n}
_SIMPLE = ("increases", "decreases", "differs", "same", "zero", "nonzero")
_BOUNDS = ("equals", "at_least", "at_most")
# Not worth naming as "moved most": they move with everything (the time itself) or restate another.
_NOT_MOVERS = ("gpu__time_duration.sum",)


@functools.cache
def _known():
    """({base name: type}, {type: suffixes}, {names taken as they are}) from KNOWN."""
    types, suffixes, plain = {}, {}, set()
    for line in KNOWN.read_text().splitlines():
        if not line or line.startswith("#"):
            continue
        kind, _, rest = line.partition(" ")
        if kind == "suffix":
            t, _, s = rest.partition(" ")
            suffixes.setdefault(t, set()).add(s)
        elif kind == "Plain":
            plain.add(rest)
        else:
            types[rest] = kind
    return types, suffixes, plain


def is_known(name) -> bool:
    """Whether ncu knows `name` on GH100: a base metric with a suffix its type takes
    (dram__bytes.sum, ...ratio, ....avg.pct_of_peak_sustained_elapsed), or a launch__ name."""
    if not isinstance(name, str):
        return False
    types, suffixes, plain = _known()
    if name in plain:
        return True
    base, dot, suffix = name.partition(".")
    return base in types and dot == "." and "." + suffix in suffixes.get(types[base], ())


def check_names(names, where):
    """ValueError naming the first metric ncu does not know, with `where` it was found."""
    for name in names:
        if not is_known(name):
            raise ValueError(f"{where}: unknown ncu metric {name!r} (not in ncu's metric list for "
                             f"GH100, {KNOWN.name}; full names take a rollup, e.g. dram__bytes.sum)")


def blocks(counters) -> list:
    """The blocks of a `counters:` entry: a mapping is one block, a list is several."""
    if counters is None:
        return []
    return [counters] if isinstance(counters, Mapping) else list(counters)


def validate(counters) -> None:
    """Raise ValueError naming the metric or rule when a `counters:` entry is malformed."""
    if isinstance(counters, (list, tuple)) and counters:
        for i, block in enumerate(counters):
            try:
                validate(block)
            except ValueError as e:
                raise ValueError(f"[{i}]: {e}") from None
        return
    if not isinstance(counters, Mapping) or not counters:
        raise ValueError(f"must map ncu metric names to rules, got {counters!r}")
    when = counters.get(WHEN)
    if when is not None:
        if not isinstance(when, Mapping) or not when:
            raise ValueError(f"when: must map shape fields to values, got {when!r}")
        for field, cond in when.items():
            if isinstance(cond, Mapping) and not (len(cond) == 1 and next(iter(cond)) in ("at_least", "at_most")):
                raise ValueError(f"when.{field}: {cond!r} must be a value or a single {{at_least|at_most: N}}")
    check_names([m for m in counters if m != WHEN], "counters")
    for metric, rule in rules(counters).items():
        if isinstance(rule, str) and rule in _SIMPLE:
            continue
        if isinstance(rule, Mapping) and len(rule) == 1 and next(iter(rule)) in (*_BOUNDS, *_RATIO):
            bound = next(iter(rule.values()))
            if isinstance(bound, bool) or not isinstance(bound, (int, float)):
                raise ValueError(f"{metric}: {dict(rule)!r} needs a number")
            continue
        raise ValueError(f"{metric}: unknown rule {rule!r}; use one of {list(_SIMPLE)} or a single "
                         f"{{{'|'.join((*_BOUNDS, *_RATIO))}: N}}")


def rules(counters) -> dict:
    """The metric rules of a `counters:` block (without `when`)."""
    return {m: r for m, r in (counters or {}).items() if m != WHEN}


def applies(counters, shape) -> bool:
    """Whether the block's rules apply to `shape` (a dict of the shape's fields)."""
    for field, cond in ((counters or {}).get(WHEN) or {}).items():
        value = shape.get(field)
        if isinstance(cond, Mapping):
            (kind, bound), = cond.items()
            if value is None or not (value >= bound if kind == "at_least" else value <= bound):
                return False
        elif value != cond:
            return False
    return True


def check_when(counters, shape_fields, where):
    """ValueError when a `when` names a field the kernel's shapes do not have."""
    named = set().union(*[set(b.get(WHEN) or {}) for b in blocks(counters)])
    unknown = sorted(named - set(shape_fields))
    if unknown:
        raise ValueError(f"{where}: counters.when names {unknown}, not fields of the kernel's shape "
                         f"({', '.join(shape_fields)})")


def ratio(value, base) -> float:
    if base == 0:
        return 1.0 if value == 0 else math.inf
    return value / base


def holds(rule, value, base) -> bool:
    if isinstance(rule, Mapping) and next(iter(rule)) in _RATIO:
        (kind, bound), = rule.items()
        return _RATIO[kind](ratio(value, base), bound)
    return fingerprint.holds(dict(rule) if isinstance(rule, Mapping) else rule, value, base)


def describe(rule) -> str:
    if isinstance(rule, Mapping):
        (kind, bound), = rule.items()
        return f"{kind.replace('_', ' ')} {bound:g}"
    return rule


def applied(pathology_specs, shape):
    """[(pathology, metric, rule)] of the rules that apply to `shape`, over the variant's
    pathologies ({name: its yaml content}); and the pathologies whose `when` excludes it."""
    out, excluded = [], []
    for name, spec in pathology_specs.items():
        chosen = [b for b in blocks((spec or {}).get("counters")) if applies(b, shape)]
        if not chosen and (spec or {}).get("counters"):
            excluded.append(name)
        out += [(name, m, r) for b in chosen for m, r in rules(b).items()]
    return out, excluded


def verdict(triples, base, variant):
    """("confirmed" | "refuted" | "not measured", [(pathology, metric, rule, base value,
    variant value, holds)]) of the rules against the counters ({metric: value})."""
    checked = []
    for name, metric, rule in triples:
        if metric not in base or metric not in variant:
            checked.append((name, metric, rule, None, None, False))
            continue
        checked.append((name, metric, rule, base[metric], variant[metric], holds(rule, variant[metric], base[metric])))
    if any(b is None for _, _, _, b, _, _ in checked):
        return "not measured", checked
    return ("confirmed" if all(ok for *_, ok in checked) else "refuted"), checked


NO_EFFECT = "no effect"


def judged(state, significant) -> str:
    """The verdict as a report states it: a refuted mechanism on a variant whose time did not
    move (`significant` "no") is "no effect". The rules describe what a pathology changes when
    it acts; where it did not act (no_launch_bounds where the bound did not bind: the H200,
    2026-12-02, registers 48 -> 48 and 0.993x), a failed rule refutes nothing."""
    return NO_EFFECT if state == "refuted" and significant == "no" else state


def moved_most(base, variant, n=3, skip=()):
    """The n counters whose variant / base ratio lies farthest from 1 (in log), as
    [(metric, base, variant)]; counters that are 0 in both, or a % of peak, are left out
    when a count says the same more plainly."""
    scored = []
    for metric, b in base.items():
        v = variant.get(metric)
        if v is None or metric in skip or metric in _NOT_MOVERS or (b == 0 and v == 0):
            continue
        r = ratio(v, b)
        scored.append((math.inf if r in (0, math.inf) else abs(math.log(r)), metric, b, v))
    scored.sort(key=lambda s: -s[0])
    return [(m, b, v) for _, m, b, v in scored[:n]]


def fmt(value) -> str:
    """A counter's value, short: 4.24 M, 23.1 K, 52.3, 0."""
    if value is None:
        return "-"
    for scale, unit in ((1e9, " G"), (1e6, " M"), (1e3, " K")):
        if abs(value) >= scale:
            return f"{value / scale:.3g}{unit}"
    return f"{value:.3g}"


def counters_of(row, who):
    """{metric: value} of a ranking row's `ncu.<who>.` metrics (NaN dropped)."""
    prefix = f"ncu.{who}."
    return {k[len(prefix):]: float(v) for k, v in row.items()
            if isinstance(k, str) and k.startswith(prefix) and v == v and v is not None}


def mechanism_rows(ranked):
    """Per profiled job: pathology, shape, verdict, the deciding counters `base -> variant`
    (a failed rule marked), and for a refuted one the counters that moved most instead."""
    rows = []
    for _, r in ranked.iterrows():
        base, variant = counters_of(r, "base"), counters_of(r, "variant")
        verdict_text = r.get("counters_verdict")
        if not base or not isinstance(verdict_text, str):
            continue
        triples = [tuple(t) for t in json.loads(r.get("counters") or "[]")]
        state, checked = verdict(triples, base, variant) if triples else (verdict_text, [])
        state = judged(state, r.get("significant"))
        deciding = "; ".join(
            f"{'' if ok else 'FAILS '}{m} {fmt(b)} -> {fmt(v)} ({describe(rule)})"
            for _, m, rule, b, v, ok in checked)
        moved = ""
        if state == "refuted":
            named = {m for _, m, *_ in checked}
            moved = "; ".join(f"{m} {fmt(b)} -> {fmt(v)}" for m, b, v in moved_most(base, variant, skip=named))
        rows.append({"pathology": r["pathology"], "shape": r["shape"],
                     "mechanism": state if triples else verdict_text,
                     "deciding counters (base -> variant)": deciding or "-",
                     "moved most instead": moved or "-"})
    return rows


def as_lines(view):
    """mechanism_rows as text: a line per job, its counters indented below (a table of them
    would be hundreds of characters wide)."""
    lines = []
    for _, r in view.iterrows():
        lines.append(f"{r['pathology']} @ {r['shape']}: {r['mechanism']}")
        lines += [f"    {c}" for c in r["deciding counters (base -> variant)"].split("; ") if c != "-"]
        if r["moved most instead"] != "-":
            lines.append(f"    moved most instead: {r['moved most instead']}")
    return "\n".join(lines)
