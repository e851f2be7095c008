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

from ablate.gpu import worker
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
    elif do == "noise":  # a print, and a C library writing to fd 1: neither reaches the protocol
        print(f"print noise {spec['tag']}")
        os.write(1, f"fd1 noise {spec['tag']}\n".encode())
    return result(spec.get("status", "ok"), params={"served_by": os.getpid()}, metrics={"x": 1.0})


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


def test_stop_worker_ends_the_sweeps_child(monkeypatch):
    monkeypatch.setattr(worker, "_worker", Worker(handler=STUB))
    pid = worker._worker.run({"do": "ok"}, LONG).params["worker_pid"]
    worker.stop_worker()
    assert not alive(pid)
    assert worker._worker.run({"do": "ok"}, LONG).params["worker_pid"] != pid  # a later job starts one
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
    answers = [json.loads(line) for line in proc.stdout.splitlines()]
    assert [a["status"] for a in answers] == ["ok", "crashed"] and proc.returncode == 1
    proc = subprocess.run([sys.executable, "-m", "ablate.gpu.worker", "--serve", STUB], cwd=ROOT,
                          input=json.dumps({"do": "ok"}) + "\n", capture_output=True, text=True, timeout=LONG)
    assert proc.returncode == 0 and json.loads(proc.stdout)["status"] == "ok"


def test_usage():
    proc = subprocess.run([sys.executable, "-m", "ablate.gpu.worker", "spec.json", "result.json"], cwd=ROOT,
                          capture_output=True, text=True, timeout=LONG)
    assert proc.returncode == 1 and "usage: python -m ablate.gpu.worker --serve" in proc.stderr
