"""Fingerprints: the static change a pathology must cause in the binary, against the base.

A pathology's yaml declares, under `fingerprint:`, a rule per static metric (names as
`ablate.build.static.static_metrics` returns them):

    fingerprint:
      sass.hmma_f16: zero            # increases | decreases | differs | same | zero | nonzero
      sass.hmma_f32: increases
      threads_per_block: {equals: 32}  # or {at_least: N} / {at_most: N}

A variant fails when a rule does not hold, when a pathology declares no fingerprint (a
tunable's generated neighbour, ablate/job/tunables.py, needs none: its SASS must differ, and
equal SASS makes it not applicable), or when
its SASS equals the base's (then the pathology changes nothing that runs), unless only its
launch differs by construction (half_sms: the base's library on half the SMs). A variant of
generic pathologies with the base's SASS never gets here: it is `not_applicable`
(ablate/pipeline.py).

A combined variant (`pathology=[a,b]`, the interactions sweep's pairs and inversion) holds each
pathology's rules where they mean what they meant alone. A rule was written for the pathology
against the base; in a combination the other pathologies may change the same metric (one
makes every load scalar, the other's `sass.ldg_128: same` then compares zeros with the
base's count). So each pathology p is checked against the variant without p, its *rest*
(the other pathologies together, built beside it; for a single, the base): a comparison
rule (increases, decreases, same, differs) compares the variant with its rest, a bound
(zero, nonzero, equals, at_least, at_most) reads the variant. A rule that does not hold
fails only where the rest leaves that metric as the base has it (there the rule means what
it meant alone); where the rest changed it too, the pathologies overlap on it and the rule
is reported as a note, not a failure. A pathology whose variant's SASS equals its rest's is
masked by the others: a note too (an interaction to measure, not a broken variant). The
combination fails only on what no overlap explains: a rule broken on a metric no other
pathology touched, no fingerprint, or SASS equal to the base's.
"""
import re
from collections.abc import Mapping

from ablate.build.sass import CLASSES

METRICS = ("regs", "smem_bytes", "spill_bytes", "threads_per_block", "occupancy_blocks",
           "occupancy_warps") + tuple(f"sass.{c}" for c in CLASSES)
# Per config of the variant info (static.py): d64.regs, fp16_h8k.sass.ldg_128, ...
_PER_CONFIG = re.compile(r"^(?!sass\.)[A-Za-z0-9_]+\.(.+)$")

_COMPARE = {
    "increases": lambda v, b: v > b,
    "decreases": lambda v, b: v < b,
    "differs": lambda v, b: v != b,
    "same": lambda v, b: v == b,
    "zero": lambda v, b: v == 0,
    "nonzero": lambda v, b: v != 0,
}
_BOUND = {
    "equals": lambda v, n: v == n,
    "at_least": lambda v, n: v >= n,
    "at_most": lambda v, n: v <= n,
}


def validate(fingerprint) -> None:
    """Raise ValueError naming the metric or rule when `fingerprint` is malformed."""
    if not isinstance(fingerprint, Mapping):
        raise ValueError(f"must map metric names to rules, got {fingerprint!r}")
    for metric, rule in fingerprint.items():
        if not _known_metric(metric):
            raise ValueError(f"unknown metric {metric!r}; known: {', '.join(METRICS)} "
                             "(each also per config, as <config>.<metric>, e.g. d64.regs)")
        if isinstance(rule, str):
            if rule not in _COMPARE:
                raise ValueError(f"{metric}: unknown rule {rule!r}; use one of "
                                 f"{sorted(_COMPARE)} or {{equals|at_least|at_most: N}}")
            continue
        if not (isinstance(rule, Mapping) and len(rule) == 1 and next(iter(rule)) in _BOUND):
            raise ValueError(f"{metric}: rule {rule!r} must be one of {sorted(_COMPARE)} or "
                             "a single {equals|at_least|at_most: N}")
        bound = next(iter(rule.values()))
        if isinstance(bound, bool) or not isinstance(bound, (int, float)):
            raise ValueError(f"{metric}: {rule!r} needs a number")


def _absent_config(metric, metrics, base_metrics):
    """The config a per-config metric (fp16_large.regs) names where neither the variant's nor the
    base's metrics hold any of that config (a kernel that builds one configuration per shape:
    ablate/job/candidates.py), else None."""
    if not _PER_CONFIG.match(metric):
        return None
    config, held = metric.split(".", 1)[0], [k for k in (*metrics, *base_metrics) if _PER_CONFIG.match(k)]
    if not held or any(k.startswith(f"{config}.") for k in held):
        return None  # no config at all (a metric that does not exist), or one that is built
    return config


def check(variant, metrics: dict, base_metrics: dict, sass_text: str,
          base_sass_text: str, rests=None, notes=None) -> list[str]:
    """Problems with `variant` (an ablate.job.variant.Variant) against the base, each a line
    naming the pathology and the numbers; [] when every fingerprint holds.

    `metrics` and `base_metrics` are `static_metrics(...)` of the variant and of the base;
    the SASS texts are `sass.read(lib)["text"]` of each. The base itself has nothing to
    check. For a combined variant, `rests` maps each pathology to (name, metrics, SASS text)
    of the variant without it (module docstring); a pathology missing there is checked
    against the base. `notes`, a list, receives the overlaps that are not failures."""
    if variant.is_base:
        return []
    rests = rests or {}
    notes = [] if notes is None else notes
    problems = []
    for name in variant.pathologies:
        fingerprint = variant.specs.get(name, {}).get("fingerprint")
        if not fingerprint and variant.specs.get(name, {}).get("tuned"):
            continue  # a tunable's neighbour (ablate/job/tunables.py): no static prediction but "differs"
        if not fingerprint:
            problems.append(f"{name}: no fingerprint: declare in its yaml the static change it "
                            "must cause against the base (see docs/design.md, Fingerprints)")
            continue
        rest_name, rest, rest_text = rests.get(name, ("the base", base_metrics, base_sass_text))
        if name in rests and sass_text == rest_text:
            notes.append(f"{name}: masked in {variant.name}: its SASS equals that of {rest_name} (without "
                         f"{name}); its rules are not checked here")
            continue
        for metric, rule in fingerprint.items():
            if (config := _absent_config(metric, metrics, base_metrics)) is not None:
                notes.append(f"{name}: fingerprint {metric} not checked: neither build holds config {config} (a "
                             f"build compiles the configuration its shape runs)")
                continue
            if metric not in metrics or metric not in base_metrics or metric not in rest:
                problems.append(f"{name}: fingerprint metric {metric} was not measured "
                                f"(variant {variant.name})")
                continue
            value, against = metrics[metric], rest[metric]
            if holds(rule, value, against):
                continue
            if name not in rests:
                problems.append(f"{name}: fingerprint {metric}: {describe(rule)} does not hold: "
                                f"{variant.name} has {value}, the base {base_metrics[metric]}")
            elif against != base_metrics[metric]:
                notes.append(f"{name}: fingerprint {metric}: {describe(rule)} not checked in {variant.name}: "
                             f"the other pathologies change {metric} too (the base {base_metrics[metric]}, "
                             f"{rest_name} {against}, {variant.name} {value})")
            else:
                problems.append(f"{name}: fingerprint {metric}: {describe(rule)} does not hold in "
                                f"{variant.name}: it has {value}, {rest_name} (without {name}) {against}, "
                                f"as the base")
    # half_sms runs the base's very library on part of the SMs: only its launch differs; so does a
    # hand-written pathology that says `launch_only:` (its macros change the host's launch
    # arguments, e.g. a tile scheduler's raster, and no device code), when it is all the variant is
    launch_only = ((bool(getattr(variant, "sm_fraction", None)) and not getattr(variant, "changes_build", True))
                   or (bool(getattr(variant, "launch_only", ()))
                       and set(variant.launch_only) == set(variant.pathologies)))
    if sass_text == base_sass_text and not launch_only:
        count = sum(1 for line in sass_text.splitlines() if line.startswith("  "))
        problems.append(f"{variant.name}: SASS equals the base's ({count} instructions): the "
                        "pathology changes nothing in the machine code")
    return problems


def holds(rule, value, base) -> bool:
    """Whether `rule` holds for the variant's `value` against the base's `base`."""
    if isinstance(rule, str):
        return _COMPARE[rule](value, base)
    (kind, bound), = rule.items()
    return _BOUND[kind](value, bound)


def describe(rule) -> str:
    if isinstance(rule, str):
        return rule
    (kind, bound), = rule.items()
    return f"{kind} {bound}"


def _known_metric(metric) -> bool:
    if not isinstance(metric, str):
        return False
    m = _PER_CONFIG.match(metric)
    return (m.group(1) if m else metric) in METRICS
