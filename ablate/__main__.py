"""The Hydra app: one job = one variant of one kernel, built, checked and timed against the
base on one shape, and logged to MLflow in the kernel's experiment.

    python -m ablate                                       # the default kernel's base, default shape
    python -m ablate -m 'pathology=glob(*)' shape=s512     # every pathology, one job each
    python -m ablate -m 'pathology=glob(*)' mode=static    # no GPU: the binaries only
    python -m ablate -m kernel=rmsnorm 'pathology=glob(*)' 'shape=glob(*)'   # another kernel

The kernel (`kernel=NAME`, a plugin: ablate/plugins.py) is read off the command line before
Hydra starts, so that Hydra sees its pathologies and shapes and no other kernel's. A job that
fails (build_failed, crashed, timeout, incorrect) is recorded and the sweep goes on; bad
input (an unknown kernel, a shape, bench or pathology config that cannot work) stops before
anything is built, with a message naming the problem.
"""
import functools
import json
import logging
import os
import re
import sys
import traceback

import hydra
from hydra.core.hydra_config import HydraConfig
from hydra.types import RunMode
from omegaconf import OmegaConf

from ablate.gpu import gpus
from ablate.sweep import progress
from ablate.sweep.callbacks import SWEEP_RUN_ENV
from ablate.gpu.worker import result

log = logging.getLogger("ablate")
gpus.register_resolver()  # ${ablate_gpus:} in conf/hydra/launcher/gpus.yaml

from ablate.paths import ROOT
_said_no_gpu = False  # the fallback is said once per process, not once per job


def validated(cfg):
    """config.checked, or SystemExit naming the problem when the config is bad."""
    from ablate.job.config import checked

    try:
        return checked(cfg)
    except ValueError as e:
        # A swept value (shape.seq=0,512) gets here only after the callback's checks and
        # builds: the sweep stops, and its parent run says it failed.
        if parent_run_id():
            from ablate.sweep import tracking
            tracking.end_sweep(parent_run_id(), "FAILED", cfg)
        raise SystemExit(f"ablate: {e}") from None


def gpu_available():
    """(True, None) when a CUDA device is visible, else (False, why)."""
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


def shape_metrics(build_result, info, spec, shape):
    """regs, smem_bytes (static + dynamic) and spill_bytes of the kernel instance the shape
    runs, as the kernel's spec picks it out (static.launched)."""
    from ablate.build.static import config_of, launched

    configs = info["configs"]
    names = [name for name in build_result.ptxas["kernels"] if launched(spec, name, shape, configs)]
    if len(names) != 1:
        return {}  # names that do not say: better no number than another instance's
    k = build_result.ptxas["kernels"][names[0]]
    config = next((c for c in configs if str(c["name"]) == config_of(spec, names[0], configs)), None)
    if config is None:
        return {}
    return {"regs": k["registers"], "smem_bytes": k["smem_bytes"] + int(config["smem_bytes"]),
            "spill_bytes": k["spill_store_bytes"] + k["spill_load_bytes"]}


@functools.cache
def read_sass(lib):
    """cuobjdump's instruction mix of a library; kept for the process, since a sweep reads
    the base's once per job and a library's name is the hash of what went into it."""
    from ablate.build import sass

    return sass.read(lib)


def static_job(plugin, variant, builds):
    """Static metrics of the variant and its fingerprint checked against the base."""
    from ablate.job import fingerprint
    from ablate.build.static import static_metrics

    var, base = builds[variant.name], builds["none"]
    var_sass, base_sass = read_sass(var.lib), read_sass(base.lib)
    metrics = static_metrics(var, plugin.spec, sass_report=var_sass)
    base_metrics = static_metrics(base, plugin.spec, sass_report=base_sass)
    problems = fingerprint.check(variant, metrics, base_metrics, var_sass["text"], base_sass["text"])
    metrics["fingerprint_ok"] = int(not problems)
    return result("static", metrics=metrics, error="; ".join(problems) or None)


def gpu_job(cfg, plugin, shape, variant, peers, builds, info):
    from ablate.gpu.worker import run_worker

    var = builds[variant.name]
    # Read off the build before timing, so nothing after the worker can lose its result.
    resources = shape_metrics(var, info, plugin.spec, shape)
    spec = {"kernel_dir": str(plugin.dir), "base_so": str(builds["none"].lib), "variant_so": str(var.lib),
            "shape": shape, "peers": peers, "launches": variant.launches,
            "bench": OmegaConf.to_container(cfg.bench, resolve=True)}
    out = run_worker(spec, cfg.bench.timeout_s)
    out["metrics"].update(resources)
    if cfg.bench.get("profile") and out["status"] == "ok":  # counters after the gate and the timing
        from ablate.gpu.profile import add_counters

        job = {**{k: spec[k] for k in ("kernel_dir", "base_so", "variant_so", "shape", "launches")},
               "seed": cfg.bench.seed}
        add_counters(out, job, spec["bench"], OmegaConf.select(cfg, "kernel.counters", default=None),
                     {n: variant.specs.get(n) for n in variant.pathologies}, shape)
    return out


def run_job(cfg, plugin, shape, variant, peers):
    """Build, then check and time (mode=gpu) or read the binary (mode=static): the result dict."""
    from ablate.build.compile import BuildError, build
    from ablate.build.library import Kernel
    from ablate.job.variant import variant_from_cfg

    base = variant_from_cfg({"none": None}, plugin.dir)
    try:
        builds = build([base, variant] if not variant.is_base else [base], cfg.build, plugin, ROOT)
    except BuildError as e:
        return result("build_failed", error=str(e))
    params = {"kernel": plugin.name, "shape_label": plugin.label(shape),
              "nvcc": nvcc_release(str(cfg.build.nvcc)), "arch": builds["none"].arch}
    for who, b in (("variant", builds[variant.name]), ("base", builds["none"])):
        if not b.ok:
            first = next((ln.strip() for ln in b.log.splitlines() if "error" in ln.lower()), "")
            return result("build_failed", params, artifacts={"build.log": b.log},
                          error=f"the {who} ({b.variant}) failed to build: {first} (log: {b.log_path})")
    var = builds[variant.name]
    info = Kernel(var.lib).info()
    artifacts = {"ptxas.log": var.log, "variant_info.json": json.dumps(info, indent=1)}
    params["build_cached"] = var.cached
    params["mode"] = effective_mode(cfg.mode, plugin)
    if params["mode"] == "static":
        out = static_job(plugin, variant, builds)
    else:
        out = gpu_job(cfg, plugin, shape, variant, peers, builds, info)
    out["params"] = {**params, **out["params"]}
    out["artifacts"] = {**artifacts, **out["artifacts"]}
    return out


def parent_run_id():
    """The sweep's parent MLflow run when this job is part of a multirun."""
    if HydraConfig.initialized() and HydraConfig.get().mode == RunMode.MULTIRUN:
        return os.environ.get(SWEEP_RUN_ENV)
    return None


# An absolute config path: the `ablate` command (an entry point) finds conf/ as `python -m ablate` does.
@hydra.main(version_base=None, config_path=str(ROOT / "conf"), config_name="config")
def main(cfg):
    from ablate.sweep import tracking

    plugin, shape, variant, peers = validated(cfg)
    try:
        out = run_job(cfg, plugin, shape, variant, peers)
    except Exception as e:  # recorded, never raised: the sweep goes on
        out = result("crashed", artifacts={"traceback.txt": traceback.format_exc()},
                     error=f"{type(e).__name__}: {e}")
    tracking.log_job(cfg, out, parent_run_id())
    m = out["metrics"]
    if "slowdown" in m:
        summary = f"slowdown {m['slowdown']:.3f} [{m['slowdown_lo']:.3f}, {m['slowdown_hi']:.3f}]"
    elif out["status"] == "static" and not out["error"]:
        summary = "fingerprint holds" if not variant.is_base else "the base"
    else:
        summary = out["error"] or ""
    line = f"{variant.name} on {HydraConfig.get().runtime.choices.get('shape')}: {out['status']} {summary}"
    log.info("%s", line)
    if parent_run_id():  # the sweep's progress line counts it (ablate/progress.py)
        progress.mark(HydraConfig.get().runtime.output_dir, out["status"], line)
    return out["status"]


# `ablate COMMAND ...`: the tools beside the app, each a module's main(argv).
COMMANDS = {
    "rank": ("ablate.report.rank", "main", "rank a sweep (--sweep ID, --kernel K; --compare A B: two sweeps)"),
    "ui": ("ablate.sweep.server", "ui", "MLflow's UI on the store"),
    "server": ("ablate.sweep.server", "main", "an MLflow tracking server over the store, for jobs on other machines"),
    "new-kernel": ("ablate.tools.new_kernel", "main", "a minimal kernel plugin to start from"),
    "benchmark": ("ablate.tools.benchmark", "main", "the base against the kernel's peers and the GPU's ceiling"),
    "sanitize": ("ablate.tools.sanitize", "main", "compute-sanitizer on every variant"),
}


def cli(argv=None):
    """The `ablate` command and `python -m ablate`: a tool of COMMANDS when the first word
    names one; else the kernel of the command line is shown to Hydra, then the app runs."""
    from ablate.job import plugins

    argv = sys.argv[1:] if argv is None else list(argv)
    if argv and argv[0] in COMMANDS:
        module, function, _ = COMMANDS[argv[0]]
        sys.argv = [f"ablate {argv[0]}", *argv[1:]]
        sys.exit(getattr(__import__(module, fromlist=[function]), function)(argv[1:]))
    try:
        plugins.choose(argv)
    except plugins.PluginError as e:
        sys.exit(f"ablate: {e}")
    main()


if __name__ == "__main__":
    # The app as the module ablate.__main__, not as __main__: a launcher that sends the jobs
    # to other processes (conf/hydra/launcher/) pickles `main` by its module's name.
    import importlib

    importlib.import_module("ablate.__main__").cli()
