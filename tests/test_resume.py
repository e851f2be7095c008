"""Resuming a sweep (ablate/sweep/resume.py): which sweep is "the same", which of its jobs
are done, what the sweeper drops, what a ranking keeps; the chunked SLURM launcher's
answer for a task that left no result; and a sweep killed mid-way under Hydra's basic
launcher, resumed by the same command. The SLURM and PostgreSQL run of all of it is
tests/test_slurm.py."""
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pandas as pd
import pytest
from hydra.core.utils import JobReturn, JobStatus

from ablate.job import plugins
from ablate.sweep import resume
from conftest import kept_build_dir

ROOT = Path(__file__).resolve().parents[1]
FIXTURES = ROOT / "tests" / "fixtures" / "kernels"


def test_a_jobs_key_is_its_overrides_in_any_order():
    assert resume.job_key(["pathology=a", "shape=s"]) == resume.job_key(["shape=s", "pathology=a"])
    assert resume.job_key(["pathology=a", "shape=s"]) != resume.job_key(["pathology=b", "shape=s"])


def multirun_cfg(tmp_path, *overrides):
    return plugins.compose(overrides=[f"hydra.sweep.dir={tmp_path / 'sweep'}", *overrides], return_hydra_config=True)


def with_task(cfg, *task):
    from omegaconf import open_dict

    with open_dict(cfg):
        cfg.hydra.overrides.task = list(task)
    return cfg


def test_the_same_sweep_is_the_same_command_code_and_plugin_sources(tmp_path, monkeypatch):
    plugin = plugins.of(multirun_cfg(tmp_path))
    key = lambda cfg: resume.sweep_key(cfg, plugin)  # noqa: E731
    base = key(with_task(multirun_cfg(tmp_path), "pathology=glob(*)", "mode=static"))
    # the launcher's settings, the order of the overrides and resume= are not the sweep
    assert key(with_task(multirun_cfg(tmp_path, "hydra/launcher=slurm", "hydra.launcher.jobs_per_task=2"),
                         "mode=static", "pathology=glob(*)", "resume=true")) == base
    assert key(with_task(multirun_cfg(tmp_path), "pathology=glob(*)", "mode=gpu")) != base
    assert key(with_task(multirun_cfg(tmp_path, "hydra/sweeper=interactions", "hydra.sweeper.pairs=false"),
                         "pathology=glob(*)", "mode=static")) != base
    monkeypatch.setattr(resume, "code_id", lambda: "another commit")
    assert key(with_task(multirun_cfg(tmp_path), "pathology=glob(*)", "mode=static")) != base
    monkeypatch.undo()
    monkeypatch.setattr(type(plugin), "sources_digest", lambda self: "other sources")
    assert key(with_task(multirun_cfg(tmp_path), "pathology=glob(*)", "mode=static")) != base


def test_the_code_of_a_dirty_tree_is_its_changes_too(tmp_path):
    git = lambda *a: subprocess.run(["git", "-C", str(tmp_path), *a], check=True, capture_output=True)  # noqa: E731
    git("init", "-q")
    (tmp_path / "a.py").write_text("x = 1\n")
    git("add", "a.py")
    git("-c", "user.name=t", "-c", "user.email=t@t", "commit", "-qm", "a")
    clean = resume.code_id(tmp_path)
    assert len(clean) == 40 and ":" not in clean
    (tmp_path / "a.py").write_text("x = 2\n")
    one = resume.code_id(tmp_path)
    (tmp_path / "a.py").write_text("x = 3\n")
    two = resume.code_id(tmp_path)
    assert one.startswith(clean + "-dirty:") and two.startswith(clean + "-dirty:") and one != two
    (tmp_path / "b.py").write_text("y = 1\n")  # an untracked file is code too
    assert resume.code_id(tmp_path) != two


def test_only_an_unfinished_sweep_is_resumed_and_only_its_missing_jobs_run(tmp_path, mlflow_store):
    from mlflow import MlflowClient

    from ablate.sweep import tracking

    cfg = with_task(multirun_cfg(tmp_path, "mode=static"), "pathology=none,no_swizzle,tiny_blocks", "mode=static")
    jobs = [["pathology=none", "mode=static"], ["pathology=no_swizzle", "mode=static"],
            ["pathology=tiny_blocks", "mode=static"]]
    assert resume.find(cfg, jobs)[0] is None  # nothing recorded yet
    client = MlflowClient(mlflow_store)
    key = resume.sweep_key(cfg, plugins.of(cfg))
    exp = tracking.experiment_id(client, tracking.experiment_name(cfg), mlflow_store)
    parent = client.create_run(exp, tags={"kind": "sweep", "resume_key": key, "sweep_id": "s"}).info.run_id
    for overrides, status, more in ((jobs[0], "static", {}), (jobs[1], "not_run", {}),
                                    (jobs[2], "crashed", {"interrupted": "SIGTERM reached its SLURM task"}),
                                    (jobs[1], "static", "cut short")):  # left RUNNING: its logging never ended
        run = client.create_run(exp, tags={"mlflow.parentRunId": parent, "status": status,
                                           "job_key": resume.job_key(overrides), **(more if more != "cut short" else {})})
        if more != "cut short":
            client.set_terminated(run.info.run_id, "FINISHED")
    client.set_terminated(parent, "KILLED")
    found, got_key, todo = resume.find(cfg, jobs)  # the not_run job and the interrupted one run again
    assert found.info.run_id == parent and got_key == key
    assert todo == jobs[1:] and resume.SKIP == {resume.job_key(jobs[0])}
    # the sweeper drops the same jobs
    assert resume.pending_batches([jobs[:2], jobs[2:]]) == [[jobs[1]], [jobs[2]]]
    assert resume.pending_batches([jobs[:1]]) == []
    # resume=false: a new sweep
    assert resume.find(with_task(multirun_cfg(tmp_path, "mode=static", "resume=false"),
                                 "pathology=none,no_swizzle,tiny_blocks", "mode=static"), jobs)[0] is None
    client.set_terminated(parent, "FINISHED")  # a finished sweep is measured again, not resumed
    assert resume.find(cfg, jobs) == (None, key, jobs) and not resume.SKIP


def test_a_ranking_keeps_a_jobs_latest_record_where_a_not_run_one_was_redone():
    runs = pd.DataFrame({"tags.job_key": ["a", "b", "b", "c", "d", "d", "e"],
                         "tags.status": ["static", "not_run", "static", "not_run", "crashed", "ok", "static"],
                         "tags.interrupted": [None, None, None, None, "SIGTERM", None, None],
                         "status": ["FINISHED"] * 6 + ["RUNNING"],  # e: its task killed while it was logged
                         "params.pathology": ["a", "b", "b", "c", "d", "d", None]})
    kept = resume.current_records(runs)
    assert list(zip(kept["tags.job_key"], kept["tags.status"])) == [("a", "static"), ("b", "static"),
                                                                     ("c", "not_run"), ("d", "ok")]
    assert resume.current_records(runs.drop(columns="tags.job_key")).equals(runs.drop(columns="tags.job_key"))


class FakeTask:
    def __init__(self, job_id, returns=None):
        self.job_id, self.returns = job_id, returns

    def results(self):
        if self.returns is None:
            raise RuntimeError("Job 7_1 (task: 0) with path /x\nhas not produced any output (state: CANCELLED by 0)")
        return [self.returns]


def test_the_slurm_launcher_sends_chunks_and_a_task_without_result_answers_not_run(tmp_path, monkeypatch):
    import submitit
    from hydra.utils import instantiate

    srun = tmp_path / "bin" / "srun"  # submitit's SLURM executor looks for it first
    srun.parent.mkdir()
    srun.write_text("#!/bin/sh\nexit 1\n")
    srun.chmod(0o755)
    monkeypatch.setenv("PATH", f"{srun.parent}{os.pathsep}{os.environ['PATH']}")
    cfg = multirun_cfg(tmp_path, "hydra/launcher=slurm", "hydra.launcher.jobs_per_task=2")
    launcher = instantiate(cfg.hydra.launcher)
    launcher.setup(hydra_context=None, task_function=None, config=cfg)
    sent = []

    def map_array(self, fn, chunks, states):
        sent.append(chunks)
        first = [JobReturn(overrides=o, status=JobStatus.COMPLETED, _return_value="static") for o, _ in chunks[0]]
        return [FakeTask("7_0", first), FakeTask("7_1")]
    monkeypatch.setattr(submitit.AutoExecutor, "map_array", map_array)
    jobs = [[f"pathology={p}"] for p in ("none", "a", "b")]
    returns = launcher.launch(jobs, initial_job_idx=5)
    assert sent == [[[(["pathology=none"], 5), (["pathology=a"], 6)], [(["pathology=b"], 7)]]]
    assert [(r.overrides, r.return_value) for r in returns] == [
        (["pathology=none"], "static"), (["pathology=a"], "static"), (["pathology=b"], "not_run")]
    assert type(launcher.executor()._executor).__name__ == "SlurmExecutor"
    launcher.cluster = "local"  # the tasks as processes of this host
    assert type(launcher.executor()._executor).__name__ == "LocalExecutor"
    with pytest.raises(Exception, match="hydra.launcher.jobs_per_task must be a whole number of at least 1, got 0"):
        instantiate(multirun_cfg(tmp_path, "hydra/launcher=slurm", "hydra.launcher.jobs_per_task=0").hydra.launcher)
    with pytest.raises(Exception, match="hydra.launcher.cluster must be slurm or local, got 'pbs'"):
        instantiate(multirun_cfg(tmp_path, "hydra/launcher=slurm", "hydra.launcher.cluster=pbs").hydra.launcher)


class PolledTask:
    """A task that ended without a result, which only a forced look at SLURM's state finds (submitit's
    own schedule would look again only seconds later)."""
    def __init__(self):
        self.looks, self.waited_s = [], None

    def done(self, force_check=False):
        self.looks.append(force_check)
        return force_check

    def results(self):
        self.waited_s = self._results_timeout_s
        raise RuntimeError("Job 7_0 (task: 0) with path /x\nhas not produced any output (state: FAILED)")


def test_the_slurm_launchers_waits_for_a_task_are_its_knobs():
    import submitit.core.core

    from hydra_plugins.ablate_slurm import results

    assert submitit.core.core.Job._results_timeout_s == 15  # the attribute results() sets: renamed, it would not wait less

    task = PolledTask()  # poll_s: SLURM asked at least that often, then the result file awaited result_wait_s
    with pytest.raises(RuntimeError, match="has not produced any output"):
        results(task, 0.05, 2)
    assert task.looks[-1] is True and task.waited_s == 2
    task = PolledTask()  # null: submitit's own wait, its 15 s for the file
    with pytest.raises(RuntimeError):
        results(task, None, 15)
    assert task.looks == [] and task.waited_s == 15


@pytest.mark.parametrize("knob, value", [("poll_s", 0), ("poll_s", -1), ("result_wait_s", 0)])
def test_the_slurm_launchers_wait_knobs_refuse_what_is_not_seconds(tmp_path, knob, value):
    from hydra.utils import instantiate

    cfg = multirun_cfg(tmp_path, "hydra/launcher=slurm", f"hydra.launcher.{knob}={value}")
    with pytest.raises(Exception, match=f"hydra.launcher.{knob} must be a number of seconds above 0"):
        instantiate(cfg.hydra.launcher)


def store_jobs(db):
    """{job_key: [status, ...]} of the plain kernel's job runs logged whole (not left RUNNING:
    one its process was killed while it logged), and the sweep runs' statuses."""
    from mlflow import MlflowClient

    client = MlflowClient(f"sqlite:///{db}")
    exp = client.get_experiment_by_name("plain_axpy")
    if exp is None:
        return {}, []
    runs = client.search_runs([exp.experiment_id], max_results=1000)
    jobs = {}
    for r in runs:
        if r.data.tags.get("kind") == "job" and r.info.status != "RUNNING":
            jobs.setdefault(r.data.tags.get("job_key"), []).append(r.data.tags["status"])
    return jobs, [r.info.status for r in runs if r.data.tags.get("kind") == "sweep"]


def test_a_sweep_killed_mid_way_is_resumed_by_the_same_command(tmp_path, empty_store):
    """Hydra's basic launcher: the launching process killed after two jobs; the same command
    runs the other seven, under the same parent run, and measures none twice."""
    db = tmp_path / "mlflow.db"
    env = {**os.environ, "MLFLOW_TRACKING_URI": empty_store(db)}
    command = [sys.executable, "-m", "ablate", "-m", "kernel=plain_axpy", f"kernel_path=[{FIXTURES}]", "mode=static",
               "pathology=glob(*)", "build.jobs=1", f"build.dir={kept_build_dir('plain_axpy')}",
               f"hydra.sweep.dir={tmp_path / 'sweep'}"]
    first = subprocess.Popen(command, cwd=ROOT, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                             start_new_session=True)
    try:
        deadline = time.monotonic() + 600
        while time.monotonic() < deadline and first.poll() is None and sum(map(len, store_jobs(db)[0].values())) < 2:
            time.sleep(0.2)
    finally:
        os.killpg(first.pid, signal.SIGKILL)
        first.wait()
    done, sweeps = store_jobs(db)
    assert 2 <= len(done) < 9 and sweeps == ["RUNNING"], (done, sweeps)
    # a mark an earlier job left in a folder the rerun's jobs (numbered from 0 again) do not reach,
    # as a parallel launcher's would: the rerun's line counts its own jobs only
    from ablate.sweep import progress

    progress.mark(tmp_path / "sweep" / "8", "static", "an earlier job of the sweep")
    again = subprocess.run(command, cwd=ROOT, env=env, capture_output=True, text=True, timeout=900)
    assert again.returncode == 0, again.stdout + again.stderr
    out = again.stdout + again.stderr
    assert f"{len(done)} of 9 jobs recorded already, {9 - len(done)} to run" in out, out
    assert f"{9 - len(done)} jobs: {9 - len(done)} ok, 0 failed" in out, out  # the same folder: its own jobs counted
    jobs, sweeps = store_jobs(db)
    assert sweeps == ["FINISHED"]  # the one sweep, resumed and finished
    assert len(jobs) == 9 and all(statuses == ["static"] for statuses in jobs.values()), jobs

    # killed after its last job was recorded, before the sweep's end: nothing left to run
    from mlflow import MlflowClient

    client = MlflowClient(f"sqlite:///{db}")
    (parent,) = client.search_runs([client.get_experiment_by_name("plain_axpy").experiment_id], "tags.kind = 'sweep'")
    client.update_run(parent.info.run_id, status="RUNNING")
    last = subprocess.run(command, cwd=ROOT, env=env, capture_output=True, text=True, timeout=900)
    assert last.returncode == 0, last.stdout + last.stderr
    assert "every job of this sweep is recorded already: nothing to run" in last.stdout + last.stderr
    assert store_jobs(db) == (jobs, ["FINISHED"])


def test_a_job_that_sigterm_cut_short_is_tagged_interrupted_one_that_finished_is_not(monkeypatch):
    from hydra_plugins import ablate_slurm

    from ablate.sweep.callbacks import SWEEP_RUN_ENV

    tagged = []
    monkeypatch.setattr(resume, "mark_interrupted", lambda run_id, cfg, overrides, why: tagged.append((run_id, overrides)))
    monkeypatch.setenv(SWEEP_RUN_ENV, "parent")
    for value in ("crashed", "timeout", "static", "ok"):
        ablate_slurm.interrupted(None, [f"pathology={value}"], JobReturn(status=JobStatus.COMPLETED, _return_value=value))
    assert tagged == [("parent", ["pathology=crashed"]), ("parent", ["pathology=timeout"])]
