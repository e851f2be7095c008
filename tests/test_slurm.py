"""A sweep through SLURM with real parts: a one-node cluster (munge, slurmctld, slurmd), a
PostgreSQL server and `mlflow server` over it, each started in this test's temporary folder
(tests/services.py). A static sweep (no GPU) of the plain test kernel goes out in chunks
(hydra/launcher=slurm, hydra_plugins/ablate_slurm): every job's record lands in the
PostgreSQL-backed store. A task cancelled mid-chunk (scancel), or killed outright, leaves its
finished jobs recorded and the rest `not_run`, and the same command again completes only those.

Skipped where the programs are missing or not root, except under CI=true (.ci/run installs
them), where that fails."""
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

import services
from conftest import kept_build_dir

ROOT = Path(__file__).resolve().parents[1]
FIXTURES = ROOT / "tests" / "fixtures" / "kernels"
JOBS = 9  # plain_axpy: the base and the eight generic pathologies


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    """(environment for ablate's commands, the PostgreSQL URI): SLURM, PostgreSQL and an
    MLflow server over it, for the module's tests."""
    services.require(*services.SLURM, "sinfo", "runuser", *services.POSTGRES, root=True, modules=("psycopg",))
    top = tmp_path_factory.mktemp("services")
    tic = time.monotonic()
    with services.slurm_cluster(top / "slurm") as env, services.postgres() as db, \
            services.mlflow_server(top / "mlflow", db) as url:
        print(f"services up in {time.monotonic() - tic:.1f} s")
        yield {**env, "MLFLOW_TRACKING_URI": url}, db


def sweep_command(sweep_dir, jobs_per_task):
    return [sys.executable, "-m", "ablate", "-m", "kernel=plain_axpy", f"kernel_path=[{FIXTURES}]", "mode=static",
            "pathology=glob(*)", "build.jobs=1", f"build.dir={kept_build_dir('plain_axpy')}",
            "hydra/launcher=slurm", f"hydra.launcher.jobs_per_task={jobs_per_task}",
            "hydra.launcher.gpus_per_node=null", "hydra.launcher.cpus_per_task=1", "hydra.launcher.mem_gb=null",
            "hydra.launcher.timeout_min=20", f"hydra.sweep.dir={sweep_dir}",
            # a killed task is learned of from SLURM within a second, and its result file (local:
            # no lag) not awaited 15 s: the killed test 44.0 -> 26.1 s (this file alone, 2-core machine)
            "hydra.launcher.poll_s=1", "hydra.launcher.result_wait_s=1"]


def store(env):
    from mlflow import MlflowClient

    return MlflowClient(tracking_uri=env["MLFLOW_TRACKING_URI"])


def sweep_runs(env, sweep_id):
    """(the parent run, its job runs) of the sweep named `sweep_id`."""
    client = store(env)
    exp = client.get_experiment_by_name("plain_axpy")
    (parent,) = client.search_runs([exp.experiment_id], f"tags.kind = 'sweep' and tags.sweep_id = '{sweep_id}'")
    jobs = client.search_runs([exp.experiment_id], f"tags.mlflow.parentRunId = '{parent.info.run_id}'",
                              max_results=1000)
    return parent, jobs


def rows_in_postgres(db, parent_id):
    """The job runs of `parent_id` as PostgreSQL itself holds them: [(run uuid, status tag)]."""
    import psycopg

    with psycopg.connect(db) as conn:
        return conn.execute(
            "SELECT p.run_uuid, s.value FROM tags p JOIN tags s ON s.run_uuid = p.run_uuid AND s.key = 'status' "
            "WHERE p.key = 'mlflow.parentRunId' AND p.value = %s", (parent_id,)).fetchall()


def test_a_static_sweep_goes_through_slurm_in_chunks_into_postgres(cluster, tmp_path):
    env, db = cluster
    proc = subprocess.run(sweep_command(tmp_path / "chunks", 4), cwd=ROOT, env=env, capture_output=True, text=True,
                          timeout=900)
    out = proc.stdout + proc.stderr
    assert proc.returncode == 0, out
    assert "Traceback" not in out, out
    assert f"SLURM: {JOBS} jobs in 3 array tasks of up to 4" in out, out
    # three array tasks ran, each once, and each left submitit's result: a list of its jobs' returns
    results = sorted((tmp_path / "chunks" / ".submitit").glob("*/*_result.pkl"))
    assert len(results) == 3, results
    parent, jobs = sweep_runs(env, "chunks")
    assert parent.info.status == "FINISHED" and parent.data.tags.get("resume_key")
    assert len(jobs) == JOBS
    assert {j.data.tags["status"] for j in jobs} == {"static"}, [(j.data.tags["status"], j.data.tags.get("error"))
                                                                 for j in jobs]
    assert len({j.data.tags["job_key"] for j in jobs}) == JOBS
    assert {j.data.params["pathology"] for j in jobs} == {"none", *generic_pathologies()}
    # and the records are PostgreSQL's: read there, not through MLflow
    rows = rows_in_postgres(db, parent.info.run_id)
    assert sorted(r[0] for r in rows) == sorted(j.info.run_id for j in jobs)
    assert {r[1] for r in rows} == {"static"}


def generic_pathologies():
    return [p.stem for p in (ROOT / "conf" / "generic" / "pathology").glob("*.yaml")]


def scancel(env, tmp_path):
    """What a user's scancel does (and SLURM's preemption): SIGTERM, SIGKILL KillWait later."""
    subprocess.run(["scancel", "--user=root"], env=env, check=True, timeout=30)


def kill_the_task(env, tmp_path):
    """What a node lost or an out-of-memory kill does: the task's processes end at once."""
    ps = subprocess.run(["ps", "-eww", "-o", "pid,args"], capture_output=True, text=True, check=True).stdout
    pids = [line.split()[0] for line in ps.splitlines() if "submitit.core._submit" in line and str(tmp_path) in line]
    assert pids, ps
    killed = 0
    for pid in pids:  # one listed may have ended since ps read it (CI saw `kill: (1689): No such process`)
        try:
            os.kill(int(pid), signal.SIGKILL)
            killed += 1
        except ProcessLookupError:
            pass
    assert killed, ps


@pytest.mark.parametrize("interrupt, heard", [(scancel, "SIGTERM: this task runs no further job"),
                                              (kill_the_task, None)], ids=["scancel", "killed"])
def test_a_task_interrupted_mid_chunk_leaves_the_rest_not_run_and_the_rerun_runs_only_those(cluster, tmp_path,
                                                                                           interrupt, heard):
    env, db = cluster
    name = interrupt.__name__
    command = sweep_command(tmp_path / name, JOBS)  # one task for the whole sweep
    log = tmp_path / "first.log"
    with open(log, "w") as out:
        first = subprocess.Popen(command, cwd=ROOT, env=env, stdout=out, stderr=subprocess.STDOUT)
    try:
        client, parent = store(env), None
        deadline = time.monotonic() + 600
        while time.monotonic() < deadline and first.poll() is None:  # the task's first job recorded, whole
            exp = client.get_experiment_by_name("plain_axpy")
            found = exp and client.search_runs([exp.experiment_id], f"tags.kind = 'sweep' and tags.sweep_id = '{name}'")
            if found and client.search_runs([exp.experiment_id],
                                            f"tags.mlflow.parentRunId = '{found[0].info.run_id}' and "
                                            "attributes.status != 'RUNNING'"):
                parent = found[0]
                break
            time.sleep(0.1)
        assert parent is not None, log.read_text()
        interrupt(env, tmp_path)
        first.wait(timeout=300)
    finally:
        if first.poll() is None:
            first.kill()
    text = log.read_text()
    assert "were not run (recorded as not_run)" in text, text
    task_log = "".join(p.read_text() for p in (tmp_path / name / ".submitit").glob("*/*_log.*"))
    if heard:  # the task heard SIGTERM and stopped after its job
        assert heard in task_log, task_log
    else:  # the task left no result: the launching process learned it from SLURM
        assert "ended before its chunk was done" in text, text
    parent, jobs = sweep_runs(env, name)
    assert parent.info.status == "KILLED"
    cut = [j for j in jobs if j.info.status == "RUNNING"]  # a record the kill cut short while it was logged
    whole = [j for j in jobs if j.info.status != "RUNNING"]
    done = {j.data.tags["job_key"] for j in whole if j.data.tags["status"] == "static"}
    not_run = {j.data.tags["job_key"] for j in whole if j.data.tags["status"] == "not_run"}
    assert done and not_run, [(j.data.params.get("pathology"), j.data.tags["status"]) for j in jobs]
    assert len(whole) == JOBS and not done & not_run  # each job once: recorded, or not run
    assert heard is None or not cut
    assert "not_run" in rank(env, tmp_path, name).split("Not ranked")[1]  # the ranking says which did not run

    again = subprocess.run(command, cwd=ROOT, env=env, capture_output=True, text=True, timeout=900)
    out = again.stdout + again.stderr
    assert again.returncode == 0, out
    assert f"{len(done)} of {JOBS} jobs recorded already, {len(not_run)} to run" in out, out
    parent, jobs = sweep_runs(env, name)  # the same sweep, resumed: its parent run is reused
    assert parent.info.status == "FINISHED"
    later = [j for j in jobs if j.data.tags["status"] == "static" and j.info.status != "RUNNING"
             and j.data.tags["job_key"] not in done]
    assert sorted(j.data.tags["job_key"] for j in later) == sorted(not_run)  # only those, each once
    assert len(jobs) == JOBS + len(not_run) + len(cut)
    assert len(rows_in_postgres(db, parent.info.run_id)) == JOBS + len(not_run) + len(cut)
    assert "not_run" not in rank(env, tmp_path, name)  # each job's latest record only: the sweep whole


def rank(env, tmp_path, sweep):
    proc = subprocess.run([sys.executable, "-m", "ablate", "rank", "--sweep", sweep, "--out", str(tmp_path / "rank")],
                          cwd=ROOT, env=env, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    return proc.stdout
