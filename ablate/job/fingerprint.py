"""Fingerprints: the static change a pathology must cause in the binary, against the base.

A pathology's yaml declares, under `fingerprint:`, a rule per static metric (names as
`ablate.build.static.static_metrics` returns them):

    fingerprint:
      sass.hmma_f16: zero            # increases | decreases | differs | same | zero | nonzero
      sass.hmma_f32: increases
      threads_per_block: {equals: 32}  # or {at_least: N} / {at_most: N}

A variant fails when a rule does not hold, when a pathology declares no fingerprint, or when
its SASS equals the base's (then the pathology changes nothing that runs), unless only its
launch differs by construction (half_sms: the base's library on half the SMs). A variant of
generic pathologies with the base's SASS never gets here: it is `not_applicable`
(ablate/pipeline.py).
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


def check(variant, metrics: dict, base_metrics: dict, sass_text: str,
          base_sass_text: str) -> list[str]:
    """Problems with `variant` (an ablate.job.variant.Variant) against the base, each a line
    naming the pathology and the numbers; [] when every fingerprint holds.

    `metrics` and `base_metrics` are `static_metrics(...)` of the variant and of the base;
    the SASS texts are `sass.read(lib)["text"]` of each. The base itself has nothing to
    check."""
    if variant.is_base:
        return []
    problems = []
    for name in variant.pathologies:
        fingerprint = variant.specs.get(name, {}).get("fingerprint")
        if not fingerprint:
            problems.append(f"{name}: no fingerprint: declare in its yaml the static change it "
                            "must cause against the base (see docs/design.md, Fingerprints)")
            continue
        for metric, rule in fingerprint.items():
            if metric not in metrics or metric not in base_metrics:
                problems.append(f"{name}: fingerprint metric {metric} was not measured "
                                f"(variant {variant.name})")
                continue
            value, base = metrics[metric], base_metrics[metric]
            if not holds(rule, value, base):
                problems.append(f"{name}: fingerprint {metric}: {describe(rule)} does not hold: "
                                f"{variant.name} has {value}, the base {base}")
    if sass_text == base_sass_text and getattr(variant, "changes_build", True):
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
