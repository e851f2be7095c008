"""A job's base at its shape, asked of the GPU: an autotuned Triton kernel's, the library's
autotuner run in the sweep's GPU child (ablate/gpu/pool.py's queue: after whatever that child
was timing, never beside it) as ablate/build/triton_autotune.py calls it; a kernel's that
declares CANDIDATES (ablate/job/candidates.py), each candidate built here, then checked and
timed in that child, alternated under the timing protocol (ablate/gpu/timing.py), with the
kernel's first peer beside them; the pick kept either way, in one cache and one record.

The pick is kept in the build folder (`autotune/<key>.json`, the key hashing the plugin's
provenance, the function, the shape, the spec's META and the GPU's model), so that every job
of a sweep, and every later sweep on that GPU model, builds the same base; delete the file to
tune again. A failure in the child (a config that cannot compile, a launch that faults) is
the job's recorded error naming the config it was timing (Job.failed), said once per shape,
and the sweep goes on; the child starts afresh, since a fault can leave its context unusable.
"""
import fcntl
import functools
import hashlib
import json
import logging
import os
from pathlib import Path

from ablate.build import triton_autotune
from ablate.job.job import autotuned, from_wire, timed_candidates, with_tuned
from ablate.job.result import Result
from ablate.paths import ROOT

log = logging.getLogger("ablate")
_failures = {}  # record path: why the autotuner failed there, in this process
_said = set()  # record paths whose sources this process said


def tune_job(request, bench=None) -> Result:
    """The GPU child's side (ablate/gpu/measure.py): ok with the record as the param
    `autotune`, or crashed naming the config."""
    import torch

    plugin, _ = from_wire(request)
    if "candidates" in request:
        return time_candidates(plugin, request, bench or {})
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
    record = _kept(path, lambda: _tuned_now(plugin, shape, path, timeout_s))
    if str(path) not in _said:  # once per shape and process: which name came from where
        _said.add(str(path))
        log.info("%s: %s", plugin.name, triton_autotune.said(record, len(record["configs"])))
    return record


def _kept(path, tune) -> dict:
    """The record at `path`, else `tune()`'s, made once: under the record's lock (two sweeps tune
    one shape once), and a failure remembered for the process (the sweep's other jobs at the
    shape fail the same way, without a second run)."""
    if str(path) in _failures:
        raise triton_autotune.AutotuneError(_failures[str(path)])
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path.with_name(f".{path.stem}.lock"), "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if path.is_file():
            return json.loads(path.read_text())
        try:
            return tune()
        except triton_autotune.AutotuneError as e:
            _failures[str(path)] = str(e)
            raise


def _write(path, record) -> None:
    tmp = path.with_name(f".{path.name}.{os.getpid()}")
    tmp.write_text(json.dumps(record, indent=1, default=str))
    os.replace(tmp, path)


def _tuned_now(plugin, shape, path, timeout_s) -> dict:
    """The GPU child's pick, written to `path` (its lock held by the caller)."""
    from ablate.gpu.pool import run_worker

    out = run_worker({"autotune": {"kernel_dir": str(plugin.dir), "shape": shape},
                      "bench": {"timeout_s": float(timeout_s)}}, float(timeout_s))
    if out.status != "ok":
        raise triton_autotune.AutotuneError(out.error or f"{plugin.spec.TRITON}: the autotuner's run ended {out.status}")
    record = {**json.loads(out.params["autotune"]), "shape": shape, "function": plugin.spec.TRITON,
              "configs": triton_autotune.configs(plugin.spec)}
    _write(path, record)
    return record


# ---- the fastest of the spec's CANDIDATES ------------------------------------------------------

def candidate_path(plugin, shape, build_dir, model) -> Path:
    """Where the pick among `plugin`'s candidates at `shape` on GPU `model` is kept: beside the
    autotuner's records (build_dir/autotune/<key>.json), the key hashing the plugin's sources,
    its candidates' builds, the shape and the model."""
    key = hashlib.sha256(json.dumps([plugin.sources_digest(), "candidates", plugin.spec.CANDIDATE_SETS, shape,
                                     model], sort_keys=True, default=str).encode()).hexdigest()[:16]
    return Path(build_dir) / "autotune" / f"{key}.json"


def candidate_record(job) -> dict:
    """The pick among the job's kernel's candidates at its shape on this GPU model (`picked`: the
    fastest, or a preferred one as fast within bench.min_effect; {"kind": "candidates", "candidate",
    "times_us", ...}), from the build folder's record, else built, checked and timed now and
    recorded; {} where no GPU is listed. AutotuneError where none could run."""
    from ablate.build.compile import build_dir_of

    model = gpu_model()
    if model is None:
        return {}
    path = candidate_path(job.plugin, job.shape, build_dir_of(job.build, ROOT), model)
    record = picked(job, _kept(path, lambda: _timed_now(job, path)))
    if str(path) not in _said:
        _said.add(str(path))
        log.info("%s: %s", job.plugin.name, said_candidates(record))
    return record


def said_candidates(record) -> str:
    """One line: the pick at the shape, how it compares, and what the timing cost."""
    times, name = record["times_us"], record["candidate"]
    others = sorted((n for n in times if n != name), key=times.get)
    runner = "" if not others else (f", then {others[0]} {times[others[0]]:.2f} us" if times[others[0]] >= times[name]
                                    else f", preferred to {others[0]} {times[others[0]]:.2f} us (within bench.min_effect)")
    peer = f"; {record['peer']} {record['peer_us']:.2f} us" if record.get("peer_us") else ""
    left = f"; left out: {', '.join(sorted(record['rejected']))}" if record.get("rejected") else ""
    return (f"the base at {record['shape']} on {record['gpu']}: {name} {times[name]:.2f} us"
            f"{runner}{peer} (timed {len(times)} of {len(record['candidates'])} candidates in "
            f"{record['seconds']:.1f} s{left})")


def _timed_now(job, path) -> dict:
    """The candidates worth timing at the job's shape, measured (measure_candidates); the record
    written to `path` (its lock held by the caller)."""
    from ablate.job import candidates

    record = measure_candidates(job, candidates.timed(job.plugin.spec, job.shape))
    _write(path, record)
    return record


def candidate_builds(job, names) -> dict:
    """{name: its build (ablate/build/compile.py)} of the base of `job` on each candidate of
    `names`, in one ninja run (what was built before is found again)."""
    from ablate.build.compile import build
    from ablate.job import candidates

    variants = {n: candidates.base_on(job.base, job.plugin.spec, n) for n in names}
    builds = build(list(variants.values()), job.build, job.plugin, ROOT)
    return {n: builds[v.name] for n, v in variants.items()}


def measure_candidates(job, names) -> dict:
    """Build the base of `job` on each candidate of `names` (one ninja run), then check and time
    them in the GPU child with the job's first peer: the record ({"kind": "candidates",
    "candidate": the pick (`picked`), "times_us", "peer", "peer_us", "rejected": {name: why}, "gpu",
    "build_s", "seconds", ...}). AutotuneError where none compiles or passes."""
    import time

    from ablate.build.compile import BuildError, first_error
    from ablate.gpu.pool import run_worker

    start = time.monotonic()
    shape = job.shape
    try:
        builds = candidate_builds(job, names)
    except BuildError as e:
        raise triton_autotune.AutotuneError(f"{job.kernel}: its candidates could not be built: {e}") from None
    rejected = {n: f"does not compile: {first_error(b.log)} (log: {b.log_path})" for n, b in builds.items() if not b.ok}
    libs = {n: str(b.lib) for n, b in builds.items() if b.ok}
    if not libs:
        raise triton_autotune.AutotuneError(f"{job.kernel}: none of its candidates at {job.shape_name} compiles: "
                                            + "; ".join(f"{n} {why}" for n, why in rejected.items()))
    built_s = time.monotonic() - start
    timeout_s = float(job.bench.get("timeout_s") or 600)
    out = run_worker({"autotune": {"kernel_dir": str(job.plugin.dir), "shape": shape, "candidates": libs,
                                   "peers": list(job.peers[:1])},
                      "bench": {**job.bench, "timeout_s": timeout_s}}, timeout_s)
    if out.status != "ok":
        raise triton_autotune.AutotuneError(out.error or f"{job.kernel}: timing its candidates ended {out.status}")
    timed = json.loads(out.params["autotune"])
    return picked(job, {"kind": "candidates", "shape": shape, "candidates": list(names), **timed,
                        "rejected": {**rejected, **timed.get("rejected", {})}, "build_s": round(built_s, 1),
                        "seconds": round(time.monotonic() - start, 1)})


def picked(job, record) -> dict:
    """`record` with its "candidate" the pick among its times under the job's bench.min_effect
    (`pick`; asked again of a kept record, so that the rule in force decides)."""
    from ablate.job import candidates

    preferred = [candidates.default(job.plugin.spec, job.shape), *record["candidates"]]
    return {**record, "candidate": pick(record["times_us"], preferred, float(job.bench.get("min_effect") or 0))}


def pick(times, preferred, tie) -> str:
    """The base among the candidates timed (`times`: {name: us}): the first of `preferred`
    (static mode's default, then the spec's order) within `tie` (bench.min_effect) of the fastest.
    Two within it are equal to the timing, and the median's noise would flip between them from
    run to run: cutlass_gemm at sq8k on two fresh H200s picked large (1711.5 us, n224 1718.6),
    then n192 (1687.5 us, large 1703.6), whose seams differ, so three pathologies of the first
    ranking were not applicable in the second (2026-12-03)."""
    fastest = min(times.values())
    return next(n for n in [*preferred, *times] if n in times and times[n] <= fastest * (1 + tie))


def time_candidates(plugin, request, bench) -> Result:
    """The GPU child's side: each candidate's library checked against the spec's reference (one
    that fails, or cannot run the shape, is left out, with why), then those that pass timed with
    the first peer in one measurement, alternated (timing.measure); ok with {"candidate": the
    fastest by median, "times_us": {candidate: median us}, "peer", "peer_us", "rejected", "gpu"}
    as the param `autotune`, or crashed where none passes."""
    import numpy as np
    import torch

    from ablate.build.library import load
    from ablate.gpu import timing
    from ablate.gpu.check import check
    from ablate.gpu.kept import note_loaded

    kspec, shape = plugin.spec, request["shape"]
    seed = int(bench.get("seed") or 0)
    kernels, rejected = {}, {}
    for name, lib in request["candidates"].items():
        try:
            note_loaded(lib)  # a kept child serves the next sweep only while it is the same file
            kernel = load(lib, kspec)
            checked = check(kernel, shape, bench.get("tolerance"), seed=seed)
        except Exception as e:  # noqa: BLE001 - a candidate that cannot run the shape is left out, named
            rejected[name] = f"cannot run the shape: {timing.first_line(e)}"
            torch.cuda.synchronize()
            continue
        if not checked["ok"]:
            rejected[name] = f"fails the correctness gate: {checked['error']}"
            continue
        kernels[name] = (kernel, 1)
    if not kernels:
        return Result("crashed", {"failed_side": "base", "autotune": "failed"},
                      error=f"{plugin.name}: no candidate passes at {shape}: "
                            + "; ".join(f"{n} {why}" for n, why in rejected.items()))
    props = torch.cuda.get_device_properties(torch.cuda.current_device())
    n_sets = timing.input_set_count(bench.get("l2", "cold"), props.L2_cache_size, kspec.bytes_moved(shape))
    sets = timing.make_inputs(kspec, shape, n_sets, seed + 1, "cuda")
    launchers, skipped, optional = timing.candidates(kspec, sets, shape, kernels, request.get("peers", []))
    order = [str(n) for n in np.random.default_rng(seed).permutation(list(launchers))]
    # a candidate whose graph cannot be captured is dropped, named, as a peer is
    samples, _, dropped = timing.measure({n: launchers[n] for n in order}, n_sets,
                                         {"warmup": bench.get("warmup", 5), "samples": bench.get("samples", 20),
                                          "min_sample_us": bench.get("min_sample_us", 2000)},
                                         optional=[*optional, *kernels])
    rejected.update({n: why for n, why in dropped.items() if n in kernels})
    times = {n: float(np.median(samples[n])) for n in kernels if n in samples}
    if not times:
        return Result("crashed", {"failed_side": "base", "autotune": "failed"},
                      error=f"{plugin.name}: no candidate could be timed at {shape}: "
                            + "; ".join(f"{n} {why}" for n, why in rejected.items()))
    peer = next((p for p in request.get("peers", []) if p in samples), None)
    record = {"candidate": min(times, key=times.get), "times_us": times, "rejected": rejected,
              "gpu": props.name, "peer": peer, "peer_us": float(np.median(samples[peer])) if peer else None}
    return Result("ok", {"autotune": json.dumps(record, sort_keys=True)})


def resolve(job):
    """The job on its base's pick at its shape (with_tuned): the fastest of its kernel's
    candidates, or its autotuner's pick, where a GPU is listed; else as it is (an autotuned
    kernel's base its first config, said once; a kernel of candidates on its DEFAULT_CANDIDATE);
    marked failed where the tuning failed there."""
    from ablate.build.compile import build_dir_of

    record = {}
    if timed_candidates(job):
        try:
            return with_tuned(job, candidate_record(job))
        except triton_autotune.AutotuneError as e:
            return with_tuned(job, failed=str(e))
    if autotuned(job):
        try:
            record = base_record(job.plugin, job.shape, build_dir_of(job.build, ROOT),
                                 float(job.bench.get("timeout_s") or 600))
        except triton_autotune.AutotuneError as e:
            return with_tuned(job, failed=str(e))
    if not record:  # an autotuned kernel without a GPU: its first config, said once (nothing otherwise)
        triton_autotune.say_static_base(job.plugin)
    return with_tuned(job, record)
