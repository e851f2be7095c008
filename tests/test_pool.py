"""Every GPU of a host in one pipeline, on the CPU: a fake nvidia-smi lists two GPUs and a
stand-in child (`stand_in` below, imported by the child as tests.test_pool:stand_in) plays
the GPU job. The jobs spread over one child per GPU; a variant that faults or hangs on one
GPU leaves the other timing; a GPU whose child cannot start is dropped with one line and its
jobs go to the other; the control is timed on every GPU and their spread recorded."""
import os
import select
import signal
import sys
import time

import pytest

from ablate.gpu import gpus, pool, worker
from ablate.job.result import Result

STAND_IN = "tests.test_pool:stand_in"
LISTING = ("0, GPU-aaaaaaaa-0000-0000-0000-000000000000, NVIDIA H100 80GB HBM3\n"
           "1, GPU-bbbbbbbb-0000-0000-0000-000000000000, NVIDIA H100 80GB HBM3\n")
BROKEN_ENV = "ABLATE_TEST_BROKEN_GPU"
LONG = 60

if os.environ.get(BROKEN_ENV) and os.environ.get(BROKEN_ENV) == os.environ.get("CUDA_VISIBLE_DEVICES"):
    sys.exit("stand-in: no CUDA context can be made on this GPU")  # in the child, before it is ready


def stand_in(spec):
    """A GPU job: spec["do"] says what it does on its GPU; answers when it began and ended."""
    pinned = os.environ.get("CUDA_VISIBLE_DEVICES", "unset")
    began = time.time()
    time.sleep(spec.get("after_s", 0.0))  # before what it does: the parent is past its sending by then
    if spec.get("do") == "segv":
        print("about to fault", file=sys.stderr, flush=True)
        os.kill(os.getpid(), signal.SIGSEGV)
    elif spec.get("do") == "hang":
        time.sleep(1000)
    time.sleep(spec.get("s", 0.0))
    base_us = 10.0 * (1.03 if pinned.startswith("GPU-bbbb") else 1.0)  # the second GPU 3% slower
    return Result("ok", params={"pinned": pinned, "tag": spec.get("tag", "")},
                  metrics={"base_us": base_us, "began": began, "ended": time.time()})


@pytest.fixture
def two_gpus(tmp_path, monkeypatch):
    from conftest import fake_gpus  # here: the children import this module, without tests/ on their path

    fake_gpus(tmp_path, monkeypatch, LISTING)
    monkeypatch.setattr(pool, "_pool", pool.Pool(STAND_IN))
    yield
    worker.stop_worker()


def ready(within=LONG):
    """Wait until every child of the pool said it is ready (so the queue's order decides
    which GPU takes which spec: the first to GPU 0, the second to GPU 1, and so on)."""
    deadline = time.monotonic() + within
    for w in pool._pool.workers:
        while not w.hello and time.monotonic() < deadline:
            if select.select([w._fds()[0]], [], [], 0.1)[0] and not w._read():
                break
    return [w.hello for w in pool._pool.workers]


def job(tag, s=0.0, timeout_s=LONG, **extra):
    return {"tag": tag, "s": s, "bench": {"timeout_s": timeout_s}, **extra}


def test_jobs_spread_over_one_child_per_gpu(two_gpus):
    worker.prestart_worker(every=True)
    assert ready() == [True, True]
    specs = [job(str(i), s=0.3) for i in range(8)]
    worker.plan_ahead(specs)
    outs = [worker.run_worker(spec, LONG) for spec in specs]
    assert [o.params["tag"] for o in outs] == [s["tag"] for s in specs]  # each job its own answer
    on = {g: [o for o in outs if o.params["gpu_index"] == g] for g in ("0", "1")}
    assert len(on["0"]) >= 2 and len(on["1"]) >= 2
    assert all(o.params["pinned"].startswith("GPU-aaaa") for o in on["0"])
    assert all(o.params["pinned"].startswith("GPU-bbbb") for o in on["1"])
    assert len({o.params["worker_pid"] for o in on["0"]}) == 1  # each GPU's child kept between jobs
    # At once: some job on GPU 1 ran while one on GPU 0 did.
    assert any(a.metrics["began"] < b.metrics["ended"] and b.metrics["began"] < a.metrics["ended"]
               for a in on["0"] for b in on["1"])


@pytest.mark.parametrize("plant", ["segv", "hang"])
def test_a_fault_or_a_hang_on_one_gpu_leaves_the_other_timing(two_gpus, plant):
    worker.prestart_worker(every=True)
    assert ready() == [True, True]
    bad = job("bad", timeout_s=3.0, do=plant)  # first in the queue, the rest after it
    good = [job(t, s=0.1) for t in "abcdef"]
    pids = {w.gpu.index: w.pid for w in pool._pool.workers}
    worker.plan_ahead([bad, *good])
    out = worker.run_worker(bad, 3.0)
    when = time.time()
    answered = [o for key, got in pool._pool.done.items() for _, o in got]
    # Which GPU took it is read from its answer: the first child with room (GPU 0 where both had
    # said hello when the queue was dispatched; under load CI saw GPU 1 take it, and the fault
    # answered within plan_ahead already, three times, each breaking a test that looked for the
    # spec in the pool's state first). It ran on the child started before the queue was sent.
    bad_gpu = out.params["gpu_index"]
    other_gpu = ({"0", "1"} - {bad_gpu}).pop()
    first_pid = pids[bad_gpu]
    # Under load the child could fault before the pool read it, and the next dispatch restarted
    # it blindly, losing its spec (sent again to a fresh child: crashed twice, the first log lost);
    # the test below holds the mend. What the pool saw is said here if it happens again.
    now = {w.gpu.index: w.pid for w in pool._pool.workers}
    assert out.params["worker_pid"] == first_pid, (
        f"pids before the queue {pids}, now {now}; answer {out.status}: {out.error}; "
        f"its log: {out.artifacts.get('worker.log', '')[-400:]!r}")
    if plant == "segv":
        assert out.status == "crashed" and "SIGSEGV" in out.error and "about to fault" in out.error
    else:
        assert out.status == "timeout" and "bench.timeout_s=3.0" in out.error
        # the other GPU went on while this one hung: its jobs were answered before this one's was given up.
        assert len(answered) >= 3 and all(o.params["gpu_index"] == other_gpu for o in answered)
        assert all(o.metrics["ended"] < when for o in answered)
    outs = [worker.run_worker(spec, LONG) for spec in good]
    assert [o.status for o in outs] == ["ok"] * len(good)
    assert [o.params["tag"] for o in outs] == list("abcdef")
    assert next(w for w in pool._pool.workers if w.gpu.index == bad_gpu).pid != first_pid  # a fresh child on the faulty GPU
    assert [w.gpu.index for w in pool._pool.workers] == ["0", "1"]  # nothing dropped: the GPU is fine


def test_a_child_that_died_on_a_spec_in_flight_answers_it_before_a_fresh_one_starts(two_gpus):
    """A child that faults before the pool reads it, met first by the next dispatch (another spec
    to send, room on that child): its spec is answered as the crash it was, once, not sent again."""
    worker.prestart_worker(every=True)
    assert ready() == [True, True]
    bad = job("bad", do="segv", after_s=0.3)
    worker.plan_ahead([bad])  # to GPU 0, the first child with room
    w = next(w for w in pool._pool.workers if w.sent)
    first = w.pid
    deadline = time.monotonic() + LONG
    while w.alive() and time.monotonic() < deadline:  # it faults; nothing is read from it yet
        time.sleep(0.01)
    worker.plan_ahead([job("a"), job("b")])  # a to the other child, b to this one: dead, with bad in flight
    out = worker.run_worker(bad, LONG)
    assert out.status == "crashed" and "about to fault" in out.error
    assert out.params["worker_pid"] == first and out.params["gpu_index"] == w.gpu.index
    outs = [worker.run_worker(job(t), LONG) for t in "ab"]
    assert [o.status for o in outs] == ["ok", "ok"]
    assert "about to fault" not in "".join(o.artifacts.get("worker.log", "") for o in outs)  # bad ran once
    assert w.pid != first  # a fresh child on that GPU


def test_a_gpu_whose_child_cannot_start_is_dropped_with_one_line(two_gpus, monkeypatch, caplog):
    monkeypatch.setenv(BROKEN_ENV, "GPU-bbbbbbbb-0000-0000-0000-000000000000")
    specs = [job(str(i), s=0.05) for i in range(5)]
    with caplog.at_level("INFO", logger="ablate"):
        worker.prestart_worker(every=True)
        worker.plan_ahead(specs)
        outs = [worker.run_worker(spec, LONG) for spec in specs]
    assert [o.status for o in outs] == ["ok"] * 5, [o.error for o in outs]
    assert {o.params["gpu_index"] for o in outs} == {"0"}
    lines = [r.getMessage() for r in caplog.records if "could not start" in r.getMessage()]
    assert len(lines) == 1 and len(lines[0].splitlines()) == 1
    assert lines[0].startswith("GPU 1 (NVIDIA H100 80GB HBM3): its GPU worker could not start (exit code 1")
    assert "no CUDA context can be made on this GPU" in lines[0]
    assert [w.gpu.index for w in pool._pool.workers] == ["0"]
    broken = gpus.visible()[1]
    free = gpus.try_lock(broken)
    assert free is not None  # a dropped GPU is let go, for another sweep
    os.close(free)
    worker.prestart_worker(every=True)  # and not tried again in this one
    assert [w.gpu.index for w in pool._pool.workers] == ["0"] and len(lines) == 1


def test_the_control_is_timed_on_every_gpu_and_their_spread_recorded(two_gpus, monkeypatch):
    control = job("none", base_so="/b/base.so", variant_so="/b/base.so", launches=1, sm_fraction=None)
    variant = job("v", base_so="/b/base.so", variant_so="/b/v.so", launches=1, sm_fraction=None)
    worker.prestart_worker(every=True)
    worker.plan_ahead([control, variant])
    out = worker.run_worker(control, LONG)
    assert out.params["control_gpus"] == "0,1"
    assert out.metrics["base_us_gpu0"] == 10.0 and out.metrics["base_us_gpu1"] == pytest.approx(10.3)
    assert out.metrics["gpu_spread"] == pytest.approx(0.03)
    assert "gpu_spread" not in worker.run_worker(variant, LONG).metrics  # only the control is timed twice
    worker.stop_worker()
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "1")  # one GPU: timed once, no spread
    worker.prestart_worker(every=True)
    alone = worker.run_worker(control, LONG)
    assert alone.params["gpu_index"] == "1" and "gpu_spread" not in alone.metrics


def test_each_gpus_child_is_kept_for_the_next_sweep_under_its_own_name(two_gpus, tmp_path, monkeypatch, caplog):
    monkeypatch.setenv("ABLATE_TEST_KEY", str(tmp_path))  # this test's own kept children
    worker.prestart_worker(every=True)
    assert ready() == [True, True]
    specs = [job(str(i)) for i in range(4)]
    worker.plan_ahead(specs)
    served = {o.params["gpu_index"]: o.params["worker_pid"] for o in (worker.run_worker(s, LONG) for s in specs)}
    assert sorted(served) == ["0", "1"]
    keys = [w.key for w in pool._pool.workers]
    with caplog.at_level("INFO", logger="ablate"):
        worker.stop_worker(keep_s=LONG)
    assert "2 GPU workers are kept for 60 s" in caplog.text and len(set(keys)) == 2
    monkeypatch.setattr(pool, "_pool", pool.Pool(STAND_IN))  # the next sweep
    worker.prestart_worker(every=True)
    assert {w.gpu.index: w.pid for w in pool._pool.workers} == served  # each GPU's own child, attached
    again = worker.run_worker(job("again"), LONG)
    assert again.params["worker_pid"] == served[again.params["gpu_index"]]
    assert again.params["pinned"].startswith("GPU-aaaa" if again.params["gpu_index"] == "0" else "GPU-bbbb")


def test_a_job_whose_answer_is_in_already_sends_the_children_their_next_specs(two_gpus):
    """pool.result reads and sends even where its job's answer was read before: a sweep whose
    parent records answers that came in meanwhile (~0.3 s a job) must not leave the children
    idle until a job has to wait (the CPU replay: tools/replay_sweep.py)."""
    worker.prestart_worker(every=True)
    assert ready() == [True, True]
    specs = [job(str(i), s=0.1) for i in range(10)]
    worker.plan_ahead(specs)  # two to each child, six waiting
    assert len(pool._pool.pending) == 6
    time.sleep(1.5)  # each child answered both and waits
    assert worker.run_worker(specs[0], LONG).params["tag"] == "0"  # reads one answer of each child, sends one more each
    assert len(pool._pool.pending) == 4 and pool._pool.done
    time.sleep(1.5)  # the children answered again and wait; job 1's answer was read already
    assert worker.run_worker(specs[1], LONG).params["tag"] == "1"
    assert len(pool._pool.pending) == 2  # the children got their next specs all the same
    assert [worker.run_worker(s, LONG).params["tag"] for s in specs[2:]] == [s["tag"] for s in specs[2:]]


def test_children_take_many_specs_while_the_queue_is_long_and_few_at_its_end():
    """Deep while the queue holds more than AHEAD_ONE a child (the parent's stretches away from
    the pool, MLflow's start say, leave no child dry), shallow at its end (the last jobs spread)."""
    p = pool.Pool(STAND_IN)
    p.workers = [object(), object()]
    p.pending = [({"n": i}, None) for i in range(2 * pool.AHEAD_ONE + 1)]
    assert p._depth() == pool.AHEAD_ONE
    p.pending = p.pending[:2 * pool.AHEAD_ONE] + [({"copy": 1}, p.workers[0])] * 5  # pinned copies do not count
    assert p._depth() == pool.AHEAD_MANY
    p.workers = p.workers[:1]
    assert p._depth() == pool.AHEAD_ONE  # a lone child: always deep


def test_a_control_behind_a_hang_is_still_timed_on_every_gpu(two_gpus):
    """The hang's child ends with the specs behind it: the control among them goes back to its
    own GPU, not to the other (which times its copy already: the spread would then be one GPU's)."""
    worker.prestart_worker(every=True)
    assert ready() == [True, True]
    hang = job("hang", timeout_s=3.0, do="hang")
    control = job("none", base_so="/b/base.so", variant_so="/b/base.so", launches=1, sm_fraction=None)
    worker.plan_ahead([hang, job("y", s=0.1), control])
    (hang_w,) = [w for w in pool._pool.workers if any(s is hang for s in w.sent)]
    assert any(s is control for s in hang_w.sent)  # the control waits behind the hang
    assert worker.run_worker(hang, 3.0).status == "timeout"
    out = worker.run_worker(control, LONG)
    assert out.status == "ok" and out.params["control_gpus"] == "0,1", out.params
