"""GPU pinning on the CPU, with a fake nvidia-smi listing two GPUs: jobs that run at once get
distinct GPUs (a lock file per GPU), a job waits while every GPU is taken, CUDA_VISIBLE_DEVICES
narrows the choice (a SLURM allocation), and the GPU child is started pinned to its GPU."""
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from ablate.gpu import gpus, pool, worker
from ablate.job.result import Result as result

ROOT = Path(__file__).resolve().parents[1]
LISTING = ("0, GPU-aaaaaaaa-0000-0000-0000-000000000000, NVIDIA H200\n"
           "1, GPU-bbbbbbbb-0000-0000-0000-000000000000, NVIDIA H200\n")


@pytest.fixture
def two_gpus(tmp_path, monkeypatch):
    """nvidia-smi lists two GPUs; the locks live in tmp_path; nothing narrows the choice."""
    from conftest import fake_gpus  # here: the children import this module, without tests/ on their path

    fake_gpus(tmp_path, monkeypatch, LISTING)
    return tmp_path


def test_listing_and_cuda_visible_devices(two_gpus, monkeypatch):
    assert [g.index for g in gpus.visible()] == ["0", "1"]
    assert gpus.visible()[1].uuid.startswith("GPU-bbbb") and gpus.count() == 2
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "1")
    assert [g.uuid for g in gpus.visible()] == ["GPU-bbbbbbbb-0000-0000-0000-000000000000"]
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "GPU-aaaaaaaa")  # a UUID's prefix, as CUDA takes it
    assert [g.index for g in gpus.visible()] == ["0"]
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "")
    assert gpus.visible() == [] and gpus.count() == 1


def test_claims_at_once_get_distinct_gpus(two_gpus):
    with gpus.claim() as first, gpus.claim() as second:
        assert {first.index, second.index} == {"0", "1"}
    with gpus.claim(prefer=second) as again:  # free again, and the preferred one comes first
        assert again == second


HOLDER = """
import json, sys, time
from ablate.gpu import gpus
with gpus.claim(poll_s=0.05) as gpu:
    t0 = time.time(); time.sleep(float(sys.argv[1])); t1 = time.time()
print(json.dumps({"gpu": gpu.index, "start": t0, "end": t1}))
"""


def test_processes_share_the_gpus_without_overlap(two_gpus):
    """Four jobs in four processes on two GPUs: two at a time, never two on one GPU."""
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    procs = [subprocess.Popen([sys.executable, "-c", HOLDER, "1.5"], env=env, stdout=subprocess.PIPE, text=True)
             for _ in range(4)]
    held = [json.loads(p.communicate(timeout=120)[0]) for p in procs]
    assert {h["gpu"] for h in held} == {"0", "1"}
    for gpu in ("0", "1"):
        spans = sorted((h["start"], h["end"]) for h in held if h["gpu"] == gpu)
        assert all(a_end <= b_start for (_, a_end), (b_start, _) in zip(spans, spans[1:])), spans


def test_no_gpu_known_means_no_pin(tmp_path, monkeypatch):
    monkeypatch.setenv("PATH", str(tmp_path))  # no nvidia-smi at all
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
    with gpus.claim() as gpu:
        assert gpu is None


def report_env(spec):
    """The GPU child's stand-in: what it was pinned to."""
    return result("ok", params={"pinned": os.environ.get("CUDA_VISIBLE_DEVICES", "unset")})


def test_a_sweep_leaves_a_gpu_another_sweep_holds_and_pins_its_child_to_a_free_one(two_gpus, monkeypatch, caplog):
    monkeypatch.setattr(pool, "_pool", pool.Pool("tests.test_gpus:report_env"))
    try:
        with gpus.claim() as taken, caplog.at_level("INFO", logger="ablate"):  # another sweep holds GPU 0 ...
            assert taken.index == "0"
            worker.prestart_worker(every=True)
            out = worker.run_worker({}, 60)  # ... so this one times on GPU 1
        assert [w.gpu.index for w in pool._pool.workers] == ["1"]
        assert "GPU 0 is timing another sweep's jobs: this sweep leaves it" in caplog.text
        assert out.params["pinned"] == "GPU-bbbbbbbb-0000-0000-0000-000000000000"
        assert out.params["gpu_index"] == "1" and out.params["gpu_uuid"].startswith("GPU-bbbb")
        assert out.params["gpu"] == "NVIDIA H200"  # nvidia-smi's name where the child gave none
        again = worker.run_worker({"again": 1}, 60)  # the same child serves the next job
        assert again.params["worker_pid"] == out.params["worker_pid"] and again.params["gpu_index"] == "1"
        assert gpus.try_lock(gpus.visible()[1]) is None  # held for the sweep
    finally:
        worker.stop_worker()
    free = gpus.try_lock(gpus.visible()[1])
    assert free is not None  # let go with the sweep
    os.close(free)


def test_a_child_started_before_the_first_job_serves_it(two_gpus, monkeypatch):
    """The sweep starts its GPU children as it begins (their torch and CUDA start while the
    jobs are composed and built): a single job's one child on the first GPU, a sweep's one
    on each; the first job is answered by a child started then."""
    monkeypatch.setattr(pool, "_pool", pool.Pool("tests.test_gpus:report_env"))
    try:
        worker.prestart_worker()
        started = pool._pool.workers[0].proc.pid
        assert [w.gpu.index for w in pool._pool.workers] == ["0"]
        out = worker.run_worker({}, 60)
        assert out.params["worker_pid"] == started and out.params["gpu_index"] == "0"
        assert out.params["pinned"].startswith("GPU-aaaa")
        worker.prestart_worker()  # running already: nothing new
        assert [w.proc.pid for w in pool._pool.workers] == [started]
        worker.prestart_worker(every=True)  # the sweep's callback: the other GPU too
        assert [w.gpu.index for w in pool._pool.workers] == ["0", "1"] and pool._pool.workers[0].proc.pid == started
    finally:
        worker.stop_worker()


def test_no_child_is_started_early_without_a_gpu(tmp_path, monkeypatch):
    monkeypatch.setenv("PATH", str(tmp_path))  # no nvidia-smi at all
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
    monkeypatch.setattr(pool, "_pool", None)
    worker.prestart_worker(every=True)
    assert pool._pool is None


def test_a_sweep_stopped_before_its_first_job_kills_its_warming_child(monkeypatch):
    """Bad input stops the sweep in its callback; the GPU child it started early (still importing
    torch, not yet reading its stdin) is killed at once, not waited for."""
    from omegaconf import OmegaConf

    from ablate.sweep.callbacks import SweepSetup

    calls = []
    monkeypatch.setattr(worker, "prestart_worker", lambda every=False: calls.append(f"started, every GPU {every}"))
    monkeypatch.setattr(worker, "stop_worker", lambda grace=10: calls.append(f"stopped, grace {grace}"))

    def bad_input(self, config, early):
        raise SystemExit("ablate: shape: seq must be >= 1")
    monkeypatch.setattr(SweepSetup, "_start", bad_input)
    config = OmegaConf.create({"mode": "gpu", "hydra": {"launcher": {}}})
    with pytest.raises(SystemExit, match="seq must be"):
        SweepSetup().on_multirun_start(config)
    assert calls == ["started, every GPU True", "stopped, grace 0"]
    calls.clear()  # static mode starts no child, and stops at once one that cli() started on a guess
    with pytest.raises(SystemExit):
        SweepSetup().on_multirun_start(OmegaConf.create({"mode": "static", "hydra": {"launcher": {}}}))
    assert calls == ["stopped, grace 0"]


def test_specs_sent_ahead_by_the_callback_are_answered_to_their_jobs_on_a_claimed_gpu(two_gpus, monkeypatch):
    """worker.send_ahead: the spec goes to a child at once, on a GPU this sweep holds until it
    ends; where every GPU is taken, no child is started early and nothing is sent (the job
    waits for a GPU when it runs, as before)."""
    monkeypatch.setattr(pool, "_pool", pool.Pool("tests.test_worker:stub"))
    gpu0 = gpus.visible()[0]
    try:
        with gpus.claim(), gpus.claim():  # other sweeps time on both GPUs
            worker.prestart_worker()
            assert pool._pool.workers == [] and not worker.send_ahead({"do": "ok", "tag": "a"})
        worker.prestart_worker()
        assert worker.send_ahead({"do": "ok", "tag": "a"}) and worker.send_ahead({"do": "ok", "tag": "b"})
        assert [s["tag"] for s in pool._pool.workers[0].sent] == ["a", "b"]  # both with the child at once
        assert gpus.try_lock(gpu0) is None  # held while they are in flight
        a = worker.run_worker({"do": "ok", "tag": "a"}, 60)
        b = worker.run_worker({"do": "ok", "tag": "b"}, 60)
        assert a.params["tag"] == "a" and b.params["tag"] == "b" and a.params["worker_pid"] == b.params["worker_pid"]
        assert gpus.try_lock(gpu0) is None  # held for the sweep's next jobs
    finally:
        worker.stop_worker()
    free = gpus.try_lock(gpu0)
    assert free is not None  # the sweep ended: let go
    os.close(free)


def test_the_callback_sends_the_built_jobs_ahead_and_stops_at_one_not_built(monkeypatch):
    from types import SimpleNamespace

    from ablate import pipeline
    from ablate.sweep import callbacks

    sent, drained = [], []
    monkeypatch.setattr(worker, "drain", lambda: drained.append(1))
    monkeypatch.setattr(worker, "send_ahead", lambda wire: sent.append(wire) or True)
    wires = {"a": {"w": "a"}, "na": None, "b": {"w": "b"}, "unbuilt": False, "c": {"w": "c"}}
    monkeypatch.setattr(pipeline, "built_wire", lambda job: wires[job.name])
    job = lambda name, profile=False: SimpleNamespace(name=name, bench={"profile": profile})  # noqa: E731
    each = callbacks.send_built_ahead()
    for name in ("a", "na", "b", "unbuilt", "c"):  # not timed (na): passed over; not built: the end
        each(job(name))
    assert sent == [{"w": "a"}, {"w": "b"}]
    assert len(drained) == 5  # the answers meanwhile read at every job, sent or not
    sent.clear()
    each = callbacks.send_built_ahead()
    for j in (job("a"), job("b", profile=True), job("c")):  # counters: the end
        each(j)
    assert sent == [{"w": "a"}]
    sent.clear()
    wires.update({str(i): {"w": str(i)} for i in range(30)})
    each = callbacks.send_built_ahead()
    for i in range(30):  # every built job, however many: the child never waits for the callback
        each(job(str(i)))
    assert sent == [{"w": str(i)} for i in range(30)]
    sent.clear()
    monkeypatch.setattr(worker, "send_ahead", lambda wire: False)  # the worker cannot take it: the end
    each = callbacks.send_built_ahead()
    for name in ("a", "b"):
        each(job(name))
    assert sent == []
