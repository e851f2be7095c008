"""The Hydra app: one job = one variant of one kernel, built, checked and timed against the
base on one shape, and logged to MLflow in the kernel's experiment.

    python -m ablate                                       # the default kernel's base, default shape
    python -m ablate -m 'pathology=glob(*)' shape=s512     # every pathology, one job each
    python -m ablate -m 'pathology=glob(*)' mode=static    # no GPU: the binaries only
    python -m ablate -m kernel=rmsnorm 'pathology=glob(*)' 'shape=glob(*)'   # another kernel

The kernel (`kernel=NAME`, a plugin: ablate/job/plugins.py) is read off the command line before
Hydra starts, so that Hydra sees its pathologies and shapes and no other kernel's. A job that
fails (build_failed, crashed, timeout, incorrect) is recorded and the sweep goes on; bad
input (an unknown kernel, a shape, bench or pathology config that cannot work) stops before
anything is built, with a message naming the problem. Each job is worked out once
(ablate/job/job.py), run through its stages (ablate/pipeline.py) and logged
(ablate/sweep/tracking.py).
"""
import logging
import os
import sys
import traceback

import hydra
from hydra.core.hydra_config import HydraConfig
from hydra.types import RunMode

from ablate.gpu import gpus
from ablate.job.result import Result
from ablate.paths import ROOT
from ablate.pipeline import run_job
from ablate.sweep import outcome, progress
from ablate.sweep.callbacks import SWEEP_RUN_ENV

log = logging.getLogger("ablate")
gpus.register_resolver()  # ${ablate_gpus:}: the GPUs a job may use, for launcher configs that count them


def validated(cfg):
    """The Job of this job's config (ablate/job/job.py), or SystemExit naming the problem."""
    from ablate.pipeline import job_of

    try:
        return job_of(cfg, HydraConfig.get().runtime.choices.get("shape"))
    except ValueError as e:
        # A swept value (shape.seq=0,512) gets here only after the callback's checks and
        # builds: the sweep stops, and its parent run says it failed.
        if parent_run_id():
            from ablate.sweep import tracking
            tracking.end_sweep(parent_run_id(), "FAILED", cfg)
        raise SystemExit(f"ablate: {e}") from None


def parent_run_id():
    """The sweep's parent MLflow run when this job is part of a multirun."""
    if HydraConfig.initialized() and HydraConfig.get().mode == RunMode.MULTIRUN:
        return os.environ.get(SWEEP_RUN_ENV)
    return None


# An absolute config path: the `ablate` command (an entry point) finds conf/ as `python -m ablate` does.
@hydra.main(version_base=None, config_path=str(ROOT / "conf"), config_name="config")
def main(cfg):
    from ablate.sweep import tracking

    job = validated(cfg)
    if HydraConfig.get().mode == RunMode.RUN and job.mode != "gpu":  # started by cli(), not needed
        from ablate.gpu.worker import stop_worker

        stop_worker(grace=0)
    if not parent_run_id():  # a sweep's callback checked the store before anything was built
        try:
            tracking.check_store(cfg)
        except tracking.StoreError as e:
            raise SystemExit(f"ablate: {e}") from None
    if HydraConfig.get().mode == RunMode.RUN and job.mode == "gpu":
        time_ahead(job)
    raised = False
    try:
        out = run_job(job)
    except Exception as e:  # recorded, never raised: the sweep goes on
        out = Result("crashed", artifacts={"traceback.txt": traceback.format_exc()},
                     error=f"{type(e).__name__}: {e}")
        raised = True
    if HydraConfig.get().mode == RunMode.RUN:  # its GPU child, idle now: kept for the next run, or ended
        from ablate.gpu.worker import stop_worker
        from ablate.job.job import keep_worker_s

        stop_worker(keep_s=keep_worker_s(cfg))
    tracking.log_job_soon(job, out, parent_run_id())  # in a sweep of this process, while the next jobs run
    level, line = job_line(job, out)
    log.log(level, "%s", line)
    ends = outcome.fields(job, out, raised)  # the run's exit status reads these (ablate/sweep/outcome.py)
    if parent_run_id():  # the sweep's progress line counts it (ablate/sweep/progress.py)
        gpu = out.params.get("gpu_index")
        progress.mark(HydraConfig.get().runtime.output_dir, out.status, line, **ends,
                      **({"gpu": str(gpu)} if gpu is not None else {}))
    elif HydraConfig.get().mode == RunMode.RUN:
        outcome.fail(outcome.verdict([{**ends, "status": out.status, "summary": line}], 1))
    return out.status


def time_ahead(job):
    """A single job timed here: its spec goes to the GPU worker now where its variants are
    built (pipeline.built_wire, worker.send_ahead: as a sweep sends its first jobs'), and
    the MLflow store is opened while the GPU times it (tracking.open_store), which the job's
    record needs next (on this project's 2-core CPU machine, the GPU's 2.9 s stood in for by
    a sleep: the record after the answer 3.5-3.6 s -> 0.1-0.2 s, the run 8.4-8.6 s -> 5.4-5.5 s;
    docs/benchmarks.md, "Sweep speed").
    Nothing where its spec is not known yet (a variant to build first: the job sends it when
    it gets there), it will not be timed, or the worker cannot take it now."""
    from ablate.build.compile import BuildError
    from ablate.gpu.worker import send_ahead
    from ablate.pipeline import built_wire
    from ablate.sweep import tracking

    try:
        wire = built_wire(job)
    except BuildError:  # run_job meets it and records it
        return
    if wire and send_ahead(wire):
        tracking.open_store(job.cfg, job.experiment)


def job_line(job, out):
    """(log level, line) of a finished job: INFO when it measured what it should, WARNING
    when it ran but its answer is a failure (incorrect, a fingerprint that does not hold or
    machine code equal to the base's), ERROR when it could not run (build_failed, crashed,
    timeout)."""
    m = out.metrics
    if "slowdown" in m:
        from ablate.gpu.stats import interval_text

        summary = f"slowdown {interval_text(m['slowdown'], m['slowdown_lo'], m['slowdown_hi'])}"
        if "step_slowdown" in m:  # in situ: what it costs the model's step, beside the kernel's
            summary += (f"; the step {interval_text(m['step_slowdown'], m['step_slowdown_lo'], m['step_slowdown_hi'], 'x', digits=4)}"
                        f" (share {100 * m['step_share']:.2f}%, 2x kernel {m['step_twice']:.4f}x)")
        elif (why := out.params.get("step_not_measured")) and not out.error:
            summary += f"; the step not measured: {why}"
        if out.error:  # measured, then failed after (in situ): the line says why, not the figure alone
            summary += f"; {out.error}"
    elif out.status == "static" and not out.error:
        summary = "fingerprint holds" if not job.variant.is_base else "the base"
    else:
        summary = out.error or ""
    if out.status in ("build_failed", "crashed", "timeout"):
        level = logging.ERROR
    elif out.status == "incorrect" or out.error:
        level = logging.WARNING
    else:
        level = logging.INFO
    return level, f"{job.variant.name} on {job.shape_name}: {out.status} {summary}"


# `ablate COMMAND ...`: the tools beside the app, each a module's main(argv).
COMMANDS = {
    "rank": ("ablate.report.rank", "main", "rank a sweep (--sweep ID, --kernel K; --compare A B: two sweeps)"),
    "ui": ("ablate.sweep.server", "ui", "MLflow's UI on the store"),
    "server": ("ablate.sweep.server", "main", "an MLflow tracking server over the store, for jobs on other machines"),
    "new-kernel": ("ablate.tools.new_kernel", "main", "a minimal kernel plugin to start from"),
    "benchmark": ("ablate.tools.benchmark", "main", "the base against the kernel's peers and the GPU's ceiling"),
    "sanitize": ("ablate.tools.sanitize", "main", "compute-sanitizer on every variant"),
    "stop-workers": ("ablate.gpu.worker", "stop_kept", "end your kept GPU workers now (keep_worker_s)"),
    "cache": ("ablate.build.cache", "main", "the build cache every checkout shares: its size; `clear` empties it"),
}


def entry():
    """The `ablate` command and `python -m ablate`: cli(), then end_now() with its exit status:
    1, after one line saying why, where the run failed (ablate/sweep/outcome.py: no job
    produced a result, or the base failed at a shape)."""
    code = cli()
    end_now(code)


def end_now(code=0):
    """End this process, with exit status `code`, now that its run is over, without Python's
    teardown of the modules it loaded (mlflow, SQLAlchemy, pandas, Hydra): ~1 s after the last line on this project's
    2-core CPU machine (docs/benchmarks.md, "Sweep speed"). The exit handlers run first
    (logging's among them: every log file is whole; the GPU worker's), and the standard
    streams are flushed. Where a thread other than the main one still runs (a launcher's
    pool, say), it returns instead, and the usual exit waits for that thread."""
    import atexit
    import contextlib
    import threading

    if any(t is not threading.main_thread() and t.is_alive() and not t.daemon for t in threading.enumerate()):
        if code:
            sys.exit(code)
        return
    atexit._run_exitfuncs()
    for stream in (sys.stdout, sys.stderr):
        with contextlib.suppress(Exception):
            stream.flush()
    os._exit(code)


def cli(argv=None):
    """The `ablate` command and `python -m ablate`: a tool of COMMANDS when the first word
    names one; else the kernel of the command line is shown to Hydra, then the app runs.
    Returns the run's exit status: 1 where it failed, its line printed (outcome.failure)."""
    from ablate.job import plugins

    outcome.fail(None)
    argv = sys.argv[1:] if argv is None else list(argv)
    if argv and argv[0] in COMMANDS:
        module, function, _ = COMMANDS[argv[0]]
        sys.argv = [f"ablate {argv[0]}", *argv[1:]]
        sys.exit(getattr(__import__(module, fromlist=[function]), function)(argv[1:]))
    try:
        argv = plugins.with_kernel_path(argv)  # ~ and relative folders, absolute before Hydra reads them
        plugins.choose(argv)
    except plugins.PluginError as e:
        sys.exit(f"ablate: {e}")
    sys.argv = [sys.argv[0], *argv]  # what Hydra's main reads
    if may_time_here(argv):
        from ablate.gpu.worker import prestart_worker

        # Their python, torch and CUDA start while Hydra composes (stopped where they will not
        # time): a sweep's on every GPU (ablate/gpu/pool.py), a single job's on one.
        prestart_worker(every=bool({"-m", "--multirun"} & set(argv)))
    main()
    if why := outcome.failure():
        print(f"ablate: {why}", file=sys.stderr, flush=True)
        return 1
    return 0


def may_time_here(argv) -> bool:
    """Whether this command line may time jobs in this process, as far as it says before Hydra
    composes anything: no Hydra flag (--help, --cfg, -c...: nothing runs), no mode but gpu, no
    launcher chosen (another launcher times in other processes). The GPU child then starts
    at once; where the composed config says otherwise, it is stopped before it is used
    (main, SweepSetup.on_multirun_start). On the H100 the child takes ~9 s to be ready,
    and the parent ~7 s to reach its first job: docs/benchmarks.md, "Sweep speed"."""
    if any(a.startswith("-") and a not in ("-m", "--multirun") for a in argv):
        return False
    here = ("mode=gpu", "hydra/launcher=gpus", "hydra/launcher=basic")  # gpus: the basic launcher now
    return not any(a.lstrip("+~").startswith(("mode=", "hydra/launcher=")) and a not in here for a in argv)


if __name__ == "__main__":
    # The app as the module ablate.__main__, not as __main__: a launcher that sends the jobs
    # to other processes (conf/hydra/launcher/) pickles `main` by its module's name.
    import importlib

    importlib.import_module("ablate.__main__").entry()
