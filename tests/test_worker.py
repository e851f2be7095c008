"""The GPU child's protocol and lifecycle, on the CPU: a stub job handler (`stub` below, which
the child imports as tests.test_worker:stub) sleeps, crashes, prints or returns, and the
parent must keep the child across ok and incorrect jobs and replace it after a timeout or
a crash."""
import json
import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest
from omegaconf import OmegaConf

from ablate.gpu import pool, worker
from ablate.gpu.worker import Worker
from ablate.job.result import Result as result

ROOT = Path(__file__).resolve().parents[1]
STUB = "tests.test_worker:stub"
LONG = 60  # seconds: a job that should answer, on a slow machine


def stub(spec):
    """A fake GPU job; spec["do"] says what it does."""
    do = spec["do"]
    if do == "sleep":
        time.sleep(spec["s"])
    elif do == "sleep_in_group":  # a grandchild too: the timeout must kill the whole group
        sleeper = subprocess.Popen(["sleep", "1000"])
        Path(spec["pid_file"]).write_text(str(sleeper.pid))
        time.sleep(1000)
    elif do == "raise":
        raise RuntimeError("CUDA error: an illegal memory access was encountered\nmore detail")
    elif do == "segv":
        print("about to fault", file=sys.stderr, flush=True)
        os.kill(os.getpid(), signal.SIGSEGV)
    elif do == "slow_exit":  # its teardown takes seconds, as torch's and CUDA's do
        import atexit
        atexit.register(time.sleep, 5)
    elif do == "noise":  # a print, and a C library writing to fd 1: neither reaches the protocol
        print(f"print noise {spec['tag']}")
        os.write(1, f"fd1 noise {spec['tag']}\n".encode())
    began = time.time()
    if do == "stamp":  # when it began (the wall clock the parent reads too), then its work
        print(f"stamp {spec['tag']}", flush=True)
        time.sleep(spec.get("s", 0))
    return result(spec.get("status", "ok"), params={"served_by": os.getpid(), "began": began,
                                                    "tag": spec.get("tag", ""), "pad": "x" * spec.get("pad", 0)},
                  metrics={"x": 1.0})


def alive(pid):
    """Running (a zombie that nobody reaped counts as dead)."""
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] != "Z"
    except FileNotFoundError:
        return False


def wait_dead(pid, within=10):
    deadline = time.monotonic() + within
    while alive(pid) and time.monotonic() < deadline:
        time.sleep(0.05)
    return not alive(pid)


@pytest.fixture
def w():
    handle = Worker(handler=STUB)
    yield handle
    handle.stop()


def test_ok_and_incorrect_jobs_keep_the_child(w):
    first = w.run({"do": "ok"}, LONG)
    assert first.status == "ok" and first.metrics == {"x": 1.0} and first.error is None
    pid = first.params["worker_pid"]
    assert first.params["served_by"] == pid  # the pid the parent reports is the server's
    assert w.run({"do": "ok", "status": "incorrect"}, LONG).params["worker_pid"] == pid
    assert w.run({"do": "ok"}, LONG).params["worker_pid"] == pid
    assert alive(pid)


def test_timeout_kills_the_group_and_the_next_job_gets_a_fresh_child(w, tmp_path):
    pid = w.run({"do": "ok"}, LONG).params["worker_pid"]  # started: the timeout below is the job's alone
    pid_file = tmp_path / "sleeper.pid"
    tic = time.monotonic()
    out = w.run({"do": "sleep_in_group", "pid_file": str(pid_file)}, 1.5)
    assert out.status == "timeout" and "bench.timeout_s=1.5" in out.error
    assert time.monotonic() - tic < 10
    assert out.params["worker_pid"] == pid and not alive(pid)
    assert wait_dead(int(pid_file.read_text()))  # the grandchild went with it
    again = w.run({"do": "ok"}, LONG)
    assert again.status == "ok" and again.params["worker_pid"] != pid


def test_a_raised_error_is_crashed_and_ends_the_child(w):
    pid = w.run({"do": "ok"}, LONG).params["worker_pid"]
    out = w.run({"do": "raise"}, LONG)
    assert out.status == "crashed"
    assert out.error == "RuntimeError: CUDA error: an illegal memory access was encountered"
    assert "Traceback" in out.artifacts["worker.log"]
    assert out.params["worker_pid"] == pid and not alive(pid)  # exited: its context may be poisoned
    again = w.run({"do": "ok"}, LONG)
    assert again.status == "ok" and again.params["worker_pid"] != pid


def test_a_dead_child_is_crashed_with_its_signal_and_last_output(w):
    pid = w.run({"do": "ok"}, LONG).params["worker_pid"]
    out = w.run({"do": "segv"}, LONG)
    assert out.status == "crashed" and "signal SIGSEGV" in out.error
    assert "about to fault" in out.error
    again = w.run({"do": "ok"}, LONG)
    assert again.status == "ok" and again.params["worker_pid"] != pid


def test_a_child_killed_while_idle_is_replaced(w):
    pid = w.run({"do": "ok"}, LONG).params["worker_pid"]
    os.kill(pid, signal.SIGKILL)
    assert wait_dead(pid)
    again = w.run({"do": "ok"}, LONG)
    assert again.status == "ok" and again.params["worker_pid"] != pid


def test_output_stays_off_the_protocol_and_each_job_gets_its_own_log(w):
    one = w.run({"do": "noise", "tag": "one"}, LONG)
    two = w.run({"do": "noise", "tag": "two"}, LONG)
    assert one.status == two.status == "ok"
    assert one.params["worker_pid"] == two.params["worker_pid"]
    assert "print noise one" in one.artifacts["worker.log"]
    assert "fd1 noise one" in one.artifacts["worker.log"]
    assert "one" not in two.artifacts["worker.log"] and "fd1 noise two" in two.artifacts["worker.log"]


def test_stop_ends_an_idle_child_cleanly(w):
    pid = w.run({"do": "ok"}, LONG).params["worker_pid"]
    assert w.stop(grace=10) == 0  # EOF on stdin: it exits by itself, no kill
    assert not alive(pid) and w.proc is None
    assert w.stop() is None  # twice is harmless


def no_gpu_listed(monkeypatch):
    """This process's pool, of stand-in children, with no GPU listed (one unpinned child)."""
    from ablate.gpu import gpus

    monkeypatch.setattr(gpus, "visible", lambda: [])
    monkeypatch.setattr(pool, "_pool", pool.Pool(STUB))


def test_stop_worker_ends_the_sweeps_child_without_waiting_for_its_teardown(monkeypatch):
    no_gpu_listed(monkeypatch)
    pid = worker.run_worker({"do": "slow_exit"}, LONG).params["worker_pid"]
    tic = time.monotonic()
    worker.stop_worker()
    assert time.monotonic() - tic < 3 and not alive(pid)
    assert worker.run_worker({"do": "ok"}, LONG).params["worker_pid"] != pid  # a later job starts one
    worker.stop_worker()


@pytest.mark.parametrize("busy", [False, True])
def test_the_child_never_outlives_its_parent(tmp_path, busy):
    """A parent killed outright (no atexit): an idle child sees EOF, a busy one is killed with it."""
    script = textwrap.dedent(f"""
        import json, os, signal, sys, time
        from ablate.gpu.worker import Worker
        w = Worker(handler={STUB!r})
        print(w.run({{"do": "ok"}}, {LONG}).params["worker_pid"], flush=True)
        if {busy}:
            w.proc.stdin.write(json.dumps({{"do": "sleep", "s": 1000}}).encode() + b"\\n")
            w.proc.stdin.flush()
            time.sleep(0.5)
        os.kill(os.getpid(), signal.SIGKILL)
    """)
    proc = subprocess.run([sys.executable, "-c", script], cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert proc.returncode == -signal.SIGKILL, proc.stderr
    assert wait_dead(int(proc.stdout.split()[0]))


def test_serve_protocol_by_hand():
    """The child's side alone: one JSON line in, one JSON line out, EOF ends it with 0; a
    crash answers, then exits 1 without reading further."""
    lines = "".join(json.dumps(s) + "\n" for s in ({"do": "ok"}, {"do": "raise"}, {"do": "ok"}))
    proc = subprocess.run([sys.executable, "-m", "ablate.gpu.worker", "--serve", STUB], cwd=ROOT, input=lines,
                          capture_output=True, text=True, timeout=LONG)
    hello, *answers = [json.loads(line) for line in proc.stdout.splitlines()]
    assert hello == {"hello": hello["hello"]}  # ready, before any spec is read
    assert [a["status"] for a in answers] == ["ok", "crashed"] and proc.returncode == 1
    proc = subprocess.run([sys.executable, "-m", "ablate.gpu.worker", "--serve", STUB], cwd=ROOT,
                          input=json.dumps({"do": "ok"}) + "\n", capture_output=True, text=True, timeout=LONG)
    assert proc.returncode == 0 and json.loads(proc.stdout.splitlines()[1])["status"] == "ok"


def test_usage():
    proc = subprocess.run([sys.executable, "-m", "ablate.gpu.worker", "spec.json", "result.json"], cwd=ROOT,
                          capture_output=True, text=True, timeout=LONG)
    assert proc.returncode == 1 and "usage: python -m ablate.gpu.worker --serve" in proc.stderr


# ---- specs sent ahead (a sweep's plan) ----------------------------------------------------

def stamp(tag, s=0.0):
    return {"do": "stamp", "tag": tag, "s": s}


@pytest.mark.parametrize("ahead", [True, False])
def test_a_spec_sent_ahead_is_begun_before_its_job_asks(w, ahead):
    """With the next spec sent behind this one, the child starts it as soon as it has answered:
    the next job finds its work begun (without, it begins when asked)."""
    first = w.run(stamp("a"), LONG, then=stamp("b") if ahead else None)
    time.sleep(1.0)  # the parent records the job, composes the next
    asked = time.time()
    second = w.run(stamp("b"), LONG)
    assert first.params["tag"] == "a" and second.params["tag"] == "b" and second.status == "ok"
    assert second.params["worker_pid"] == first.params["worker_pid"]
    assert (second.params["began"] < asked - 0.5) == ahead
    assert not w.sent


def test_each_job_sent_ahead_gets_its_own_log(w):
    one = w.run({"do": "noise", "tag": "one"}, LONG, then={"do": "noise", "tag": "two"})
    time.sleep(0.5)  # the second has printed by now
    two = w.run({"do": "noise", "tag": "two"}, LONG)
    assert "print noise one" in one.artifacts["worker.log"] and "two" not in one.artifacts["worker.log"]
    assert "print noise two" in two.artifacts["worker.log"] and "one" not in two.artifacts["worker.log"]


def test_two_answers_read_at_once_go_each_to_its_job(w):
    w.run(stamp("warm"), LONG)
    w._send(stamp("a"))
    w._send(stamp("b"))
    time.sleep(1.0)  # both answered: one read gets both lines
    assert [w.run(stamp(t), LONG).params["tag"] for t in ("a", "b")] == ["a", "b"]


def test_a_spec_sent_ahead_for_another_job_is_answered_and_dropped(w):
    """The plan guessed wrong (the next job stopped before timing): the job that comes gets
    its own answer, after the one sent ahead finished in the same child."""
    first = w.run(stamp("a"), LONG, then=stamp("b", 0.5))
    other = w.run(stamp("c"), LONG)
    assert other.params["tag"] == "c" and "stamp c" in other.artifacts["worker.log"]
    assert "stamp b" not in other.artifacts["worker.log"]
    assert other.params["worker_pid"] == first.params["worker_pid"] and not w.sent


def test_a_crash_loses_what_was_sent_ahead_and_its_job_runs_it_on_a_fresh_child(w):
    crashed = w.run({"do": "raise"}, LONG, then=stamp("b"))
    assert crashed.status == "crashed" and not w.sent
    again = w.run(stamp("b"), LONG)
    assert again.status == "ok" and again.params["tag"] == "b"
    assert again.params["worker_pid"] != crashed.params["worker_pid"]


def test_a_child_that_died_on_a_spec_sent_ahead_answers_it_instead_of_running_it_again(w):
    """The child began the spec sent ahead and died on it while the parent was elsewhere: the
    job that asks for it gets that crash, from that child (with its log), and the spec is not
    run a second time on a fresh child."""
    first = w.run({"do": "ok"}, LONG, then={"do": "segv", "tag": "x"})
    assert wait_dead(first.params["worker_pid"])
    crashed = w.run({"do": "segv", "tag": "x"}, LONG)
    assert crashed.status == "crashed" and "SIGSEGV" in crashed.error
    assert crashed.params["worker_pid"] == first.params["worker_pid"]
    assert "about to fault" in crashed.artifacts["worker.log"] and not w.sent
    again = w.run({"do": "ok"}, LONG)
    assert again.status == "ok" and again.params["worker_pid"] != first.params["worker_pid"]


@pytest.mark.parametrize("work_s, status", [(4.0, "timeout"), (0.5, "ok")])
def test_the_deadline_of_a_spec_sent_ahead_counts_from_when_the_child_began_it(w, work_s, status):
    w.run(stamp("a"), LONG, then=stamp("b", work_s))
    time.sleep(1.0)  # b runs meanwhile
    asked = time.monotonic()
    out = w.run(stamp("b", work_s), 2.0)
    assert out.status == status
    if status == "timeout":  # 2 s after b began, not after the ask
        assert time.monotonic() - asked < 1.8


def test_answers_to_specs_sent_ahead_are_drained_so_the_child_never_waits_on_a_full_pipe(w):
    """Eight answers of ~20 kB (more than a pipe's 64 KiB) given while the parent does other
    work: drained into the buffer as they come, each job then reads its own, all begun
    before the first was asked for (without drain the child waits after the third)."""
    specs = [{"do": "stamp", "tag": str(i), "pad": 20_000} for i in range(8)]
    w.run(specs[0], LONG)  # the child is up; the other seven sent ahead
    for spec in specs[1:]:
        w._send(spec)
    deadline = time.monotonic() + LONG
    while w._buffer.count(b"\n") < 7 and time.monotonic() < deadline:
        w.drain()
        time.sleep(0.02)
    asked = time.time()
    outs = [w.run(spec, LONG) for spec in specs[1:]]
    assert [o.params["tag"] for o in outs] == [s["tag"] for s in specs[1:]]
    assert all(o.status == "ok" and o.params["began"] < asked for o in outs)
    assert w.sent == [] and w._buffer == b""


def test_the_plan_sends_the_next_specs_ahead_and_holds_the_gpu_until_the_sweep_ends(tmp_path, monkeypatch):
    """plan_ahead queues the sweep's specs: a lone child gets them all at once (up to
    pool.AHEAD_ONE), each job reads its own answer, the GPU stays claimed until stop_worker,
    and the plan is forgotten then."""
    from ablate.gpu import gpus

    monkeypatch.setenv("PATH", str(tmp_path))  # no nvidia-smi: one stand-in GPU below
    gpu = gpus.Gpu("0", "GPU-test", "stand-in")
    monkeypatch.setattr(gpus, "visible", lambda: [gpu])
    monkeypatch.setenv(gpus.LOCK_DIR_ENV, str(tmp_path / "locks"))
    monkeypatch.setattr(pool, "_pool", pool.Pool(STUB))

    def free():
        fd = gpus._try_lock(gpu, gpus.lock_dir())
        if fd is not None:
            os.close(fd)
        return fd is not None

    try:
        worker.prestart_worker()
        child = pool._pool.workers[0]
        specs = [stamp("a"), stamp("b"), stamp("c")]
        worker.plan_ahead(specs)
        assert child.sent == specs and not free()
        assert worker.run_worker(specs[0], LONG).params["tag"] == "a"
        assert worker.run_worker(specs[1], LONG).params["tag"] == "b"
        assert worker.run_worker(specs[2], LONG).params["tag"] == "c"
        assert child.sent == [] and not free()  # held for the sweep's next jobs
        assert worker.run_worker(stamp("d"), LONG).params["tag"] == "d"  # not planned: sent when asked
        assert child.sent == [] and pool._pool.pending == []
    finally:
        worker.stop_worker(grace=0)
    assert pool._pool.pending == [] and pool._pool.workers == [] and free()


def test_a_child_never_sent_a_spec_is_not_waited_for(w):
    """Started on a guess (cli(), before Hydra composed) and not needed: killed at once, even
    while it is still starting and not reading its stdin."""
    w.command = [sys.executable, "-c", "import time; time.sleep(30)"]
    w._start()
    tic = time.monotonic()
    w.stop(grace=10)
    assert time.monotonic() - tic < 5 and w.proc is None


# ---- a child kept for the next sweep ------------------------------------------------------

def kept(tmp_path, monkeypatch, handler=STUB):
    """A worker whose key is this test's own (an env var of its tmp_path)."""
    monkeypatch.setenv("ABLATE_TEST_KEY", str(tmp_path))
    return Worker(handler=handler)


def keep_one(tmp_path, monkeypatch, gpu=None):
    """A child that served a job and was kept: its pid."""
    first = kept(tmp_path, monkeypatch)
    first.gpu = gpu
    pid = first.run({"do": "ok"}, LONG).params["worker_pid"]
    first.stop(keep_s=LONG)
    return pid


def test_a_kept_child_serves_the_next_sweep_and_ends_when_idle(tmp_path, monkeypatch):
    first = kept(tmp_path, monkeypatch)
    one = first.run({"do": "noise", "tag": "one"}, LONG)
    pid = one.params["worker_pid"]
    assert first.stop(keep_s=LONG) is None and first.kept and first.pid is None
    assert alive(pid)  # kept: it outlives the sweep's handle on it
    second = kept(tmp_path, monkeypatch)  # the next sweep, the same child
    two = second.run({"do": "noise", "tag": "two"}, LONG)
    assert two.status == "ok" and two.params["worker_pid"] == pid and second.proc is None
    # Its output now goes to the new sweep's log, each job's slice its own.
    assert "fd1 noise two" in two.artifacts["worker.log"] and "one" not in two.artifacts["worker.log"]
    assert second.stop(keep_s=0.5) is None and second.kept
    assert wait_dead(pid)  # nobody came within keep_s: it ended by itself
    third = kept(tmp_path, monkeypatch)
    assert third.run({"do": "ok"}, LONG).params["worker_pid"] != pid
    third.stop()


def test_a_kept_child_serves_only_the_same_environment(tmp_path, monkeypatch):
    pid = keep_one(tmp_path, monkeypatch)
    try:
        other = kept(tmp_path / "elsewhere", monkeypatch)  # another environment: another child
        assert other.run({"do": "ok"}, LONG).params["worker_pid"] != pid
        other.stop()
        assert alive(pid)  # still waiting for its own
    finally:
        os.killpg(pid, signal.SIGKILL)


def test_a_kept_child_whose_files_changed_ends_instead_of_serving(tmp_path, monkeypatch):
    """An edit to a module it imported (here the handler's; the same holds for ablate's, a
    plugin's and each library it loaded): the next sweep gets a fresh child."""
    (tmp_path / "edited_handler.py").write_text("from tests.test_worker import stub\n")
    monkeypatch.setenv("PYTHONPATH", f"{tmp_path}{os.pathsep}{ROOT}")
    first = kept(tmp_path, monkeypatch, handler="edited_handler:stub")
    pid = first.run({"do": "ok"}, LONG).params["worker_pid"]
    first.stop(keep_s=LONG)
    (tmp_path / "edited_handler.py").write_text("from tests.test_worker import stub  # edited\n")
    second = kept(tmp_path, monkeypatch, handler="edited_handler:stub")
    assert second.run({"do": "ok"}, LONG).params["worker_pid"] != pid
    assert wait_dead(pid)  # the stale one ended
    second.stop()


def test_a_kept_child_serves_one_sweep_at_a_time(tmp_path, monkeypatch):
    pid = keep_one(tmp_path, monkeypatch)
    a, b = kept(tmp_path, monkeypatch), kept(tmp_path, monkeypatch)
    assert a.run({"do": "ok"}, LONG).params["worker_pid"] == pid
    tic = time.monotonic()
    assert b.run({"do": "ok"}, LONG).params["worker_pid"] != pid  # busy: b starts its own, at once
    assert time.monotonic() - tic < LONG / 2
    a.stop()
    b.stop()
    assert wait_dead(pid)


def test_a_kept_child_is_killed_on_timeout_and_with_a_sweep_that_dies_mid_job(tmp_path, monkeypatch):
    pid = keep_one(tmp_path, monkeypatch)
    second = kept(tmp_path, monkeypatch)
    out = second.run({"do": "sleep", "s": 1000}, 1)
    assert out.status == "timeout" and out.params["worker_pid"] == pid and wait_dead(pid)
    # A sweep killed outright while its kept child works: the child ends too (it is not the
    # sweep's own child, so PR_SET_PDEATHSIG cannot do it).
    third = kept(tmp_path, monkeypatch)
    pid = third.run({"do": "ok"}, LONG).params["worker_pid"]
    third.stop(keep_s=LONG)
    script = textwrap.dedent(f"""
        import os, signal, time
        from ablate.gpu.worker import Worker
        w = Worker(handler={STUB!r})
        w._start()
        print(w.pid, w.proc is None, flush=True)
        w._send({{"do": "sleep", "s": 1000}})
        time.sleep(0.5)
        os.kill(os.getpid(), signal.SIGKILL)
    """)
    proc = subprocess.run([sys.executable, "-c", script], cwd=ROOT, capture_output=True, text=True, timeout=120,
                          env={**os.environ, "ABLATE_TEST_KEY": str(tmp_path)})
    assert proc.stdout.split() == [str(pid), "True"], proc.stderr
    assert wait_dead(pid)


def test_a_crash_in_a_kept_child_is_recorded_and_the_next_job_starts_a_fresh_one(tmp_path, monkeypatch):
    pid = keep_one(tmp_path, monkeypatch)
    second = kept(tmp_path, monkeypatch)
    out = second.run({"do": "segv"}, LONG)
    assert out.status == "crashed" and out.params["worker_pid"] == pid and "about to fault" in out.artifacts["worker.log"]
    assert "exit code unknown" in out.error and wait_dead(pid)
    assert second.run({"do": "ok"}, LONG).params["worker_pid"] != pid
    second.stop()


def test_keep_worker_s_is_checked_up_front(monkeypatch):
    from ablate.job.job import keep_worker_s

    assert keep_worker_s(OmegaConf.create({"keep_worker_s": 30})) == 30.0
    assert keep_worker_s(OmegaConf.create({})) == 0.0  # a config from before it: ended with the run
    for bad in (-1, "soon", True):
        with pytest.raises(ValueError, match=r"keep_worker_s must be a number of seconds >= 0.*got"):
            keep_worker_s(OmegaConf.create({"keep_worker_s": bad}))
    monkeypatch.setenv("ABLATE_KEEP_WORKER_S", "later")
    cfg = OmegaConf.load(ROOT / "conf" / "config.yaml")
    with pytest.raises(ValueError, match="keep_worker_s must be .* got 'later'"):
        keep_worker_s(cfg)
    monkeypatch.setenv("ABLATE_KEEP_WORKER_S", "45")
    assert keep_worker_s(cfg) == 45.0


def test_prestart_attaches_to_the_kept_child_once(tmp_path, monkeypatch):
    from ablate.gpu import gpus

    gpu = gpus.Gpu("0", None, None)
    monkeypatch.setattr(gpus, "visible", lambda: [gpu])
    monkeypatch.setenv(gpus.LOCK_DIR_ENV, str(tmp_path / "locks"))
    pid = keep_one(tmp_path, monkeypatch, gpu)
    monkeypatch.setattr(pool, "_pool", pool.Pool(STUB))
    try:
        worker.prestart_worker()  # cli() and then the sweep's callback: attached once, kept
        worker.prestart_worker(every=True)
        assert [w.pid for w in pool._pool.workers] == [pid] and pool._pool.workers[0].proc is None
        assert worker.run_worker({"do": "ok"}, LONG).params["worker_pid"] == pid
    finally:
        worker.stop_worker()
    assert wait_dead(pid)


def test_stop_worker_says_once_that_the_child_is_kept(tmp_path, monkeypatch, caplog):
    monkeypatch.setenv("ABLATE_TEST_KEY", str(tmp_path))
    no_gpu_listed(monkeypatch)
    pid = worker.run_worker({"do": "ok"}, LONG).params["worker_pid"]
    with caplog.at_level("INFO", logger="ablate"):
        worker.stop_worker(keep_s=LONG)
        worker.stop_worker()  # atexit's, later: nothing more to say, nothing ended
    assert [r.getMessage() for r in caplog.records] == [
        f"the GPU worker is kept for {LONG} s for the next run (keep_worker_s=0: ended with the run)"]
    assert alive(pid)
    os.killpg(pid, signal.SIGKILL)


def test_stop_workers_ends_the_kept_children_and_leaves_a_busy_one(tmp_path, monkeypatch, capsys):
    """Only this test's two children are asked to end (`keys`): other tests' kept children
    may be waiting at the same time, which the command itself would end too."""
    idle = keep_one(tmp_path / "a", monkeypatch)
    keys = [worker.child_key(Worker(STUB).command, {**os.environ, "ABLATE_TEST_KEY": str(tmp_path / k)})
            for k in ("a", "b")]
    busy_pid = keep_one(tmp_path / "b", monkeypatch)
    busy = kept(tmp_path / "b", monkeypatch)
    assert busy.run({"do": "ok"}, LONG).params["worker_pid"] == busy_pid
    assert keys[0] in worker.kept_keys() and keys[1] not in worker.kept_keys()  # serving a run: not listening
    assert worker.stop_kept([], keys=keys) == 0
    assert capsys.readouterr().out.strip() == f"ended 1 kept GPU worker: pid {idle}"
    assert wait_dead(idle) and alive(busy_pid) and keys[0] not in worker.kept_keys()
    busy.stop()
    assert wait_dead(busy_pid)
    worker.stop_kept([], keys=keys)
    assert capsys.readouterr().out.strip() == "ended 0 kept GPU workers"


def test_stop_workers_is_a_command():
    proc = subprocess.run([sys.executable, "-m", "ablate", "stop-workers", "--help"], cwd=ROOT, capture_output=True,
                          text=True, timeout=LONG)
    assert proc.returncode == 0 and "end this user's kept GPU workers now" in proc.stdout


def test_a_reported_crash_does_not_wait_for_the_childs_teardown(w):
    """A child that answered `crashed` has said all it will (its log is whole): it is killed at
    once, not waited for while it tears down (5 s here; a poisoned CUDA context's, on a GPU),
    so that the pool's other GPUs get their next specs meanwhile."""
    pid = w.run({"do": "slow_exit"}, LONG).params["worker_pid"]  # its exit now takes 5 s
    tic = time.monotonic()
    out = w.run({"do": "raise"}, LONG)
    assert out.status == "crashed" and "illegal memory access" in out.error
    assert time.monotonic() - tic < 3 and wait_dead(pid, within=1)
