"""One job through its stages: build (ablate/build), then either read the binaries (static
mode) or check and time base and variant on the GPU (ablate/gpu), counters last when asked.
The job (ablate/job/job.py) is worked out before this and handed to each stage; the Result
(ablate/job/result.py) grows stage by stage and goes to tracking (ablate/sweep/tracking.py).
"""
import functools
import json
import logging
import re

from ablate.job.result import Result
from ablate.paths import ROOT

log = logging.getLogger("ablate")
_said_no_gpu = False  # the fallback is said once per process, not once per job


def job_of(cfg, shape_name=None):
    """The Job of a composed config (ablate/job/job.py, make_job), on its autotuner's pick at
    its shape where its Triton kernel is autotuned (ablate/gpu/autotune.py): what every entry
    point works out once and hands on."""
    from ablate.gpu.autotune import resolve
    from ablate.job.job import make_job

    return resolve(make_job(cfg, shape_name))


def run_job(job) -> Result:
    """Build, then check and time (mode=gpu) or read the binary (mode=static)."""
    from ablate.build.compile import BuildError, build, first_error
    from ablate.build.library import variant_info

    if job.failed:  # found while the job was worked out (its autotuner failed at the shape): nothing to build
        return Result("crashed", {"kernel": job.kernel, "failed_side": "base", "base_meta_from": "autotuner"},
                      error=job.failed)
    if job.opted_out:  # the kernel's yaml says so (kernel.not_applicable): nothing to build
        return Result("not_applicable", {"kernel": job.kernel, "not_applicable": "declared by the kernel"},
                      error="; ".join(f"{p}: kernel {job.kernel} declares it not applicable: {why}"
                                      for p, why in job.opted_out.items()))
    try:
        builds = build(job.variants, job.build, job.plugin, ROOT)
    except BuildError as e:  # no build could start (nvcc missing): no base either
        return Result("build_failed", {"failed_side": "base"}, error=str(e))
    base, var = builds[job.base.name], builds[job.variant.name]
    params = {"kernel": job.kernel, "shape_label": job.plugin.label(job.shape),
              "nvcc": nvcc_release(str(job.build.nvcc)), "arch": base.arch}
    for who, b in (("base", base), ("variant", var)):  # the base first: a failing base fails every job
        if not b.ok:
            first = first_error(b.log)
            error = f"the {who} ({b.variant}) failed to build: {first} (log: {b.log_path})"
            if who == "variant" and tuned_only(job.variant):  # a neighbour that cannot be: not a failure
                params["not_applicable"] = "does not compile"
                return Result("not_applicable", params, artifacts={"build.log": b.log},
                              error=f"not applicable: this neighbour does not compile: {error}")
            params["failed_side"] = who  # ablate/sweep/outcome.py reads it
            return Result("build_failed", params, artifacts={"build.log": b.log}, error=error)
    if getattr(job.plugin.spec, "META_FROM", None) == "autotune":  # which config of the autotuner is the base
        from ablate.build import triton_autotune

        params["base_meta"] = json.dumps(job.base.base_meta or job.plugin.spec.META, sort_keys=True)
        params["base_meta_from"] = "autotuner" if job.tuned else "first autotune config"
        sources = job.tuned.get("sources") or triton_autotune.static_sources(job.plugin, job.shape)
        params["base_meta_sources"] = triton_autotune.sources_text(sources)
        if job.tuned:
            params["autotune_gpu"] = str(job.tuned.get("gpu"))
            params["autotune_configs_timed"] = str(job.tuned.get("configs_timed"))
    elif job.base.base_meta:  # a configuration chosen by shape (spec.base_meta, or one of CANDIDATES)
        params["base_meta"] = json.dumps(job.base.base_meta, sort_keys=True)
        params["base_meta_from"] = "spec.base_meta(shape)" if job.candidate is None else "candidate"
    if job.candidate is not None:  # the configuration its base runs (ablate/job/candidates.py)
        params["base_candidate"] = job.candidate
        params["base_candidate_from"] = "timed" if job.tuned else "spec.DEFAULT_CANDIDATE"
        if job.tuned:
            params["autotune_gpu"] = str(job.tuned.get("gpu"))
            params["autotune_configs_timed"] = str(len(job.tuned.get("times_us", {})))
            params["autotune_s"] = str(job.tuned.get("seconds"))
    info = variant_info(var.lib, job.plugin.spec, job.variant.pathologies)
    artifacts = {"ptxas.log": var.log, "variant_info.json": json.dumps(info, indent=1)}
    params["build_cached"] = var.cached
    params["overrides"] = overrides(job.variant, base, var)
    if why := not_applicable(job.variant, base, var):
        params["not_applicable"] = "equal machine code"
        return Result("not_applicable", params, artifacts=artifacts, error=why)
    if why := beyond_the_arch(job.variant, var, info, job.plugin.spec, job.shape):
        params["not_applicable"] = "cannot launch"
        return Result("not_applicable", params, artifacts=artifacts, error=why)
    params["mode"] = effective_mode(job.mode, job.plugin)
    if params["mode"] == "static" and job.insitu is not None:
        params["step_not_measured"] = "static mode: the model step needs a GPU"
        _say_once("insitu", "insitu.workload %s: static mode times nothing, so the model step is not measured "
                  "(it runs on a GPU, after each job's kernel timing)", job.insitu["workload"])
    out = static_job(job, base, var, info) if params["mode"] == "static" else gpu_job(job, base, var, info)
    if out.status == "crashed" and tuned_only(job.variant):  # it built, but could not run (a launch refused)
        out.status, out.error = "not_applicable", f"not applicable: this neighbour could not run: {out.error}"
        params["not_applicable"] = "cannot launch"
    return out.add(params, artifacts=artifacts)


_said = set()


def _say_once(key, message, *args):
    if key not in _said:
        _said.add(key)
        log.warning(message, *args)


def overrides(variant, base, var) -> str:
    """What the variant sets that the base does not, in words a user could adopt: a Triton
    or CuTe DSL variant's effective meta-parameters that differ from the base's (its manifest's), a CUDA
    one's macros; `none` for the base or a change of flags, headers or launch only."""
    if str(var.lib).endswith((".triton.json", ".cute.json")):
        try:
            mine, theirs = (json.loads(open(b.lib).read()).get("meta", {}) for b in (var, base))
        except (OSError, ValueError):
            mine, theirs = {}, {}
        changed = {k: v for k, v in sorted(mine.items()) if theirs.get(k) != v}
    else:
        changed = dict(variant.macros)
    return " ".join(f"{k}={v}" for k, v in changed.items()) or "none"


def tuned_only(variant) -> bool:
    """Whether every pathology of the variant is a tunable's generated neighbour
    (ablate/job/tunables.py): one that cannot compile or launch is not applicable, with why."""
    return bool(variant.pathologies) and all(variant.specs[p].get("tuned") for p in variant.pathologies)


def over_limits(variant, var, info) -> str | None:
    """Why a tuned-only variant cannot launch on its arch (more shared memory or threads a
    block than the arch allows, from its build), or None."""
    from ablate.build.occupancy import arch_limits

    if not tuned_only(variant):
        return None
    try:
        limits = arch_limits(str(var.arch))
    except ValueError:
        return None
    static = max((k.get("smem_bytes", 0) for k in (var.ptxas or {}).get("kernels", {}).values()), default=0)
    for config in info.get("configs", []):
        smem, threads = static + int(config.get("smem_bytes") or 0), int(config.get("threads") or 0)
        if smem > limits.smem_per_block:
            return (f"not applicable: this neighbour cannot launch on {var.arch}: config {config.get('name')} "
                    f"needs {smem} bytes of shared memory a block, the arch allows {limits.smem_per_block}")
        if threads > limits.max_threads_per_block:
            return (f"not applicable: this neighbour cannot launch on {var.arch}: config {config.get('name')} "
                    f"has {threads} threads a block, the arch allows {limits.max_threads_per_block}")
    return None


def cannot_fit(var, info, spec, shape) -> str | None:
    """Why the kernel instance `shape` launches in a pathology's build cannot launch at all: one
    block of it needs more registers, shared memory or threads than an SM holds (ptxas's
    registers and static shared memory for that instance, the variant info's threads and dynamic
    shared memory, judged by ablate.build.occupancy). None where it fits, and where the spec does
    not say which instance the shape launches (static.launched). Asked of pathologies' builds
    only: the base's failing is every job's failure, not a pathology's inapplicability. A
    pathology that drops __launch_bounds__ can leave ptxas free to take more registers than the
    SM has: cutlass_gemm's 128x192 ping-pong instances, 218 a thread under
    384 threads (nvcc 13.0; cudaErrorLaunchOutOfResources on the H100)."""
    from ablate.build.occupancy import arch_limits, occupancy

    found = launched_instance(var, info, spec, shape)
    if found is None or not int(found[1].get("threads") or 0):
        return None
    k, config = found
    threads, regs = int(config["threads"]), int(k["registers"])
    smem = int(k["smem_bytes"]) + int(config.get("smem_bytes") or 0)
    try:
        limits, fits = arch_limits(str(var.arch)), occupancy(str(var.arch), threads, regs, smem)
    except ValueError:
        return None
    if fits["blocks"]:
        return None
    need = {"registers": f"{threads} threads at {regs} registers a thread (ptxas), more than the "
                         f"{limits.regs_per_block} registers a block may hold",
            "shared_memory": f"{smem} bytes of shared memory a block, the arch allows {limits.smem_per_block}",
            "warps": f"{threads} threads a block, the arch allows {limits.max_threads_per_block}"}
    return (f"not applicable: the instance this shape runs ({config.get('name')}) cannot launch on {var.arch} "
            f"in this build: {need[fits['limited_by']]}")


def beyond_the_arch(variant, var, info, spec, shape=None) -> str | None:
    """Why a built variant cannot launch, or None: a tunable's neighbour over the arch's limits
    in any config (over_limits), or a pathology's build whose instance at `shape` does not fit
    an SM (cannot_fit)."""
    if why := over_limits(variant, var, info):
        return why
    return cannot_fit(var, info, spec, shape) if shape is not None and variant.pathologies else None


def cannot_launch(variant, var, spec, shape=None) -> str | None:
    """beyond_the_arch of a built variant, its variant info read only where there is something
    to judge (a tunable's neighbour, or a pathology's build at a shape)."""
    if not (tuned_only(variant) or shape is not None and variant.pathologies) or not var.ok:
        return None
    from ablate.build.library import variant_info

    try:
        info = variant_info(var.lib, spec, variant.pathologies)
    except (OSError, ValueError):
        return None  # a library that cannot say: run_job reads it again, and says why
    return beyond_the_arch(variant, var, info, spec, shape)


def timed_wire(job, builds) -> dict | None:
    """The spec run_job will hand the GPU worker for `job`, its variants built as in `builds`
    ({name: BuildResult}, the sweep's one build), or None where run_job stops before timing:
    the same checks, in its order. The sweep sends each such spec ahead of its job
    (ablate/gpu/worker.py, plan_ahead); a guess that is wrong costs time, never a result,
    since the worker times a spec sent ahead only for the job that brings that very spec."""
    base, var = builds.get(job.base.name), builds.get(job.variant.name)
    if job.opted_out or job.failed or base is None or var is None or not (base.ok and var.ok):
        return None
    if not_applicable(job.variant, base, var) or effective_mode(job.mode, job.plugin) != "gpu":
        return None
    if cannot_launch(job.variant, var, job.plugin.spec, job.shape):  # over the arch's limits: never timed
        return None
    return job.wire(base.lib, var.lib)


def built_wire(job):
    """timed_wire of `job` where its variants are built already (checked as `build` checks
    them, nothing compiled): the spec, or None where it will not be timed; False where
    something of it must be built first, so that its spec is not known yet."""
    from ablate.build.compile import build

    if job.opted_out or job.failed:
        return None
    builds = build(job.variants, job.build, job.plugin, ROOT, only_if_built=True)
    return False if builds is None else timed_wire(job, builds)


def not_applicable(variant, base, var) -> str | None:
    """Why a variant of generic pathologies only (conf/generic/) does not apply to the kernel:
    its machine code equals the base's, so there is nothing to measure (each pathology's
    `unchanged_means` says what that means); None when it applies, or is not of generic
    pathologies only (a hand-written pathology whose SASS equals the base's stays an error:
    fingerprint.check), or changes only its launch (half_sms)."""
    if not variant.generic or set(variant.generic) != set(variant.pathologies) or not variant.changes_build:
        return None
    if read_sass(var.lib)["text"] != read_sass(base.lib)["text"]:
        return None
    means = "; ".join(f"{p}: {variant.specs[p].get('unchanged_means') or 'it changes nothing here'}"
                      for p in variant.pathologies)
    return (f"not applicable to this kernel: {variant.name}'s machine code equals the base's "
            f"(so {means})")


def static_job(job, base, var, info) -> Result:
    """Static metrics of the variant, its fingerprint checked against the base (each
    pathology of a combination against the variant without it: ablate/job/fingerprint.py),
    and the seams its library reports changed held to those its patches replace."""
    from ablate.build.library import variant_info
    from ablate.build.static import static_metrics
    from ablate.job import fingerprint

    var_sass, base_sass = read_sass(var.lib), read_sass(base.lib)
    metrics = static_metrics(var, job.plugin.spec, sass_report=var_sass)
    base_metrics = static_metrics(base, job.plugin.spec, sass_report=base_sass)
    notes, problems = [], []
    rests = rest_metrics(job, problems)
    problems += fingerprint.check(job.variant, metrics, base_metrics, var_sass["text"], base_sass["text"],
                                  rests, notes)
    problems += seam_problems(job.variant, variant_info(base.lib, job.plugin.spec, ()), info)
    metrics["fingerprint_ok"] = int(not problems)
    return Result("static", params={"fingerprint_notes": "; ".join(notes)} if notes else {},
                  metrics=metrics, error="; ".join(problems) or None)


def rest_metrics(job, problems) -> dict:
    """{pathology: (name, static metrics, SASS text)} of each rest of a combined variant (the
    variant without that pathology), built here (cached: the interactions sweep has built
    most); a rest that fails to build is a problem named."""
    from ablate.build.compile import build
    from ablate.build.static import static_metrics

    if not job.rests:
        return {}
    builds = build(list(job.rests.values()), job.build, job.plugin, ROOT)
    out = {}
    for name, rest in job.rests.items():
        b = builds[rest.name]
        if not b.ok:
            problems.append(f"{name}: {rest.name} (the variant without it) failed to build: its fingerprint "
                            f"cannot be checked (log: {b.log_path})")
            continue
        report = read_sass(b.lib)
        out[name] = (rest.name, static_metrics(b, job.plugin.spec, sass_report=report), report["text"])
    return out


def seam_problems(variant, base_info, variant_info) -> list[str]:
    """Where the seams the compiled library reports changed (its variant info against the
    base's) are not those the variant's pathologies replace: a line naming both."""
    from ablate.build.seams import changed

    found = changed(base_info, variant_info)
    said = set(variant.seams.values())
    if found is None or found == said:
        return []
    owners = ", ".join(f"{n}: {s}" for n, s in variant.seams.items()) or "none"
    return [f"the library reports the seams {sorted(found) or 'none'} changed against the base, but the "
            f"pathologies replace {sorted(said) or 'none'} ({owners})"]


def gpu_job(job, base, var, info) -> Result:
    """The correctness gate and the timing in the sweep's GPU child, then the counters."""
    from ablate.gpu.worker import run_worker

    # Read off the build before timing, so nothing after the worker can lose its result.
    resources = shape_metrics(var, info, job.plugin.spec, job.shape)
    wire = job.wire(base.lib, var.lib)
    out = run_worker(wire, job.bench["timeout_s"])
    out.add(metrics=resources, keep=False)
    if job.bench.get("profile") and out.status == "ok":  # counters after the gate and the timing
        from ablate.gpu.profile import add_counters

        add_counters(out, job, wire)
    return out


def launched_instance(build_result, info, spec, shape):
    """(ptxas's record, the variant info's config) of the one kernel instance the shape runs, as
    the kernel's spec picks it out (static.launched), or None where the names do not say."""
    from ablate.build.static import config_of, launched

    configs = info.get("configs") or []
    kernels = (getattr(build_result, "ptxas", None) or {}).get("kernels", {})
    names = [name for name in kernels if launched(spec, name, shape, configs)]
    if len(names) != 1:
        return None  # names that do not say: better no number than another instance's
    config = next((c for c in configs if str(c["name"]) == config_of(spec, names[0], configs)), None)
    return None if config is None else (kernels[names[0]], config)


def shape_metrics(build_result, info, spec, shape):
    """regs, smem_bytes (static + dynamic) and spill_bytes of the kernel instance the shape
    runs (launched_instance)."""
    found = launched_instance(build_result, info, spec, shape)
    if found is None:
        return {}
    k, config = found
    return {"regs": k["registers"], "smem_bytes": k["smem_bytes"] + int(config["smem_bytes"]),
            "spill_bytes": k["spill_store_bytes"] + k["spill_load_bytes"]}


@functools.cache
def read_sass(lib):
    """cuobjdump's instruction mix of a library; kept for the process, since a sweep reads
    the base's once per job and a library's name is the hash of what went into it."""
    from ablate.build import sass

    return sass.read(lib)


def gpu_available():
    """(True, None) when a CUDA device is visible, else (False, why): as the kept GPU worker
    this process attached to found it, where there is one (ablate/gpu/worker.py: no torch to
    import here), else as torch says here, unless this machine has no NVIDIA device at all."""
    from ablate.build.compile import no_nvidia_device
    from ablate.gpu.worker import cuda_seen

    if (seen := cuda_seen()) is not None:
        return tuple(seen)
    if no_nvidia_device():  # no torch to import to learn that (compile.no_nvidia_device)
        return False, "no CUDA device is visible (this machine has no NVIDIA device)"
    try:
        import torch
    except ImportError:
        return False, "torch is not installed"
    if not torch.cuda.is_available():
        return False, "no CUDA device is visible"
    return True, None


def effective_mode(requested, plugin=None):
    global _said_no_gpu
    if requested != "gpu":
        return requested
    ok, why = gpu_available()
    if ok and plugin is not None:
        from ablate.build.compile import unavailable

        why = unavailable(plugin)
        ok = why is None
    if ok:
        return "gpu"
    if not _said_no_gpu:
        log.warning("%s: mode=gpu falls back to mode=static (build and read the binaries, no timing)", why)
        _said_no_gpu = True
    return "static"


def nvcc_release(nvcc):
    from ablate.build.compile import nvcc_version

    text = nvcc_version(nvcc)
    m = re.search(r"release ([\d.]+), V([\d.]+)", text)
    return m.group(2) if m else text.strip().splitlines()[-1]
