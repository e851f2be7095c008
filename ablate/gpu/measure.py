"""The GPU half of a job, as the GPU child runs it (ablate/gpu/child.py): check base and
variant, then time base, variant and the kernel's peers side by side on the child's GPU, and
answer a Result (ablate/job/result.py) with the statistics, the GPU's state and its name and
UUID (the params `gpu` and `gpu_uuid`; the parent adds `gpu_index`: ablate/gpu/pool.py).
"""
import functools
import json

from ablate.gpu.kept import note_loaded
from ablate.job.result import Result


def _stat_metrics(prefix, samples, spec, shape):
    """Median, p10, p90 (us per launch), and the rates they mean: TFLOP/s when the kernel
    does floating-point work, GB/s of the fewest bytes it must move."""
    from ablate.gpu.stats import summary

    s = summary(samples, prefix)
    out = {f"{prefix}_us": s["median"], f"{prefix}_us_p10": s["p10"], f"{prefix}_us_p90": s["p90"],
           f"{prefix}_gbps": spec.bytes_moved(shape) / s["median"] / 1e3}
    if spec.flops(shape):
        out[f"{prefix}_tflops"] = spec.flops(shape) / s["median"] / 1e6
    return out


def _state_record(when, state):
    """GPU readings as flat metrics and params."""
    if not state.get("available"):
        return {}, {f"gpu_state_{when}": f"unavailable: {state.get('error')}"}
    metrics = {f"{key}_{when}": state[key] for key in
               ("sm_clock_mhz", "sm_clock_max_mhz", "mem_clock_mhz", "temperature_c", "power_w")
               if state.get(key) is not None}
    reasons = state.get("throttle_reasons")
    params = {f"throttle_{when}": "unknown" if reasons is None else ",".join(reasons) or "none"}
    return metrics, params


@functools.cache
def _kernel(plugin, path):
    """One handle per library for the child's life: every job loads the base again, and a
    library's name is the hash of what went into it."""
    from ablate.build.library import load

    note_loaded(path)  # a kept child serves the next sweep only while it is the same file
    return load(path, plugin.spec)


def _replicates(kspec, base, variant, shape, bench, spec, n_sets, device):
    """Time base, variant (launched spec["launches"] times: calibrations) and the peers in
    replicates until the slowdown is precise enough (timing.replicates). Every replicate
    gets input sets of its own, allocated while the earlier ones stay allocated, so that
    they lie elsewhere in memory; when the next would leave less than a quarter of the GPU's
    memory free, the oldest are released first, and `reused` says so.

    Returns {"replicates": one {candidate: samples} per replicate, "estimate": the final
    stats.slowdown, "stop_reason", "seconds", "launches": per sample, of the last replicate,
    "skipped": {peer: why}, "reused": bool}."""
    import numpy as np
    import torch

    from ablate.gpu import timing
    from ablate.gpu.stats import slowdown

    rng = np.random.default_rng(bench["seed"])
    held, skipped, launches, reused = [], {}, {}, False
    steps = []  # per replicate, (base, variant): the step of their samples (us per launch)
    need = n_sets * kspec.bytes_moved(shape)

    def take(i):
        nonlocal reused
        while held:
            free, total = torch.cuda.mem_get_info(device)
            if free - need >= total / 4:
                break
            held.pop(0)
            torch.cuda.empty_cache()
            reused = True
        sets = timing.make_inputs(kspec, shape, n_sets, bench["seed"] + 1 + i, device)
        held.append(sets)
        candidates, why, optional = timing.candidates(
            kspec, sets, shape, {"base": (base, 1), "variant": (variant, spec.get("launches", 1))},
            [p for p in spec["peers"] if p not in skipped])
        skipped.update(why)
        order = rng.permutation(list(candidates))
        samples, counts, dropped = timing.measure({n: candidates[n] for n in order}, n_sets, bench,
                                                  optional=optional)
        skipped.update(dropped)
        launches.update(counts)
        steps.append(tuple(timing.EVENT_RESOLUTION_US / counts[n] for n in ("base", "variant")))
        return samples

    def estimate(reps):
        return slowdown([r["base"] for r in reps], [r["variant"] for r in reps], bench["min_effect"],
                        resolution=steps[:len(reps)])

    reps, reason, seconds = timing.replicates(take, bench, estimate)
    held.clear()
    torch.cuda.empty_cache()
    return {"replicates": reps, "estimate": estimate(reps), "stop_reason": reason, "seconds": seconds,
            "launches": launches, "skipped": skipped, "reused": reused}


def gate_failure(checks):
    """Who failed the correctness gate, of {"base": check, "variant": check}: (the sides,
    comma-joined in that order: the param `failed_side` ablate/sweep/outcome.py reads; the
    error naming each), or None where both passed."""
    failed = [who for who, c in checks.items() if not c["ok"]]
    if not failed:
        return None
    return ",".join(failed), "; ".join(f"{who} failed the correctness gate: {checks[who]['error']}" for who in failed)


def gpu_job(spec):
    """Check base and variant, then time base, variant and the kernel's peers side by side."""
    import numpy as np
    import torch

    from ablate.gpu import gpu_state, peaks, timing
    from ablate.gpu.check import check
    from ablate.job.job import from_wire

    if not torch.cuda.is_available():
        raise RuntimeError("no CUDA device visible to the GPU worker")
    plugin, spec = from_wire(spec)
    peaks.use_dir(spec.get("peaks_dir"))  # the run's own, beside its build.dir (job.py)
    kspec = plugin.spec
    shape, bench = spec["shape"], spec["bench"]
    device = torch.device("cuda", torch.cuda.current_device())
    props = torch.cuda.get_device_properties(device)
    uuid = str(getattr(props, "uuid", "") or "") or None
    before = gpu_state.read(uuid, device.index)
    base, variant = (_kernel(plugin, spec[k]) for k in ("base_so", "variant_so"))
    params = {"gpu": props.name, "gpu_uuid": _uuid_text(uuid), "torch": torch.__version__, "cuda": torch.version.cuda,
              "driver": before.get("driver", "unavailable"), "bound": kspec.BOUND,
              "work": kspec.WORK, "inouts": ",".join(kspec.INOUTS) or "none"}
    if spec.get("sm_fraction"):  # half_sms: the variant on a green context of part of the SMs
        from ablate.gpu import green

        try:
            variant, sms = green.on_green_stream(variant, device.index, float(spec["sm_fraction"]))
        except green.GreenContextError as e:
            return Result("not_applicable", params, error=f"green contexts are unavailable on this machine: {e}")
        params.update({k: str(v) for k, v in sms.items()})
    artifacts = {}

    # The gate: both must be right before either is timed (the base too: a slowdown against
    # a wrong base means nothing).
    tolerance = bench.get("tolerance")
    checks = {who: check(k, shape, tolerance, seed=bench["seed"])
              for who, k in (("base", base), ("variant", variant))}
    metrics = {"rel_err": checks["variant"]["rel_err"], "base_rel_err": checks["base"]["rel_err"],
               "tolerance": kspec.tolerance(shape) if tolerance is None else tolerance}
    if failed := gate_failure(checks):
        params["failed_side"], error = failed
        return Result("incorrect", params, metrics, artifacts, error)

    n_sets = timing.input_set_count(bench["l2"], props.L2_cache_size, kspec.bytes_moved(shape))
    timed = _replicates(kspec, base, variant, shape, bench, spec, n_sets, device)
    reps = timed["replicates"]
    after = gpu_state.read(uuid, device.index)

    pooled = {name: np.concatenate([r[name] for r in reps if name in r]) for name in reps[0]}
    restores = pooled.pop(timing.RESTORE, None)
    if restores is not None:  # what each launch's inout restore adds to base and variant alike
        metrics[f"{timing.RESTORE}_us"] = float(np.median(restores))
    for name, times in pooled.items():
        metrics.update(_stat_metrics(name, times, kspec, shape))
    # peer_us: the first peer of the job's list that ran, the reference of record.
    ran = [p for p in spec["peers"] if p in pooled]
    if ran:
        metrics.update(_stat_metrics("peer", pooled[ran[0]], kspec, shape))
        params["peer"] = ran[0]
    # The slowdown and its interval over the replicates (stats.py), and what ended them.
    estimate = dict(timed["estimate"])
    estimate["slowdown_half_width"] = estimate.pop("half_width")
    metrics.update(estimate, timing_s=timed["seconds"])
    params.update({"stop_reason": timed["stop_reason"], "replicate_inputs": "reused" if timed["reused"] else "fresh"})
    # The fraction of the GPU's measured ceiling of the kernel's kind of work (peaks.py).
    name, value, unit = peaks.peak(kspec.WORK, device.index)
    rate = "gbps" if name == "peak_gbps" else "tflops"
    if bench.get("profile"):  # the roofline (ablate/report/roofline.py) stands under two ceilings
        params["roof"] = peaks.roof_of(kspec.WORK)
        metrics.update(peak_gbps=peaks.ceiling("memory", device.index),
                       peak_tflops=peaks.ceiling(params["roof"], device.index))
    if value:  # None: a kind of work this GPU lacks (FP8 before compute capability 8.9)
        metrics[name] = value
        for who in ("base", "variant"):
            if f"{who}_{rate}" in metrics:
                metrics[f"{who}_peak_fraction"] = metrics[f"{who}_{rate}"] / value
    for when, state in (("before", before), ("after", after)):
        m, p = _state_record(when, state)
        metrics.update(m)
        params.update(p)
    params.update({"input_sets": n_sets, **{f"launches_{n}": c for n, c in timed["launches"].items()}})
    params.update({f"peer_{p}_skipped": why[:500] for p, why in timed["skipped"].items()})
    artifacts["samples.json"] = json.dumps({"replicates": [{n: np.round(t, 4).tolist() for n, t in r.items()}
                                                           for r in reps]})
    artifacts["gpu_state.json"] = json.dumps({"before": before, "after": after}, indent=1)
    if spec.get("insitu"):  # what the variant costs a whole model step (ablate/gpu/insitu.py)
        failed = _in_situ(plugin, base, variant, spec, estimate["slowdown"], metrics, params, artifacts)
        if failed:
            return Result("crashed", {**params, "failed_side": "insitu"}, metrics, artifacts, failed)
    return Result("ok", params, metrics, artifacts)


def _in_situ(plugin, base, variant, spec, kernel_slowdown, metrics, params, artifacts):
    """The step's metrics, params and samples added to the job's; the error where the workload could
    not measure the kernel or raised (the job is then recorded failed, its kernel figures kept)."""
    import traceback

    from ablate.gpu import insitu

    if spec.get("sm_fraction"):
        params["step_not_measured"] = ("half_sms runs the variant on a green context's own stream, outside the "
                                       "model's stream order")
        return None
    try:
        m, p, samples = insitu.measure(plugin, base, variant, kernel_slowdown, spec["insitu"], spec["bench"]["seed"],
                                       spec["bench"]["min_effect"], variant_launches=spec.get("launches", 1))
    except insitu.InSituError as e:
        return f"in situ: {e}"
    except Exception as e:  # noqa: BLE001 - the workload's own failure is this job's, recorded
        traceback.print_exc()
        text = str(e).strip().splitlines()
        return f"in situ: the workload {spec['insitu']['workload']} raised {type(e).__name__}: {text[0] if text else ''}"
    metrics.update(m)
    params.update(p)
    artifacts["step_samples.json"] = samples
    return None


def _uuid_text(uuid):
    """torch's device UUID as nvidia-smi writes it (GPU-xxxxxxxx-...)."""
    if not uuid:
        return "unknown"
    return uuid if uuid.startswith("GPU-") else f"GPU-{uuid}"


def checked_gpu_job(spec):
    """gpu_job (or, for a spec {"autotune": ...}, the autotuner's run: ablate/gpu/autotune.py),
    then one synchronize: an error a kernel left pending (and any sticky error a
    caught exception hid) is raised in this job, which is then crashed, never in the next."""
    import torch

    if "autotune" in spec:  # a base at a shape: an autotuner run here, or the kernel's candidates timed
        from ablate.gpu import autotune

        out = autotune.tune_job(spec["autotune"], spec.get("bench"))
    else:
        out = gpu_job(spec)
    torch.cuda.synchronize()
    return out
