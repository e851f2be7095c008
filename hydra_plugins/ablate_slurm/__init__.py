"""Hydra launcher plugin: `hydra/launcher=slurm` (conf/hydra/launcher/slurm.yaml), Hydra's
submitit SLURM launcher with the sweep's jobs sent out in chunks.

Hydra's own submits one SLURM job per ablate job: each would pay python's, torch's and the
GPU child's start (~7-10 s on the H100) for about a second of timing. Here one array task
runs `hydra.launcher.jobs_per_task` jobs one after another in one process, as Hydra's basic
launcher runs a sweep: the task's GPU child is started once and kept across its jobs, and
their specs are sent ahead to it (ablate/gpu/worker.py: prestart_worker, plan_ahead). What
submitit does (the sbatch script, the array, the pickled call, requeue on preemption) is
unchanged; ablate adds no scheduler.

A task that ends early leaves its finished jobs recorded (each job logs itself as it ends);
the launching process then records each job of the sweep with no record as `not_run`
(ablate/sweep/callbacks.py, at the sweep's end), and the same command again resumes the
sweep (ablate/sweep/resume.py). On SIGTERM (scancel, preemption: SLURM sends it KillWait
seconds before SIGKILL) a task runs no further job; a job in flight when it came and that
ended crashed or timed out is tagged `interrupted`, and a rerun times it again. A task
requeued by submitit skips the jobs the sweep has recorded already.
"""
import logging
import os
import signal
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Optional

from hydra.core.config_store import ConfigStore
from hydra.core.singleton import Singleton
from hydra.core.utils import JobReturn, JobStatus, run_job, setup_globals
from hydra_plugins.hydra_submitit_launcher.config import BaseQueueConf, SlurmQueueConf
from hydra_plugins.hydra_submitit_launcher.submitit_launcher import SlurmLauncher
from omegaconf import OmegaConf, open_dict

log = logging.getLogger(__name__)


@dataclass
class AblateSlurmConf(SlurmQueueConf):
    _target_: str = "hydra_plugins.ablate_slurm.ChunkedSlurmLauncher"
    jobs_per_task: int = 16  # ablate jobs one SLURM array task runs, one after another, in one process
    # submitit's executor: slurm, or local (the array's tasks as processes of this host, every
    # one on the first `gpus_per_node` GPUs: the chunked path tried without a cluster)
    cluster: str = "slurm"
    # A task that left no result (killed, node lost): the launching process learns it from
    # SLURM's state (sacct), asked at most `poll_s` seconds apart while it waits (null:
    # submitit's schedule, 2 s after the submission, then half the time since, up to 10 min),
    # then waits `result_wait_s` for the task's result file, for a shared filesystem's lag
    # (submitit's 15 s). A task that returned is found by its result file, every second.
    poll_s: Optional[float] = None
    result_wait_s: float = 15


ConfigStore.instance().store(group="hydra/launcher", name="ablate_slurm", node=AblateSlurmConf, provider="ablate")


def chunks(jobs, size):
    """`jobs` in consecutive chunks of at most `size`."""
    return [jobs[i:i + size] for i in range(0, len(jobs), size)]


class ChunkedSlurmLauncher(SlurmLauncher):
    def __init__(self, jobs_per_task=16, cluster="slurm", poll_s=None, result_wait_s=15, **params):
        if not isinstance(jobs_per_task, int) or jobs_per_task < 1:
            raise ValueError(f"hydra.launcher.jobs_per_task must be a whole number of at least 1, got {jobs_per_task!r}")
        if cluster not in ("slurm", "local"):
            raise ValueError(f"hydra.launcher.cluster must be slurm or local, got {cluster!r}")
        for name, value in (("poll_s", poll_s), ("result_wait_s", result_wait_s)):
            if not (name == "poll_s" and value is None) and (isinstance(value, bool) or not isinstance(value, (int, float))
                                                              or value <= 0):
                raise ValueError(f"hydra.launcher.{name} must be a number of seconds above 0, got {value!r}")
        super().__init__(**params)
        self.jobs_per_task, self.cluster = jobs_per_task, cluster
        self.poll_s, self.result_wait_s = poll_s, result_wait_s

    def executor(self):
        """submitit's executor (`cluster`: SLURM, or local) with the launcher's parameters, as Hydra's submitit
        launcher makes it (its keys of BaseQueueConf as they are, the others `slurm_`-prefixed)."""
        import submitit

        params = dict(self.params)
        executor = submitit.AutoExecutor(cluster=self.cluster, folder=params.pop("submitit_folder"),
                                         slurm_max_num_timeout=params.pop("max_num_timeout", 0))
        common = set(OmegaConf.structured(BaseQueueConf).keys())
        executor.update_parameters(**{k if k in common else f"slurm_{k}": v for k, v in params.items()})
        return executor

    def launch(self, job_overrides, initial_job_idx):
        if not job_overrides:
            return []
        sweep_dir = Path(str(self.config.hydra.sweep.dir))
        sweep_dir.mkdir(parents=True, exist_ok=True)
        jobs = [(list(o), initial_job_idx + i) for i, o in enumerate(job_overrides)]
        parts = chunks(jobs, self.jobs_per_task)
        executor = self.executor()
        log.info("%s: %d jobs in %d array tasks of up to %d (hydra.launcher.jobs_per_task); output in %s",
                 "SLURM" if self.cluster == "slurm" else "submitit (local)", len(jobs), len(parts),
                 self.jobs_per_task, sweep_dir)
        state = Singleton.get_state()
        tasks = executor.map_array(self, parts, [state] * len(parts))
        returns = []
        for task, part in zip(tasks, parts):
            try:
                returns += results(task, self.poll_s, self.result_wait_s)[0]
            except Exception as e:  # cancelled, preempted, failed, out of time: the callback marks the rest
                first = " ".join(str(e).split())[:300] or type(e).__name__  # submitit's says the state on its 2nd line
                log.warning("SLURM task %s (jobs %d-%d) ended before its chunk was done: %s", task.job_id,
                            part[0][1], part[-1][1], first)
                returns += [not_run(overrides) for overrides, _ in part]
        return returns

    def __call__(self, chunk, singleton_state):
        """One array task: the jobs of `chunk` ([(overrides, job number)]), one after another."""
        import submitit

        Singleton.set_state(singleton_state)
        setup_globals()
        task_id = submitit.JobEnvironment().job_id
        loader = self.hydra_context.config_loader
        configs = [(overrides, num, loader.load_sweep_config(self.config, overrides)) for overrides, num in chunk]
        done = recorded_already()
        term = []  # SIGTERM (scancel, preemption) came: no further job starts
        signal.signal(signal.SIGTERM, lambda signum, frame: term.append(signum))
        warm = warm_up([cfg for _, _, cfg in configs])
        returns = []
        try:
            for i, (overrides, num, cfg) in enumerate(configs):
                if term:
                    log.warning("SIGTERM: this task runs no further job (%d of its %d left: the sweep records "
                                "them not_run)", len(configs) - i, len(configs))
                    returns += [not_run(o) for o, _, _ in configs[i:]]
                    break
                from ablate.sweep import resume

                if resume.job_key(overrides) in done:
                    log.info("job %d is recorded already (a requeued task): skipped", num)
                    returns.append(not_run(overrides, "recorded already"))
                    continue
                with open_dict(cfg.hydra.job):
                    cfg.hydra.job.id = f"{task_id}_{num}"
                    cfg.hydra.job.num = num
                ret = run_job(hydra_context=self.hydra_context, task_function=self.task_function, config=cfg,
                              job_dir_key="hydra.sweep.dir", job_subdir_key="hydra.sweep.subdir")
                returns.append(ret)
                if term:
                    interrupted(cfg, overrides, ret)
        finally:
            if warm:
                from ablate.gpu.worker import stop_worker

                stop_worker(grace=0)
        return returns


def results(task, poll_s, result_wait_s):
    """submitit's `task.results()`, with SLURM asked for the task's state at least every
    `poll_s` seconds while it runs (None: submitit's own schedule), and its result file
    awaited `result_wait_s` once SLURM says it ended (hydra.launcher.poll_s, result_wait_s)."""
    task._results_timeout_s = result_wait_s  # submitit's wait for the file: a class attribute, 15 s
    if poll_s is not None:
        asked = time.monotonic()
        while True:
            force = time.monotonic() - asked >= poll_s
            if force:
                asked = time.monotonic()
            if task.done(force_check=force):
                break
            time.sleep(min(1.0, poll_s))
    return task.results()


def not_run(overrides, value="not_run"):
    """The JobReturn of a job that did not run here (its record, `not_run`, is the callback's)."""
    return JobReturn(overrides=list(overrides), status=JobStatus.COMPLETED, _return_value=value)


def recorded_already():
    """The job keys the sweep's parent run has records of (a task requeued after preemption
    runs its chunk again from the start); empty outside a sweep or where the store says nothing."""
    from ablate.sweep.callbacks import SWEEP_RUN_ENV

    run_id = os.environ.get(SWEEP_RUN_ENV)
    if not run_id:
        return set()
    try:
        from mlflow import MlflowClient

        from ablate.sweep import resume

        client = MlflowClient()
        return resume.recorded(client, client.get_run(run_id))
    except Exception as e:
        log.warning("MLflow: could not read which jobs of the sweep are recorded: %s", e)
        return set()


def warm_up(configs):
    """In mode=gpu, this task's GPU child started now and the chunk's specs planned, sent
    ahead as each is found built (as the sweep's callback does for Hydra's basic launcher:
    ablate/sweep/callbacks.py, send_built_ahead; the builds were made by the submitting
    process). Whether a child was started."""
    if not configs or any(str(OmegaConf.select(c, "mode", default="gpu")) != "gpu" for c in configs):
        return False
    from ablate.build.compile import BuildError
    from ablate.gpu.worker import plan_ahead, prestart_worker
    from ablate.pipeline import job_of
    from ablate.pipeline import built_wire
    from ablate.sweep.callbacks import send_built_ahead

    prestart_worker()
    try:
        jobs = [job_of(c, OmegaConf.select(c, "hydra.runtime.choices.shape", default=None)) for c in configs]
    except ValueError:  # the job meets it and says so
        return True
    if any(job.bench.get("profile") for job in jobs):  # ncu would profile one job while the child times the next
        return True
    each, wires = send_built_ahead(), []
    for job in jobs:
        each(job)
        try:
            wires.append(built_wire(job))
        except BuildError:  # the job meets it and records it
            pass
    plan_ahead([w for w in wires if w])
    return True


def interrupted(cfg, overrides, ret):
    """A job in flight when SIGTERM came: where it ended crashed or timed out (its GPU child
    got the signal too), its record is tagged `interrupted`, so that a rerun times it again."""
    from ablate.sweep import resume
    from ablate.sweep.callbacks import SWEEP_RUN_ENV

    status = ret.return_value if ret.status == JobStatus.COMPLETED else "crashed"
    if status in ("crashed", "timeout") and os.environ.get(SWEEP_RUN_ENV):
        try:
            resume.mark_interrupted(os.environ[SWEEP_RUN_ENV], cfg, overrides,
                                    "SIGTERM reached its SLURM task while it ran")
        except Exception as e:
            log.warning("MLflow: could not tag job %s interrupted: %s", cfg.hydra.job.num, e)
