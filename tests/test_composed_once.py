"""A sweep in this process composes each job's config once: the callback's composition
(ablate/sweep/design.py) is the one the launcher runs (hydra_plugins/ablate_sweeper,
ComposedOnce), and the jobs' records are written by one thread while the next jobs run
(tracking.log_job_soon), all of them in the store when the sweep ends."""
import json
import os
import subprocess
import sys
from pathlib import Path

from omegaconf import OmegaConf

from conftest import kept_build_dir

ROOT = Path(__file__).resolve().parents[1]

# Run before the app: each config the launcher asks for is compared with a fresh composition
# of the same overrides, and whether it was one the callback kept.
PRELUDE = """
import atexit, json, os, threading
from omegaconf import OmegaConf
from hydra._internal.config_loader_impl import ConfigLoaderImpl
from ablate.sweep import design, tracking
composed, taken, threads = [], [], set()
compose = ConfigLoaderImpl.load_sweep_config
def load(self, master_config, sweep_overrides):
    cfg = compose(self, master_config, sweep_overrides)
    composed.append([list(sweep_overrides), OmegaConf.to_yaml(cfg)])
    return cfg
ConfigLoaderImpl.load_sweep_config = load
take = design.take_composed
def take_composed(overrides):
    cfg = take(overrides)
    taken.append([list(overrides), cfg is not None and OmegaConf.to_yaml(cfg)])
    return cfg
design.take_composed = take_composed
logged = tracking.log_job
def log_job(*a, **k):
    threads.add(threading.current_thread().name.split("_")[0])
    return logged(*a, **k)
tracking.log_job = log_job
atexit.register(lambda: open(os.environ["SEEN"], "w").write(
    json.dumps({"composed": composed, "taken": taken, "threads": sorted(threads)})))
"""


def test_the_launcher_runs_the_callbacks_configs_and_every_record_lands(tmp_path):
    env = {**os.environ, "MLFLOW_TRACKING_URI": f"sqlite:///{tmp_path / 'mlflow.db'}", "CUDA_VISIBLE_DEVICES": "",
           "SEEN": str(tmp_path / "seen.json")}
    argv = ["-m", "kernel=rmsnorm", "pathology=none,scalar_loads,uncoalesced", "shape=r16_h4k", "mode=static",
            f"build.dir={kept_build_dir('app')}", f"hydra.sweep.dir={tmp_path / 'multirun'}"]
    proc = subprocess.run([sys.executable, "-c", f"{PRELUDE}\nimport ablate.__main__ as app\napp.entry()", *argv],
                          cwd=ROOT, env=env, capture_output=True, text=True, timeout=900)
    assert proc.returncode == 0, proc.stderr[-3000:]
    got = json.loads((tmp_path / "seen.json").read_text())
    pathologies = ["pathology=none", "pathology=scalar_loads", "pathology=uncoalesced"]
    # Each job's config composed once, by the sweep's callback, and the launcher given that one,
    # as it was composed (nothing worked out of it since changed it).
    assert [o for c in got["composed"] for o in c[0] if o.startswith("pathology=")] == pathologies
    assert [o for t in got["taken"] for o in t[0] if o.startswith("pathology=")] == pathologies
    assert [t[1] for t in got["taken"]] == [c[1] for c in got["composed"]]
    assert got["threads"] == ["ablate-record"], got["threads"]  # recorded in the writer thread
    # Each job saw its own pathology, and every record is in the store, its run finished.
    for d in sorted((tmp_path / "multirun").glob("[0-9]*")):
        assert OmegaConf.load(d / ".hydra" / "config.yaml").pathology is not None
    from mlflow import MlflowClient

    client = MlflowClient(tracking_uri=env["MLFLOW_TRACKING_URI"])
    runs = client.search_runs([e.experiment_id for e in client.search_experiments()], "tags.kind = 'job'")
    assert sorted(r.data.params["pathology"] for r in runs) == ["none", "scalar_loads", "uncoalesced"]
    assert {r.info.status for r in runs} == {"FINISHED"}
    assert all(r.data.tags.get("sweep_id") for r in runs)


def test_the_writer_keeps_job_order_and_waits_for_every_record(monkeypatch):
    from ablate.sweep import tracking

    done = []

    def slow_log(job, result, parent=None, key=None):
        import time
        time.sleep(0.01)
        done.append(job)

    monkeypatch.setattr(tracking, "log_job", slow_log)
    tracking.record_later(True)
    try:
        for i in range(10):
            tracking.log_job_soon(i, None)
            assert len(tracking._later["waiting"]) <= tracking.LATER_MAX
    finally:
        tracking.record_later(False)
    assert done == list(range(10))
    assert tracking._later["pool"] is None  # its thread ended with the sweep
    tracking.log_job_soon("now", None)  # off: recorded at once, in this thread
    assert done[-1] == "now"
