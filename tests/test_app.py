"""The app end to end on a CPU-only machine: `python -m ablate` falls back to static mode with
one line that says so, records every job in MLflow (failures included) and goes on; and the
GPU worker's parent side turns a dead or hung child into a recorded status."""
import json
import logging
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
from mlflow import MlflowClient

from ablate.gpu import gpu_state
from ablate.gpu.worker import _describe_exit, run_worker
from conftest import kept_build_dir

ROOT = Path(__file__).resolve().parents[1]
FALLBACK = "mode=gpu falls back to mode=static"


@pytest.fixture(scope="session")
def build_dir():
    """One build dir for every app run, kept between sessions: the base is compiled once."""
    return kept_build_dir("app")


def run_app(tmp_path, build_dir, *args):
    """`python -m ablate ARGS` with no GPU visible, its store and Hydra dirs under tmp_path."""
    env = {**os.environ, "MLFLOW_TRACKING_URI": f"sqlite:///{tmp_path / 'mlflow.db'}",
           "CUDA_VISIBLE_DEVICES": ""}
    proc = subprocess.run(
        [sys.executable, "-m", "ablate", *args, f"build.dir={build_dir}",
         f"hydra.run.dir={tmp_path / 'hydra'}", f"hydra.sweep.dir={tmp_path / 'multirun'}",
         f"hydra.searchpath=[file://{ROOT / 'tests' / 'conf'}]"],
        cwd=ROOT, env=env, capture_output=True, text=True, timeout=1200)
    return proc, MlflowClient(f"sqlite:///{tmp_path / 'mlflow.db'}")


def runs(client):
    exp = client.get_experiment_by_name("flash_attention_fwd")
    assert exp is not None, "no MLflow experiment was created"
    return client.search_runs([exp.experiment_id])


def test_default_run_falls_back_to_static(tmp_path, build_dir):
    proc, client = run_app(tmp_path, build_dir, "shape=s512")
    out = proc.stdout + proc.stderr
    assert proc.returncode == 0, out
    assert out.count(FALLBACK) == 1, out
    assert "Traceback" not in out
    (run,) = runs(client)
    assert run.data.tags["status"] == "static"
    assert run.info.status == "FINISHED"
    assert run.data.params["mode"] == "static" and run.data.params["pathology"] == "none"
    assert run.data.params["shape"] == "s512" and run.data.params["nvcc"]
    m = run.data.metrics
    assert m["regs"] > 0 and m["threads_per_block"] > 0 and m["sass.instructions"] > 0
    assert m["fingerprint_ok"] == 1
    artifacts = {a.path for a in client.list_artifacts(run.info.run_id)}
    assert {"ptxas.log", "variant_info.json", "config.yaml"} <= artifacts
    path = client.download_artifacts(run.info.run_id, "variant_info.json", str(tmp_path))
    info = json.loads(Path(path).read_text())
    assert info["pathologies"] == [] and {c["head_dim"] for c in info["configs"]} == {64, 128}


def test_sweep_records_every_job_and_goes_on(tmp_path, build_dir):
    """A variant that fails to build is recorded with its compiler's error; the jobs around
    it still run, all under one parent run, and the fallback is said once for the sweep."""
    proc, client = run_app(tmp_path, build_dir, "-m", "pathology=broken_build,none",
                           "shape=s512,s512_causal")
    out = proc.stdout + proc.stderr
    assert proc.returncode == 0, out
    assert out.count(FALLBACK) == 1, out
    assert "Traceback" not in out
    all_runs = runs(client)
    (parent,) = [r for r in all_runs if r.data.tags.get("kind") == "sweep"]
    jobs = [r for r in all_runs if r.data.tags.get("kind") == "job"]
    assert parent.info.status == "FINISHED"
    assert len(jobs) == 4
    assert all(r.data.tags["mlflow.parentRunId"] == parent.info.run_id for r in jobs)
    by_job = {(r.data.params["pathology"], r.data.params["shape"]): r for r in jobs}
    for shape in ("s512", "s512_causal"):
        broken, base = by_job[("broken_build", shape)], by_job[("none", shape)]
        assert broken.data.tags["status"] == "build_failed"
        assert "broken_build: this test-only pathology never compiles" in broken.data.tags["error"]
        assert base.data.tags["status"] == "static" and base.data.metrics["regs"] > 0
    # Said at ERROR, not INFO, with the failed build's log under a proper name.
    assert re.search(r"\[ablate\]\[ERROR\] - broken_build on s512: build_failed .*\(log: .*\.failed\.log\)", out), out
    assert re.search(r"\[HYDRA\] built \d+ variants in .*; failed: broken_build", out)


def spec(tmp_path):
    return {"base_so": str(tmp_path / "base.so"), "variant_so": str(tmp_path / "variant.so"),
            "shape": {"batch": 1, "heads": 1, "seq": 16, "head_dim": 64, "causal": False},
            "bench": {"tolerance": 2e-3, "seed": 0}}


@pytest.mark.parametrize("status, error, level", [
    ("static", None, logging.INFO),
    ("ok", None, logging.INFO),
    ("static", "noop: SASS equals the base's (100 instructions): the pathology changes nothing", logging.WARNING),
    ("static", "p: fingerprint sass.bar: increases does not hold", logging.WARNING),
    ("incorrect", "variant failed the correctness gate", logging.WARNING),
    ("build_failed", "the variant (p) failed to build", logging.ERROR),
    ("crashed", "CUDA error", logging.ERROR),
    ("timeout", "killed after 300 s", logging.ERROR),
])
def test_a_jobs_line_is_logged_at_the_level_of_its_outcome(status, error, level):
    """A build failure, or machine code equal to the base's, used to be logged at INFO."""
    from types import SimpleNamespace

    from ablate.__main__ import job_line
    from ablate.job.result import Result

    job = SimpleNamespace(variant=SimpleNamespace(name="p", is_base=False), shape_name="s512")
    got, line = job_line(job, Result(status, error=error))
    assert got == level and line.startswith(f"p on s512: {status}")


def test_worker_without_a_gpu_is_recorded_as_crashed(tmp_path, monkeypatch):
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "")
    out = run_worker(spec(tmp_path), timeout_s=300)
    assert out.status == "crashed"
    assert out.error.endswith("no CUDA device visible to the GPU worker") or \
        "No module named 'torch'" in out.error, out.error
    assert "Traceback" in out.artifacts["worker.log"]  # the child's own account is kept


def test_hung_worker_is_killed_and_recorded_as_timeout(tmp_path):
    # No interpreter starts in a millisecond: the child is still running when the wait ends.
    out = run_worker(spec(tmp_path), timeout_s=0.001)
    assert out.status == "timeout"
    assert "bench.timeout_s=0.001" in out.error


def test_exit_descriptions():
    assert _describe_exit(-11) == "signal SIGSEGV"
    assert _describe_exit(-9) == "signal SIGKILL"
    assert _describe_exit(3) == "exit code 3"


def test_gpu_state_without_nvml_is_unavailable(monkeypatch):
    monkeypatch.setitem(sys.modules, "pynvml", None)  # import pynvml now raises ImportError
    state = gpu_state.read()
    assert state["available"] is False and "nvidia-ml-py" in state["error"]


def test_throttle_reasons_decoded():
    assert gpu_state.decode_throttle(0) == []
    assert gpu_state.decode_throttle(0x4 | 0x40) == ["sw_power_cap", "hw_thermal_slowdown"]
    assert gpu_state.decode_throttle(0x1 | 0x2000) == ["gpu_idle", "unknown_0x2000"]


@pytest.mark.parametrize("argv, may", [
    (["-m", "pathology=glob(*)", "shape=s512"], True),
    (["pathology=scalar_loads"], True),
    ([], True),
    (["-m", "mode=gpu", "pathology=none"], True),
    (["-m", "pathology=glob(*)", "mode=static"], False),
    (["-m", "mode=gpu,static"], False),
    (["-m", "hydra/launcher=gpus", "pathology=glob(*)"], True),  # the basic launcher now: every GPU from here
    (["-m", "hydra/launcher=slurm", "pathology=glob(*)"], False),
    (["--help"], False),
    (["--cfg", "job"], False),
    (["-c", "job"], False),
])
def test_the_gpu_child_starts_before_hydra_only_where_this_process_may_time(argv, may):
    from ablate.__main__ import may_time_here

    assert may_time_here(argv) == may


def test_cli_starts_the_gpu_child_on_its_guess_before_hydra(monkeypatch):
    import ablate.__main__ as app
    from ablate.gpu import worker

    calls = []
    monkeypatch.setattr(worker, "prestart_worker", lambda every=False: calls.append(f"started, every GPU {every}"))
    monkeypatch.setattr(app, "main", lambda: calls.append("hydra"))
    monkeypatch.setattr(sys, "argv", ["ablate"])
    app.cli(["-m", "pathology=glob(*)", "shape=s512"])
    assert calls == ["started, every GPU True", "hydra"]  # a sweep: a child on every GPU
    calls.clear()
    app.cli(["pathology=scalar_loads"])
    assert calls == ["started, every GPU False", "hydra"]  # one job: one child
    calls.clear()
    app.cli(["-m", "pathology=glob(*)", "mode=static"])
    assert calls == ["hydra"]


def test_timed_wire_is_the_spec_run_job_sends_and_none_where_it_stops_before(monkeypatch):
    """The plan of specs sent ahead (ablate/gpu/worker.py) holds exactly the jobs run_job
    hands to the GPU worker, each with the spec it will send."""
    from types import SimpleNamespace

    from ablate import pipeline
    from ablate.job import plugins
    from ablate.job.job import make_job

    job = make_job(plugins.compose("attention", ["pathology=scalar_loads", "shape=s512"]))
    built = {job.base.name: SimpleNamespace(ok=True, lib=Path("/b/base.so")),
             job.variant.name: SimpleNamespace(ok=True, lib=Path("/b/var.so"))}
    monkeypatch.setattr(pipeline, "effective_mode", lambda mode, plugin=None: mode)
    wire = pipeline.timed_wire(job, built)
    assert wire == job.wire(Path("/b/base.so"), Path("/b/var.so"))
    assert wire["variant_so"] == "/b/var.so" and wire["base_so"] == "/b/base.so"
    failed = {**built, job.variant.name: SimpleNamespace(ok=False, lib=Path("/b/var.so"))}
    assert pipeline.timed_wire(job, failed) is None  # build_failed: never timed
    assert pipeline.timed_wire(job, {job.base.name: built[job.base.name]}) is None  # not built at all
    monkeypatch.setattr(pipeline, "effective_mode", lambda mode, plugin=None: "static")
    assert pipeline.timed_wire(job, built) is None  # no GPU: static, never timed


def test_a_single_timed_job_sends_its_spec_then_opens_the_store_while_the_gpu_works(tmp_path, monkeypatch):
    """__main__.time_ahead: the spec goes to the GPU child first (sent once: run_job's
    run_worker then only reads its answer), and the MLflow store is opened while the child
    works on it; nothing is opened where the spec could not be sent, or is not known yet."""
    from types import SimpleNamespace

    import ablate.__main__ as app
    from ablate import pipeline
    from ablate.gpu import gpus, pool, worker
    from ablate.sweep import tracking

    monkeypatch.setenv("PATH", str(tmp_path))  # no nvidia-smi: one stand-in GPU below
    gpu = gpus.Gpu("0", "GPU-test", "stand-in")
    monkeypatch.setattr(gpus, "visible", lambda: [gpu])
    monkeypatch.setenv(gpus.LOCK_DIR_ENV, str(tmp_path / "locks"))
    monkeypatch.setattr(pool, "_pool", pool.Pool(handler="tests.test_worker:stub"))
    spec, job = {"do": "stamp", "tag": "one", "s": 1.0}, SimpleNamespace(cfg=None, experiment="e")
    monkeypatch.setattr(pipeline, "built_wire", lambda j: spec if j is job else None)
    opened = []
    monkeypatch.setattr(tracking, "open_store", lambda cfg, name: opened.append(list(pool._pool.workers[0].sent)))
    try:
        worker.prestart_worker()
        app.time_ahead(job)
        assert opened == [[spec]]  # opened while the spec was with the child, before its answer
        first = worker.run_worker(spec, 60)
        assert first.status == "ok" and first.params["tag"] == "one" and pool._pool.workers[0].sent == []
    finally:
        worker.stop_worker(grace=0)
    opened.clear()
    monkeypatch.setattr(worker, "send_ahead", lambda wire: False)  # the worker cannot take it now
    app.time_ahead(job)
    monkeypatch.setattr(pipeline, "built_wire", lambda j: False)  # a variant to build first
    app.time_ahead(job)
    assert opened == []


END_NOW = """
import atexit, sys, threading
from ablate.__main__ import end_now

class Teardown:
    def __del__(self):
        print("teardown ran", flush=True)

kept = Teardown()  # freed by Python's teardown of this module, which end_now skips
atexit.register(print, "exit handler ran")
print("last line")  # to a pipe: still in the buffer when end_now comes
if sys.argv[1] == "thread":
    threading.Thread(target=__import__("time").sleep, args=(0.5,)).start()
end_now()
print("end_now returned")
"""


@pytest.mark.parametrize("thread", [False, True])
def test_a_finished_run_ends_without_pythons_teardown_unless_a_thread_still_runs(thread):
    """__main__.end_now (the `ablate` command's end): exit handlers run and stdout is flushed,
    the teardown is skipped (~1 s of every run's end on the 2-core CPU machine); with another
    thread still running, the usual exit waits for it."""
    proc = subprocess.run([sys.executable, "-c", END_NOW, "thread" if thread else "plain"], cwd=ROOT,
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    if thread:
        assert proc.stdout.startswith("last line\nend_now returned\n") and "teardown ran" in proc.stdout
    else:
        assert proc.stdout == "last line\nexit handler ran\n"


def test_a_job_measured_then_failed_says_why_beside_its_figure():
    """An in situ failure after the kernel's timing logged 'crashed slowdown 0.997x' and no reason."""
    from types import SimpleNamespace

    from ablate.__main__ import job_line
    from ablate.job.result import Result

    job = SimpleNamespace(variant=SimpleNamespace(name="p", is_base=False), shape_name="s512")
    out = Result("crashed", metrics={"slowdown": 1.2, "slowdown_lo": 1.1, "slowdown_hi": 1.3},
                 error="in situ: the workload w raised KeyError: 'x'")
    _, line = job_line(job, out)
    assert "1.2" in line and line.endswith("in situ: the workload w raised KeyError: 'x'")


def test_an_in_situ_job_line_carries_the_step_beside_the_kernel():
    """The job's line is what a run's log keeps: an in situ job said only its kernel's slowdown
    (H200, 2026-12-02: the step of a job whose store was lost could not be read back from the log)."""
    from types import SimpleNamespace

    from ablate.__main__ import job_line
    from ablate.job.result import Result

    job = SimpleNamespace(variant=SimpleNamespace(name="p", is_base=False), shape_name="tok8k_bf16")
    out = Result("ok", metrics={"slowdown": 1.226, "slowdown_lo": 1.219, "slowdown_hi": 1.233,
                                "step_slowdown": 1.0012, "step_slowdown_lo": 0.9985, "step_slowdown_hi": 1.0040,
                                "step_share": 0.003, "step_twice": 1.0035})
    _, line = job_line(job, out)
    assert line.endswith("the step 1.0012x [0.9985, 1.0040] (share 0.30%, 2x kernel 1.0035x)"), line
    half = Result("ok", params={"step_not_measured": "half_sms runs on its own stream"},
                  metrics={"slowdown": 1.4, "slowdown_lo": 1.39, "slowdown_hi": 1.41})
    assert job_line(job, half)[1].endswith("the step not measured: half_sms runs on its own stream")
