"""Hydra callback of a multirun: build every variant of the sweep in parallel before the first
job runs, open (then close) the sweep's parent MLflow run, draw the progress line, start an
MLflow server when jobs log at the same time, and end (or keep) the GPU children its jobs
shared, one per GPU (ablate/gpu/pool.py).

Once built, the specs of the jobs that will be timed in this process (Hydra's basic
launcher) are queued for the GPU children (ablate/gpu/worker.py, plan_ahead): each job then
collects the answer its child computed ahead.

Registered in conf/config.yaml under `hydra.callbacks`. on_multirun_start and
on_multirun_end run in the launching process; on_job_start and on_job_end wherever the job
runs (this process under Hydra's basic launcher; a worker process under the joblib launcher,
a SLURM job under submitit's). The jobs find the parent run's id in the environment variable
SWEEP_RUN_ENV, and the server in MLFLOW_TRACKING_URI: launchers that start processes pass the
environment on.
"""
import logging
import os
import time
from pathlib import Path

from hydra.core.utils import JobStatus
from hydra.experimental.callback import Callback

from ablate.paths import ROOT

log = logging.getLogger(__name__)

SWEEP_RUN_ENV = "ABLATE_SWEEP_RUN_ID"
BASIC_LAUNCHER = "hydra._internal.core_plugins.basic_launcher.BasicLauncher"


def launcher_of(config):
    """'basic' (the jobs run one after another in this process), 'slurm' (on a cluster's
    nodes) or 'local' (in other processes of this host)."""
    target = str(config.hydra.launcher.get("_target_", BASIC_LAUNCHER))
    if target == BASIC_LAUNCHER:
        return "basic"
    return "slurm" if "slurm" in target.lower() else "local"


def read_sass_ahead(jobs, variants, results):
    """Disassemble now, all at once, the libraries whose SASS the jobs will read one after
    another (a generic pathology's, to tell whether it applies, and the base's; every one in
    static mode): each read is kept beside its library (ablate/build/sass.py). cuobjdump took
    ~1.6 s per library of the README sweep's kernel on the H100's host, 4 of them in a row."""
    from concurrent.futures import ThreadPoolExecutor

    from ablate.build import sass

    wanted = {v.name for v in variants if v.generic or v.is_base or any(j.mode == "static" for j in jobs)}
    libs = [r.lib for name, r in results.items() if name in wanted and r.ok]
    if len(libs) < 2:
        return
    with ThreadPoolExecutor(max_workers=min(len(libs), os.cpu_count() or 1)) as pool:
        for f in [pool.submit(sass.read, lib) for lib in libs]:
            try:
                f.result()
            except sass.SassError:
                pass  # the job that reads it says so, as it would have without this


def send_built_ahead():
    """each(job) for jobs_of_sweep: the spec of each job, as soon as it is worked out, sent to
    the GPU worker (worker.send_ahead) while the jobs before it were and its variants are
    built already (pipeline.built_wire): the GPU times the jobs while the rest are composed,
    the store opened and the build checked (the warm README sweep's first answer came ~2 s
    after the build's line on the H100, its first jobs' specs known ~2 s before it:
    docs/benchmarks.md, "Sweep speed"). The first job that is not built, or that reads
    counters (ncu would profile it while the child times the next), or that the worker
    cannot take, ends it: the plan after the build sends the rest, as before. Each call
    first reads the answers given meanwhile (worker.drain), so that the child never waits
    with a full pipe."""
    from ablate.build.compile import BuildError
    from ablate.gpu.worker import drain, send_ahead
    from ablate.pipeline import built_wire

    going = [True]

    def each(job):
        drain()
        if not going[0]:
            return
        try:
            wire = None if job.bench.get("profile") else built_wire(job)
        except BuildError:  # the sweep's build says so
            wire = False
        if job.bench.get("profile") or wire is False or (wire is not None and not send_ahead(wire)):
            going[0] = False
    return each


class SweepSetup(Callback):
    def __init__(self):
        self.run_id = self.server = self.progress = None
        self.saved_uri = None
        self.jobs, self.launcher = [], "basic"

    def __getstate__(self):
        """A parallel launcher sends the callbacks to its worker processes with each job: what
        belongs to the launching process (the line, the server) stays there."""
        return {}

    def __setstate__(self, state):
        self.__init__()

    def on_multirun_start(self, config, **kwargs):
        early = str(config.get("mode")) == "gpu" and launcher_of(config) == "basic"
        from ablate.gpu.worker import prestart_worker, stop_worker

        if early:
            prestart_worker(every=True)  # a child per GPU: torch and CUDA start while the jobs are worked out and built
        else:
            stop_worker(grace=0)  # cli() started one on a guess: these jobs time elsewhere, or not at all
        try:
            self._start(config, early)
        except BaseException as e:
            if early:  # stopped before its first job (bad input, say): the warming child is not waited for
                stop_worker(grace=0)
            if isinstance(e, Exception):  # Hydra would only warn, launch every job, and exit 0
                log.error("the sweep's set-up failed", exc_info=True)
                raise SystemExit(f"ablate: the sweep's set-up failed: {type(e).__name__}: {e}") from None
            raise

    def _start(self, config, early):
        from ablate.build.compile import ARCH_ENV, build
        from ablate.gpu.worker import drain
        from ablate.sweep import resume, tracking
        from ablate.sweep.design import (base_of, builds_of_sweep, jobs_of_sweep, keep_composed, sweep_jobs,
                                         variants_of_sweep)
        from ablate.sweep.progress import Progress

        # Bad input stops the sweep here, before anything is built or recorded: every job is
        # worked out now, from its own config, as it will be when it runs.
        try:
            overrides = sweep_jobs(config)
            jobs = jobs_of_sweep(config, jobs=overrides, each=send_built_ahead() if early else None)
        except ValueError as e:
            raise SystemExit(f"ablate: {e}") from None
        keep_composed(overrides, jobs)  # the launcher runs these configs, not a second composition
        if not jobs:  # a glob that matches nothing: one line, before Hydra launches no job
            from ablate.sweep.outcome import empty_selection

            raise SystemExit(f"ablate: {empty_selection(config)}")
        try:  # a store that cannot be written stops the sweep here too, before anything is built
            tracking.check_store(config)
        except tracking.StoreError as e:
            raise SystemExit(f"ablate: {e}") from None
        # An interrupted sweep of the same command, code and plugin sources: only the jobs it has
        # no record of run, under its parent run (ablate/sweep/resume.py). Looked up after the
        # jobs are composed, so that a sweep that resumes nothing sends its first specs as soon
        # as before; one that resumes may have sent some of a recorded job's, timed for nothing.
        previous, key, _ = resume.find(config, overrides)
        jobs = [job for job, o in zip(jobs, overrides) if resume.job_key(o) not in resume.SKIP]
        self.jobs, self.launcher = jobs, launcher_of(config)
        if not jobs:
            log.info("every job of this sweep is recorded already: nothing to run")
            self.run_id = resume.reopen(previous, config)
            return
        if previous is not None:
            resume.clear_marks(config.hydra.sweep.dir)
        plugin = jobs[0].plugin
        groups = builds_of_sweep(jobs, variants_of_sweep(jobs))
        if not groups:  # every job failed or opted out: the base alone, as each job asks
            groups = [(base_of(jobs[0].base), [jobs[0].base])]
        launcher = launcher_of(config)
        if launcher != "basic":
            self._serve_store(config, launcher)
        # The parent run first: a store that cannot be written stops the sweep right here.
        try:
            if previous is not None:
                self.run_id = resume.reopen(previous, config)
            else:
                self.run_id = tracking.start_sweep(config, config.hydra.sweep.dir)
                resume.tag_key(self.run_id, key, config)
        except Exception as e:  # raised, Hydra would only warn and go on with every job
            self._stop_server()
            raise SystemExit(f"ablate: MLflow: cannot create the sweep's run in {tracking.tracking_uri(config)}: "
                             f"{type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''}") from None
        except BaseException:
            self._stop_server()
            raise
        os.environ[SWEEP_RUN_ENV] = self.run_id
        drain()  # what the GPU answered to the specs sent ahead while MLflow's run was made
        tic = time.perf_counter()
        try:  # one build a base configuration (builds_of_sweep), its variants compiled in parallel
            built = {key: build(group, config.build, plugin, ROOT) for key, group in groups}
        except BaseException:
            tracking.end_sweep(self.run_id, "FAILED", config)
            self._stop_server()
            raise
        results = [r for rs in built.values() for r in rs.values()]
        os.environ[ARCH_ENV] = results[0].arch  # the jobs' `auto`, probed once
        for key, group in groups:
            read_sass_ahead(jobs, group, built[key])
        drain()
        if early and not any(job.bench.get("profile") for job in jobs):
            from ablate.gpu.worker import plan_ahead
            from ablate.pipeline import timed_wire

            plan_ahead([w for w in (timed_wire(job, built.get(base_of(job.base), {})) for job in jobs)
                        if w is not None])
        failed = [r.variant for r in results if r.status != "built"]
        found = sum(r.cached for r in results)  # built before, by this checkout or another
        log.log(logging.WARNING if failed else logging.INFO, "built %d variants in %.1f s (%d found in %s, %d compiled)%s",
                len(results), time.perf_counter() - tic, found, results[0].lib.parent,
                len(results) - found - len(failed),
                f"; failed: {', '.join(failed)} (their jobs record build_failed)" if failed else "")
        self.progress = Progress(config.hydra.sweep.dir, len(jobs))
        tracking.record_later(self.launcher == "basic")  # each job's record in a thread of its own

    def _serve_store(self, config, launcher):
        """Jobs in several processes log through one MLflow server, never into the sqlite file
        at once (ablate/sweep/server.py); a store that is a server already is used as it is."""
        from ablate.sweep import server, tracking

        uri = tracking.tracking_uri(config)
        if tracking.sqlite_path(uri) is None:
            return
        if launcher == "slurm":
            raise SystemExit(
                f"ablate: SLURM jobs run on other nodes and cannot share the sqlite store {uri}: "
                "point MLFLOW_TRACKING_URI at a tracking server they reach (`ablate server --host 0.0.0.0` "
                "on a node of a trusted network, or your lab's, e.g. backed by PostgreSQL)")
        try:
            self.server = server.start(uri)
        except RuntimeError as e:
            raise SystemExit(f"ablate: {e}") from None
        self.saved_uri = os.environ.get("MLFLOW_TRACKING_URI")
        os.environ["MLFLOW_TRACKING_URI"] = self.server.url
        log.info("MLflow: jobs log through a server on %s over %s", self.server.url, uri)

    def _stop_server(self):
        from ablate.sweep import server

        if self.server is None:
            return
        server.stop(self.server)
        self.server = None
        if self.saved_uri is None:
            os.environ.pop("MLFLOW_TRACKING_URI", None)
        else:
            os.environ["MLFLOW_TRACKING_URI"] = self.saved_uri

    def _not_run(self, config):
        """Record as not_run each job of this sweep that a launcher of other processes or
        machines ended without a record (a SLURM task cancelled, preempted or failed: the
        launching process learns it only here); how many. The same command again resumes
        the sweep (ablate/sweep/resume.py)."""
        from ablate.sweep import resume

        if self.launcher == "basic" or not self.jobs:  # a job of this process always records itself
            return 0
        try:
            n = resume.mark_not_run(self.run_id, self.jobs, config, "its task ended before it ran (cancelled, "
                                    "preempted, failed or out of time): the same command again runs it")
        except Exception as e:
            log.error("MLflow: could not check which jobs of the sweep were run: %s", e)
            return 0
        if n:
            log.warning("%d of %d jobs were not run (recorded as not_run): run the same command again to "
                        "resume the sweep", n, len(self.jobs))
        return n

    def on_job_start(self, config, **kwargs):
        from ablate.gpu.worker import drain
        from ablate.sweep import progress

        progress.quiet_console_in_other_processes()
        drain()  # at each job's edges: a job not timed (not applicable: ~0.2 s of the parent) collects nothing

    def on_job_end(self, config, job_return, **kwargs):
        from ablate.gpu.worker import drain
        from ablate.sweep import progress

        drain()  # the children that answered while this job was recorded get their next specs (tools/replay_sweep.py)

        out_dir = Path(config.hydra.runtime.output_dir)
        if job_return.status == JobStatus.FAILED and not (out_dir / progress.MARK).exists():
            progress.mark(out_dir, "failed", f"job {config.hydra.job.num} failed: {job_return.return_value}")

    def on_multirun_end(self, config, **kwargs):
        from ablate.gpu.worker import stop_worker
        from ablate.job.job import keep_worker_s
        from ablate.sweep import tracking

        if self.progress is not None:
            from ablate.sweep import outcome, progress

            # The sweep's exit status (ablate/sweep/outcome.py), from every job's mark.
            outcome.fail(outcome.of_sweep(config.hydra.sweep.dir, self.progress.total, progress.MARK))
            counts = self.progress.close()
            na = counts.get("not applicable", 0)
            log.info("%d jobs: %d ok, %d failed%s", self.progress.total, counts["ok"], counts["failed"],
                     f", {na} not applicable (each job's line above and its record say why)" if na else "")
            self.progress = None
        # The sweep's GPU child, idle now: kept for the next sweep, or ended (atexit would do it later).
        stop_worker(keep_s=keep_worker_s(config))
        tracking.record_later(False)  # every job's record in the store before its sweep's run ends
        if self.run_id is not None:
            tracking.end_sweep(self.run_id, "KILLED" if self._not_run(config) else "FINISHED", config)
        self._stop_server()
        from ablate.build.compile import ARCH_ENV
        from ablate.sweep.design import keep_composed

        keep_composed([], [])  # the launcher has taken every config it runs
        os.environ.pop(SWEEP_RUN_ENV, None)
        os.environ.pop(ARCH_ENV, None)
        self.run_id = None
