"""Whether a run stands, as its exit status: non-zero, with one line saying why, when no job
produced a result, or when the base itself failed at a shape; 0 when only variants failed
(a crashed, incorrect or unbuildable variant is a result, recorded, and the sweep went on).

The base is timed inside every job (the `none` job times it against itself; each variant's
job checks and times it beside the variant), so a job's record says whether the base failed
there (`base_failed`):
- the job's variant is the base (`none`, or a calibration's null variant) and it ended
  build_failed, crashed, timeout or incorrect;
- or its param `failed_side` names the base: its build failed (ablate/pipeline.py; a build
  that could not start at all, nvcc missing, builds no base either) or its correctness gate
  did (ablate/gpu/measure.py, gate_failure).
A crash of the GPU child while it runs a variant's job is the variant's: the child runs both,
and the `none` job at that shape says whether the base crashes alone.

A job *produced a result* when its stages ran to a status (any of ablate/job/result.py's):
not when ablate itself raised inside it (its traceback kept as `crashed`), nor when Hydra
recorded it failed. Each job of a sweep writes both in its progress mark (ablate/sweep/
progress.py), wherever it ran; the launching process reads the marks once the last job has
ended (SweepSetup.on_multirun_end) and `ablate.__main__.entry` turns the line into the exit.
"""
import json
from pathlib import Path

BASE_FAILURES = ("build_failed", "crashed", "timeout", "incorrect")
_failure: list[str] = []  # this process's run: why it failed, once decided


def base_failed(is_base: bool, status: str, params: dict) -> bool:
    """Whether a job's record says the base failed at its shape (the module's rules)."""
    if status not in BASE_FAILURES:
        return False
    return is_base or "base" in str(params.get("failed_side", "")).split(",")


def fields(job, out, raised: bool) -> dict:
    """What a job's mark says of the run's outcome: whether it produced a result, whether the
    base failed, at which shape."""
    return {"result": not raised, "base_failed": base_failed(job.variant.is_base, out.status, out.params),
            "shape": job.shape_name}


def verdict(marks: list[dict], total: int) -> str | None:
    """The one line saying why a run of `total` jobs failed, from their marks; None when it
    stands."""
    broken = [m for m in marks if m.get("base_failed")]
    if broken:
        shapes = sorted({str(m.get("shape")) for m in broken})
        return (f"the base failed at {', '.join(shapes)}, so no slowdown there means anything: "
                f"{broken[0].get('summary') or broken[0].get('status')}")
    if total and not any(m.get("result") for m in marks):
        first = next((m for m in marks if m.get("summary")), None)
        return (f"no job of {total} produced a result"
                + (f": {first['summary']}" if first else " (none of them recorded its end)"))
    return None


def of_sweep(sweep_dir, total: int, mark_name: str) -> str | None:
    """verdict() of the marks the jobs of a sweep left under `sweep_dir`."""
    marks = []
    for path in sorted(Path(sweep_dir).glob(f"**/{mark_name}")):
        try:
            marks.append(json.loads(path.read_text()))
        except (OSError, ValueError):
            continue
    return verdict(marks, total)


def fail(line: str | None) -> None:
    """Record why this process's run failed (None: it stands); the last word wins."""
    _failure.clear()
    if line:
        _failure.append(line)


def failure() -> str | None:
    return _failure[0] if _failure else None


def empty_selection(config) -> str:
    """The line for a multirun of no job: each glob of the command line that matches none of
    the kernel's options in its group, with what the kernel has."""
    from hydra.core.global_hydra import GlobalHydra
    from hydra.core.override_parser.overrides_parser import OverridesParser
    from hydra.core.override_parser.types import Glob

    kernel = config.get("kernel", {}).get("name", "?")
    loader = GlobalHydra.instance().config_loader()
    lines = []
    for override in OverridesParser.create(config_loader=loader).parse_overrides(list(config.hydra.overrides.task)):
        value = override.value()
        if not isinstance(value, Glob):
            continue
        group = override.key_or_group
        names = sorted(loader.get_group_options(group))
        if not value.filter(names):
            lines.append(f"{override.input_line} matches no {group} of kernel {kernel}; it has: "
                         f"{', '.join(names) or 'none'}")
    return "; ".join(lines) or (f"the sweep has no job ({' '.join(config.hydra.overrides.task)}): "
                                "nothing to run")
