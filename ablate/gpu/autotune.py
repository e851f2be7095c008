"""An autotuned Triton kernel's base at a job's shape, asked of the GPU: the library's
autotuner run in the sweep's GPU child (ablate/gpu/pool.py's queue: after whatever that child
was timing, never beside it) as ablate/build/triton_autotune.py calls it, and the pick kept.

The pick is kept in the build folder (`autotune/<key>.json`, the key hashing the plugin's
provenance, the function, the shape, the spec's META and the GPU's model), so that every job
of a sweep, and every later sweep on that GPU model, builds the same base; delete the file to
tune again. A failure in the child (a config that cannot compile, a launch that faults) is
the job's recorded error naming the config it was timing (Job.failed), said once per shape,
and the sweep goes on; the child starts afresh, since a fault can leave its context unusable.
"""
import fcntl
import functools
import json
import logging
import os

from ablate.build import triton_autotune
from ablate.job.job import autotuned, from_wire, with_tuned
from ablate.job.result import Result

log = logging.getLogger("ablate")
_failures = {}  # record path: why the autotuner failed there, in this process
_said = set()  # record paths whose sources this process said


def tune_job(request) -> Result:
    """The GPU child's side (ablate/gpu/measure.py): ok with the record as the param
    `autotune`, or crashed naming the config."""
    import torch

    plugin, _ = from_wire(request)
    try:
        record = triton_autotune.tune(plugin.spec, request["shape"])
    except triton_autotune.AutotuneError as e:
        return Result("crashed", {"failed_side": "base", "autotune": "failed"}, error=str(e))
    record["gpu"] = torch.cuda.get_device_name()
    return Result("ok", {"autotune": json.dumps(record, sort_keys=True)})


@functools.cache
def gpu_model():
    """The model of the first GPU this process may use (nvidia-smi's name: no CUDA context in
    the sweep's parent), or None where none is listed."""
    from ablate.gpu import gpus

    return next((g.name for g in gpus.visible() if g.name), None)


def base_record(plugin, shape, build_dir, timeout_s=600.0) -> dict:
    """The autotuner's pick for `shape` on this GPU model ({"meta", "sources", ...}), from the
    build folder's record, else tuned now in the GPU child and recorded; {} where no GPU is
    listed. AutotuneError where the tuning failed."""
    model = gpu_model()
    if model is None:
        return {}
    path = triton_autotune.record_path(plugin, shape, build_dir, model)
    if str(path) in _failures:  # the sweep's other jobs at this shape: the same failure, not a second run
        raise triton_autotune.AutotuneError(_failures[str(path)])
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path.with_name(f".{path.stem}.lock"), "w") as lock:  # two sweeps tune one shape once
        fcntl.flock(lock, fcntl.LOCK_EX)
        record = json.loads(path.read_text()) if path.is_file() else None
        if record is None:
            record = _tuned_now(plugin, shape, path, timeout_s)
    if str(path) not in _said:  # once per shape and process: which name came from where
        _said.add(str(path))
        log.info("%s: %s", plugin.name, triton_autotune.said(record, len(record["configs"])))
    return record


def _tuned_now(plugin, shape, path, timeout_s) -> dict:
    """The GPU child's pick, written to `path` (its lock held by the caller)."""
    from ablate.gpu.pool import run_worker

    out = run_worker({"autotune": {"kernel_dir": str(plugin.dir), "shape": shape},
                      "bench": {"timeout_s": float(timeout_s)}}, float(timeout_s))
    if out.status != "ok":
        _failures[str(path)] = out.error or f"{plugin.spec.TRITON}: the autotuner's run ended {out.status}"
        raise triton_autotune.AutotuneError(_failures[str(path)])
    record = {**json.loads(out.params["autotune"]), "shape": shape, "function": plugin.spec.TRITON,
              "configs": triton_autotune.configs(plugin.spec)}
    tmp = path.with_name(f".{path.name}.{os.getpid()}")
    tmp.write_text(json.dumps(record, indent=1, default=str))
    os.replace(tmp, path)
    return record


def resolve(job):
    """The job on its autotuner's pick at its shape (with_tuned), where it is autotuned and a
    GPU is listed; else as it is (its base the first config, said once); marked failed where
    the autotuner failed there."""
    from ablate.build.compile import build_dir_of
    from ablate.paths import ROOT

    record = {}
    if autotuned(job):
        try:
            record = base_record(job.plugin, job.shape, build_dir_of(job.build, ROOT),
                                 float(job.bench.get("timeout_s") or 600))
        except triton_autotune.AutotuneError as e:
            return with_tuned(job, failed=str(e))
    if not record:  # an autotuned kernel without a GPU: its first config, said once (nothing otherwise)
        triton_autotune.say_static_base(job.plugin)
    return with_tuned(job, record)
