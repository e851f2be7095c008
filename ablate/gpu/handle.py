"""The parent's handle on one GPU child (ablate/gpu/child.py): start it (or attach to a kept
one: ablate/gpu/kept.py), send it specs, read its answers in order, each with its own slice
of the child's log, and turn what happened into the job's Result.

The parent waits up to `bench.timeout_s` from when the child began a job for its answer:
`timeout` (the child's group is killed), `crashed` (it died, or reported an error: it is then
killed at once, since the context may be poisoned), `incorrect` (base or variant failed the
correctness gate; not timed) or `ok` with the timing statistics. After `timeout` or
`crashed` a fresh child serves the next job; after `ok` or `incorrect` the same one does
(its pid is the param `worker_pid`).
"""
import contextlib
import json
import os
import select
import signal
import subprocess
import sys
import tempfile
import time

from ablate.gpu import kept
from ablate.job.result import Result
from ablate.paths import ROOT


def _describe_exit(code):
    if code is None:
        return "exit code unknown: a kept child, not this process's own"
    if code < 0:
        try:
            return f"signal {signal.Signals(-code).name}"
        except ValueError:
            return f"signal {-code}"
    return f"exit code {code}"


class Worker:
    """The parent's handle on one child at a time; `handler` (MODULE:FUNCTION) replaces the
    GPU job in tests.

    Specs may be sent ahead: `run(spec, timeout_s, then=next_spec)` writes the next job's spec
    too, so the child starts it the moment it answers this one, while the parent records this
    job and works out the next (a sweep's plan: plan_ahead). The child answers in order; each
    answer carries where its output ends in the log (`log_end`), so each job's log is its own.

    A child may be kept when its sweep ends (`stop(keep_s=...)`): it then waits, idle, on a
    socket named by its `key` (what it was started as: the command, the project, the python
    and the environment, the GPU pin among them) for the next sweep of this user, which
    attaches to it instead of starting one (python, torch, the CUDA context and the first
    uses of its libraries: ~7-10 s on the H100). A kept child serves one sweep at a time."""

    def __init__(self, handler=None):
        self.command = [sys.executable, "-m", "ablate.gpu.worker", "--serve", *([handler] if handler else [])]
        self.proc = self.log = None  # proc: the child this process started (None: none, or a kept one)
        self.pid = None  # the child's pid, started here or kept
        self.key = None  # what the child was started as (its socket's name when kept)
        self.sock = None  # the connection to a kept child (None: pipes to this process's own)
        self.cuda = None  # (available, why) as a kept child found it at its start
        self.gpu = None  # the gpus.Gpu the child is pinned to (None: whatever this process sees)
        self.sent = []  # specs written to the child and not yet answered, oldest first
        self.began = 0.0  # when the child began sent[0] (its deadline counts from there)
        self.log_at = 0  # where the output of the next answer begins in the log
        self.used = False  # a spec was written to this child
        self.kept = False  # the last child was kept for the next sweep (stop's keep_s)
        self._buffer = b""  # read past the last answer's line
        self.hello = False  # the child said it is ready (a child that dies before could not start)

    def _start(self):
        """A child for the next spec: the kept one of this key where one is idle, else a new one."""
        # One anonymous file takes all the child's output; each job reads its own slice.
        self.log = tempfile.TemporaryFile()
        env = {**os.environ, **({"CUDA_VISIBLE_DEVICES": self.gpu.pin} if self.gpu else {})}
        self.key = kept.child_key(self.command, env)
        self.sent, self.log_at, self.used, self.kept, self._buffer = [], 0, False, False, b""
        self.hello = False
        if self._attach():
            return
        # Own session: on timeout the whole group is killed, whatever it started.
        self.proc = subprocess.Popen(self.command, cwd=ROOT, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                     stderr=self.log, start_new_session=True, env=env)
        self.pid = self.proc.pid

    def _attach(self):
        """Whether a kept child of this key took this process's jobs (kept.attach)."""
        found = kept.attach(self.key, self.log.fileno())
        if found is None:
            return False
        self.sock, self.pid, self.cuda = found
        self.proc, self.hello = None, True  # its reply said it is ready
        return True

    def alive(self):
        if self.proc is not None:
            return self.proc.poll() is None
        return self.sock is not None

    def _fds(self):
        """(read, write) file descriptors of the protocol."""
        if self.sock is not None:
            return self.sock.fileno(), self.sock.fileno()
        return self.proc.stdout.fileno(), self.proc.stdin.fileno()

    def stop(self, grace=0.0, keep_s=0):
        """End the child: EOF on its stdin, `grace` seconds to exit, then its group is killed
        (at once when it was never sent a spec: it may still be starting, and nothing of it
        is waited for). Its exit code (None when there was none, or it was a kept one).
        What was sent ahead is lost. `keep_s` > 0: a child that served jobs and has nothing
        in flight is kept instead, idle, for the next sweep to attach to within that many
        seconds (None)."""
        self.kept = False
        if keep_s and self.used and not self.sent and self.alive() and self._keep(keep_s):
            return None
        proc, pid, sock = self.proc, self.pid, self.sock
        self.proc = self.pid = self.sock = None
        self.sent = []
        if sock is not None:  # a kept child, not this process's: its group is ended outright
            sock.close()
            with contextlib.suppress(OSError):
                os.killpg(pid, signal.SIGKILL)
            return None
        if proc is None:
            return None
        with contextlib.suppress(OSError):
            proc.stdin.close()
        try:
            proc.wait(timeout=grace if self.used else 0)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
        proc.stdout.close()
        return proc.returncode

    def _keep(self, keep_s):
        """Hand the idle child over to wait for the next sweep (it says so once it no longer
        dies with this process); False where it did not say so within 10 s."""
        self._send_line({"keep_s": float(keep_s), "key": self.key})
        line = self._line(time.monotonic() + 10)
        try:
            kept = bool(line) and json.loads(line).get("kept") is True
        except ValueError:
            kept = False
        if not kept:
            return False
        if self.sock is not None:
            self.sock.close()
        else:
            for f in (self.proc.stdin, self.proc.stdout):
                with contextlib.suppress(OSError):
                    f.close()
        self.proc = self.pid = self.sock = None
        self.kept = True
        return True

    def _send_line(self, data):
        try:
            os.write(self._fds()[1], json.dumps(data).encode() + b"\n")
        except (BrokenPipeError, ConnectionError):
            pass  # it died while idle: the read of its answer sees EOF and says how

    def _send(self, spec):
        self._send_line(spec)
        if not self.sent:
            self.began = time.monotonic()
        self.sent.append(spec)
        self.used = True

    def drain(self):
        """Read what the child has answered so far into the buffer, without waiting: specs
        sent ahead are answered while this process is busy elsewhere (composing a sweep's
        jobs), and a child whose answers fill the pipe (64 KiB, a few answers) would wait for
        them to be read. An EOF is left for `_line` to meet."""
        if (self.proc is None and self.sock is None) or not self.sent:
            return  # no child, or nothing asked of it
        fd = self._fds()[0]
        while select.select([fd], [], [], 0)[0] and self._read():
            pass

    def _read(self):
        """One read of what the child wrote into the buffer (its hello taken out); False at
        EOF (it died, or hung up)."""
        try:
            chunk = os.read(self._fds()[0], 1 << 16)
        except BlockingIOError:
            return True
        except ConnectionError:
            chunk = b""
        if not chunk:
            return False
        self._buffer += chunk
        if not self.hello and b"\n" in self._buffer and self._buffer.startswith(b'{"hello"'):
            self.hello = True
            self._buffer = self._buffer.partition(b"\n")[2]
        return True

    def has_answer(self):
        return b"\n" in self._buffer and (self.hello or not self._buffer.startswith(b'{"hello"'))

    def _line(self, deadline):
        """The child's next answer line by the deadline: the bytes, b"" at EOF (it died), None
        on timeout. Two answers may arrive in one read: the rest waits for the next call."""
        fd = self._fds()[0]
        while not self.has_answer():
            left = deadline - time.monotonic()
            if left <= 0 or not select.select([fd], [], [], left)[0]:
                return None
            if not self._read():
                return b""
        line, _, self._buffer = self._buffer.partition(b"\n")
        return line

    def run(self, spec, timeout_s, then=None):
        """The job's result dict. A timeout or a crash ends the child; the next job starts a
        fresh one. `then`: the spec the next job is expected to bring, sent now behind this
        one; a run whose spec is not the one sent ahead first waits for that answer and
        drops it (correct, only slower). A child that died with specs in flight answers them
        first (its crash, with its log), as the pool's does: restarted blindly, it would lose
        them, and this job's spec would run again on a fresh child."""
        while self.sent and self.sent[0] != spec:
            self._answer(timeout_s)  # not this job's: dropped (a timeout or crash ends the child)
        if not self.sent:
            if not self.alive():
                self.stop()
                self._start()
            self._send(spec)
        if then is not None and len(self.sent) == 1:
            self._send(then)
        return self._answer(timeout_s)

    def _answer(self, timeout_s):
        """The answer to sent[0], its deadline `timeout_s` after the child began it."""
        pid = self.pid
        line = self._line(self.began + timeout_s)
        self.sent.pop(0)
        self.began = time.monotonic()  # the child goes on with the next spec sent, if any
        answer = json.loads(line) if line else None
        end = answer.pop("log_end", None) if answer else None
        out = Result.from_dict(answer) if answer else None
        if out is None or out.status == "crashed":
            # One that died is waited for (its exit code says how); one that reported its crash has
            # nothing more to say (its log is whole): killed now, not waited for while its context
            # tears down, so the other GPUs are not kept waiting for their next specs.
            code = self.stop(grace=10 if line == b"" else 0)
        log = self.log
        end = os.fstat(log.fileno()).st_size if end is None else end
        output = os.pread(log.fileno(), max(end - self.log_at, 0), self.log_at).decode(errors="replace")
        self.log_at = end
        params, artifacts = {"worker_pid": pid}, {"worker.log": output}
        if line is None:
            return Result("timeout", params, artifacts=artifacts,
                          error=f"GPU worker killed after bench.timeout_s={timeout_s} s")
        if out is None:
            tail = "\n".join(output.strip().splitlines()[-5:])
            return Result("crashed", params, artifacts=artifacts,
                          error=f"GPU worker died ({_describe_exit(code)}) without a result; last output:\n{tail}")
        return out.add(params, artifacts=artifacts, keep=False)
