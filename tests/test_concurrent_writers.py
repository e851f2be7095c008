"""Eight jobs logging at the same moment, as a parallel launcher's jobs do: through an MLflow
server over the sqlite store (ablate/sweep/server.py) every run is found in that store, with its
result; and straight into the sqlite file, a write that loses the race for its lock is still
kept (a run, or its result in unlogged/), never lost."""
import json
import os
import re
import subprocess
import sys
import time
from pathlib import Path

import pytest
from mlflow import MlflowClient

from ablate.sweep import server

ROOT = Path(__file__).resolve().parents[1]
WRITERS = 8

# Eight jobs' log_job, started at the same instant: one process imports what a record needs
# (mlflow, its stores: ~2.8 s of CPU on the 2-core machine, which eight processes each paid
# after their start before), says it is ready, waits for the wall-clock time it is sent, then
# forks the eight writers, each a process of its own with its own connections to the store
# (none is opened before the fork), and reports each one's exit status.
WRITER = """
import os, sys, time, traceback
from omegaconf import OmegaConf
sys.path.insert(0, sys.argv[1])  # the tests' folder: conftest's log_cfg
from conftest import log_cfg
import ablate.sweep.tracking, ablate.job.result
from mlflow import MlflowClient
from mlflow.entities import Metric, Param, RunStatus
from mlflow.store.tracking.sqlalchemy_store import SqlAlchemyStore
from mlflow.store.tracking.rest_store import RestStore
writers, out = int(sys.argv[2]), sys.argv[3]
print("ready", flush=True)
start = float(sys.stdin.readline())
cfg = OmegaConf.create({"mode": "gpu", "kernel": {"name": "attention", "experiment": "concurrent"},
                        "build": {"arch": "sm_90"},
                        "shape": {"name": "s512", "batch": 4, "heads": 8, "seq": 512, "head_dim": 64, "causal": False},
                        "pathology": {"none": {"header": None, "macros": {}}}})
pids = {}
for i in range(writers):
    sys.stdout.flush()
    pid = os.fork()
    if pid == 0:
        code = 1
        try:
            fd = os.open(f"{out}/writer{i}.out", os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
            os.dup2(fd, 1)
            os.dup2(fd, 2)
            result = {"status": "ok", "params": {"writer": i, "gpu_index": i % 2},
                      "metrics": {"slowdown": 1.0 + i / 100, "slowdown_lo": 0.99, "slowdown_hi": 1.2, "base_us": 14.0},
                      "artifacts": {"samples.json": "[" + ",".join(["14.0"] * 2000) + "]"}, "error": None}
            time.sleep(max(0.0, start - time.time()))
            print(log_cfg(cfg, result, None))
            code = 0
        except BaseException:
            traceback.print_exc()
        finally:
            sys.stdout.flush()
            sys.stderr.flush()
            os._exit(code)
    pids[pid] = i
for _ in range(writers):
    pid, status = os.wait()
    print(f"writer {pids[pid]} exit {os.waitstatus_to_exitcode(status)}", flush=True)
"""


def write_all(uri, tmp_path):
    """Eight writer processes, all logging at once to `uri`: (their outputs, their exit
    statuses). Once their parent has said it is ready (its imports done, however slow the
    machine), it is sent one start time, a moment ahead: no fixed wait for a slow start."""
    env = {**os.environ, "MLFLOW_TRACKING_URI": uri, "PYTHONPATH": str(ROOT)}
    out = tmp_path / "writers"
    out.mkdir()
    proc = subprocess.Popen([sys.executable, "-c", WRITER, str(ROOT / "tests"), str(WRITERS), str(out)], cwd=tmp_path,
                            env=env, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                            text=True)
    early = proc.stdout.readline()  # "ready", or the start of what went wrong
    try:
        proc.stdin.write(f"{time.time() + 0.5}\n")
        proc.stdin.flush()
    except BrokenPipeError:  # it ended before its start: its output says why
        pass
    said = ("" if early == "ready\n" else early) + proc.communicate(timeout=300)[0]
    codes = {int(m[1]): int(m[2]) for m in re.finditer(r"^writer (\d+) exit (-?\d+)$", said, re.M)}
    outputs = [f"writer {i} (exit {codes.get(i)}): " + (out / f"writer{i}.out").read_text()
               if (out / f"writer{i}.out").exists() else f"writer {i}: never started\n{said}" for i in range(WRITERS)]
    return outputs, [codes.get(i) for i in range(WRITERS)]


def logged_writers(db_uri):
    client = MlflowClient(db_uri)
    exp = client.get_experiment_by_name("concurrent")
    runs = client.search_runs([exp.experiment_id]) if exp else []
    return client, {int(r.data.params["writer"]): r for r in runs}


def test_eight_writers_through_a_server_all_land(tmp_path):
    db_uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    srv = server.start(db_uri)
    try:
        outputs, codes = write_all(srv.url, tmp_path)
    finally:
        server.stop(srv)
    assert codes == [0] * WRITERS, "\n".join(outputs)
    assert srv.proc.poll() is not None, "the server outlived stop()"
    client, runs = logged_writers(db_uri)  # read back from the file itself, with no server
    assert sorted(runs) == list(range(WRITERS)), "\n".join(outputs)
    for i, run in runs.items():
        assert run.info.status == "FINISHED" and "log_errors" not in run.data.tags, run.data.tags
        assert run.data.metrics["slowdown"] == pytest.approx(1.0 + i / 100)
        kept = json.loads(open(client.download_artifacts(run.info.run_id, "result.json", str(tmp_path))).read())
        assert kept["params"]["writer"] == i
    # Artifacts lie beside the database, as with the embedded store.
    assert (tmp_path / "mlartifacts").is_dir()
    assert not (tmp_path / "unlogged").exists()


def test_eight_writers_on_the_sqlite_file_lose_nothing(tmp_path):
    """Without a server some writers may lose the race for the file's lock; the fallback keeps
    their results in unlogged/ beside the store: every writer is somewhere."""
    db_uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    MlflowClient(db_uri).search_experiments()  # the schema made once, as a sweep's parent run does
    outputs, codes = write_all(db_uri, tmp_path)
    _, runs = logged_writers(db_uri)
    kept = {json.loads(p.read_text())["result"]["params"]["writer"]
            for p in (tmp_path / "unlogged").glob("*.json")} if (tmp_path / "unlogged").exists() else set()
    assert set(runs) | kept == set(range(WRITERS)), "\n".join(outputs)


def test_server_refuses_a_store_that_is_not_sqlite():
    with pytest.raises(ValueError, match="not a sqlite file"):
        server.command("http://mlflow.example:5000")
