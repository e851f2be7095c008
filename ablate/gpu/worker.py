"""The GPU half of a job, run in a long-lived child process.

A variant that faults (an illegal or misaligned address leaves the CUDA context unusable)
or hangs must not take the sweep down with it, so the GPU work runs in a child. Starting one
per job costs python, torch, a CUDA context and cuDNN (~5-7 s) every time, so one child
serves the jobs of a sweep in turn:

    python -m ablate.gpu.worker --serve [MODULE:FUNCTION]

reads one JSON spec per line on stdin and answers one JSON result per line, in order, on a
private copy of its stdout (everything else it prints goes to stderr, a file the parent slices
per job into the job's `worker.log`: each answer says where its job's output ends,
`log_end`). A sweep sends the next job's spec before it reads this one's answer (plan_ahead),
so the child goes from one job to the next without waiting for the parent. The parent waits
up to `bench.timeout_s` from when the child began the job for its answer and turns what
happened into the job's result dict: `timeout` (the child's group is killed), `crashed` (it
died, or reported an error: it then exits, since the context may be poisoned), `incorrect`
(base or variant failed the correctness gate; not timed) or `ok` with the timing
statistics; a spec sent ahead and lost with the child is sent again to the next one. After
`timeout` or `crashed` the next job starts a fresh child; after `ok` or `incorrect` the same
child serves it (its pid is the param `worker_pid`). The child ends at
the end of the sweep (`stop_worker`, and atexit), on EOF on stdin, or with the parent;
unless the sweep keeps it (the config's `keep_worker_s`): then it waits, idle, for the next
sweep that would start the very same child, on a socket named after it, and serves that
sweep as it served this one, once it has checked that no file it loaded has changed (the
next sweep's first job is then ~7-10 s sooner on the H100: docs/benchmarks.md, "Sweep
speed"); it ends after keep_worker_s idle seconds.

The spec is the job as `Job.wire` sends it (ablate/job/job.py): {"kernel_dir": the kernel's
plugin folder, "base_so": path, "variant_so": path, "shape": {the shape's fields, as the
kernel's spec validated them}, "peers": [names], "launches": how many launches of the variant
stand for one (1; a calibration's 2), "bench": {the bench config}}; the child reads it back
with `from_wire`. Answers are `Result`s (ablate/job/result.py) as JSON.
"""
import atexit
import contextlib
import ctypes
import functools
import hashlib
import importlib
import json
import logging
import os
import select
import signal
import socket
import stat
import struct
import subprocess
import sys
import tempfile
import threading
import time
import traceback
from pathlib import Path

from ablate.job.result import Result
from ablate.paths import ROOT

log = logging.getLogger("ablate")
PR_SET_PDEATHSIG = 1  # linux/prctl.h
# Not part of what a child is: they change from one sweep (or shell) to the next, never what
# a child computes (the sweep's MLflow run: ablate/sweep/callbacks.py; how long it is kept).
VOLATILE_ENV = {"PWD", "OLDPWD", "SHLVL", "_", "ABLATE_SWEEP_RUN_ID", "ABLATE_KEEP_WORKER_S"}


# ---- the parent side --------------------------------------------------------------------

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

    def _start(self):
        """A child for the next spec: the kept one of this key where one is idle, else a new one."""
        # One anonymous file takes all the child's output; each job reads its own slice.
        self.log = tempfile.TemporaryFile()
        env = {**os.environ, **({"CUDA_VISIBLE_DEVICES": self.gpu.pin} if self.gpu else {})}
        self.key = child_key(self.command, env)
        self.sent, self.log_at, self.used, self.kept, self._buffer = [], 0, False, False, b""
        if self._attach():
            return
        # Own session: on timeout the whole group is killed, whatever it started.
        self.proc = subprocess.Popen(self.command, cwd=ROOT, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                     stderr=self.log, start_new_session=True, env=env)
        self.pid = self.proc.pid

    def _attach(self):
        """Whether a kept child of this key took this process's jobs: it gets the log to write
        to and checks that nothing it loaded has changed since (a stale one says so and ends)."""
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        try:
            sock.connect(_address(self.key))
            pid, uid, _ = struct.unpack("3i", sock.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED,
                                                               struct.calcsize("3i")))
            if uid != os.getuid():  # another user's process took the name: not ours to use
                raise ConnectionError(f"the socket's owner is uid {uid}")
            sock.settimeout(10)
            socket.send_fds(sock, [b'{"attach": true}\n'], [self.log.fileno()])
            reply = b""
            while not reply.endswith(b"\n"):
                chunk = sock.recv(4096)
                if not chunk:
                    raise ConnectionError("closed")
                reply += chunk
            reply = json.loads(reply)
        except (OSError, ValueError):  # none kept, one busy with another sweep, or it just ended
            sock.close()
            return False
        if not reply.get("ready"):
            sock.close()  # stale: it ends by itself
            return False
        sock.settimeout(None)
        self.sock, self.pid, self.proc = sock, pid, None
        self.cuda = tuple(reply["cuda"]) if reply.get("cuda") else None
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
        if not self.alive() or not self.sent:
            return
        fd = self._fds()[0]
        while select.select([fd], [], [], 0)[0]:
            try:
                chunk = os.read(fd, 1 << 16)
            except (ConnectionError, BlockingIOError):
                return
            if not chunk:
                return
            self._buffer += chunk

    def _line(self, deadline):
        """The child's next answer line by the deadline: the bytes, b"" at EOF (it died), None
        on timeout. Two answers may arrive in one read: the rest waits for the next call."""
        fd = self._fds()[0]
        while b"\n" not in self._buffer:
            left = deadline - time.monotonic()
            if left <= 0 or not select.select([fd], [], [], left)[0]:
                return None
            try:
                chunk = os.read(fd, 1 << 16)
            except ConnectionError:
                chunk = b""
            if not chunk:
                return b""
            self._buffer += chunk
        line, _, self._buffer = self._buffer.partition(b"\n")
        return line

    def run(self, spec, timeout_s, then=None):
        """The job's result dict. A timeout or a crash ends the child; the next job starts a
        fresh one. `then`: the spec the next job is expected to bring, sent now behind this
        one; a run whose spec is not the one sent ahead first waits for that answer and
        drops it (correct, only slower)."""
        if not self.alive():
            self.stop()
            self._start()
        while self.sent and self.sent[0] != spec:
            self._answer(timeout_s)  # not this job's: dropped (a timeout or crash ends the child)
        if not self.alive():
            self._start()
        if not self.sent:
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
            code = self.stop(grace=0 if line is None else 10)  # a crashed child exits by itself
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


def child_key(command, env) -> str:
    """What a child is, as a name: this user, the project, the python, the command and the
    environment it starts with (VOLATILE_ENV aside). A kept child serves only a sweep that
    would start the very same one; what it loaded since is checked when one attaches."""
    text = json.dumps([str(ROOT), sys.executable, list(command),
                       sorted((k, v) for k, v in env.items() if k not in VOLATILE_ENV)])
    return f"{os.getuid()}-{hashlib.sha256(text.encode()).hexdigest()[:32]}"


def _address(key):
    """A kept child's socket: Linux's abstract namespace (no file to leave behind)."""
    return f"\0ablate-gpu-worker-{key}"


_worker = None  # the child of this process's jobs (Hydra's basic launcher runs a sweep in one process;
                # a parallel launcher runs several such processes, each with its child)
_plan = []  # the specs this process's next jobs will bring, in order (plan_ahead)
_held = None  # (ExitStack, Gpu): the GPU claimed while the child has a spec sent ahead


def plan_ahead(specs):
    """The specs the sweep's next jobs will bring to run_worker, in job order (the sweep's
    callback works them out once the variants are built: ablate/pipeline.py, timed_wire).
    Each job then sends the next one's spec behind its own, so that the GPU is never idle
    while the parent records a job and composes the next (~0.2-0.3 s a job on the H100's
    host: docs/benchmarks.md, "Sweep speed"). Only for jobs that run in this process one
    after another (Hydra's basic launcher), and never with counters (ncu would then profile
    one job while the child times the next). `plan_ahead([])` ends it."""
    global _plan
    _plan = list(specs)


def send_ahead(spec) -> bool:
    """Hand `spec` to this process's child now, behind those sent already, where the child is
    started and its GPU is free to claim at once (the claim is then held, as for any spec in
    flight, until the jobs have read their answers): the sweep's callback sends its jobs as
    soon as each is worked out and found built, so that the GPU times them while the
    callback composes the rest (~2-3 s on the H100's host for 21 jobs: docs/benchmarks.md,
    "Sweep speed"), reading the answers given meanwhile into the buffer (drain).
    Whether it was sent (False: the job sends it when it runs, as before)."""
    from ablate.gpu import gpus

    global _held
    if _worker is None or not _worker.alive() or _worker.gpu is None:
        return False
    if _held is None:
        fd = gpus.try_lock(_worker.gpu)
        if fd is None:  # another job times on it: this sweep's jobs claim one as they run
            return False
        stack = contextlib.ExitStack()
        stack.callback(os.close, fd)
        _held = (stack, _worker.gpu)
    _worker._send(spec)
    return True


def drain():
    """Read the answers this process's child has given so far (Worker.drain): for a caller
    that is busy between sending specs ahead and the jobs that read them."""
    if _worker is not None:
        _worker.drain()


def _next_planned(spec):
    """The spec planned after `spec` (None: none, or `spec` is not in the plan); the plan
    is used up to it."""
    global _plan
    if spec not in _plan:
        return None
    _plan = _plan[_plan.index(spec) + 1:]
    return _plan[0] if _plan else None


def run_worker(spec, timeout_s):
    """Run the GPU half of a job in this process's child, started on first use, on a GPU that
    this job holds alone while it runs (gpus.claim: the child's own GPU when it is free; on
    another, the child is replaced by one pinned to it). While the child works on a spec
    sent ahead (plan_ahead), the GPU stays claimed, so no other job times on it meanwhile."""
    from ablate.gpu import gpus

    global _worker, _held
    if _worker is None:
        _worker = Worker()
        atexit.register(stop_worker)
    if _held is None:
        stack = contextlib.ExitStack()
        _held = (stack, stack.enter_context(gpus.claim(prefer=_worker.gpu)))
    gpu = _held[1]
    try:
        if gpu != _worker.gpu:
            _worker.stop(grace=10)
            _worker.gpu = gpu
        out = _worker.run(spec, timeout_s, then=_next_planned(spec))
    finally:
        if not _worker.sent:
            _release()
    if gpu is not None:  # the child's own reading of the UUID stands; nvidia-smi's where it has none
        out.params["gpu_index"] = gpu.index
        if gpu.uuid and out.params.get("gpu_uuid", "unknown") == "unknown":
            out.params["gpu_uuid"] = gpu.uuid
    return out


def _release():
    global _held
    if _held is not None:
        _held[0].close()
        _held = None


def prestart_worker():
    """Start this process's child now, on the first GPU of this host, so that its python,
    torch and CUDA context start while the sweep still composes its jobs and builds (the
    first job waited ~10 s for them on the H100: docs/benchmarks.md, "Sweep speed"). The
    first job's `gpus.claim` prefers that GPU and keeps the child; where another job holds
    it, the child is replaced as before. Nothing is started where no GPU is listed."""
    from ablate.gpu import gpus

    global _worker
    if _worker is not None and _worker.alive():
        return
    found = gpus.visible()
    if not found:
        return
    if _worker is None:
        _worker = Worker()
        atexit.register(stop_worker)
    _worker.gpu = found[0]
    _worker._start()


def stop_worker(grace=0, keep_s=0):
    """End the child (at the end of a sweep, and at exit): every answer wanted has been read,
    so by default its group is killed at once rather than waited for while python, torch and
    the CUDA context tear down (the sweep's last line to its exit: 2.0-2.6 s waited for, 1.3-1.8 s
    after, on the H100: docs/benchmarks.md, "Sweep speed"); `grace` seconds to exit on EOF first
    where asked. `keep_s` > 0 (the config's keep_worker_s): an idle child that served jobs is
    kept instead for the next sweep to attach to (Worker.stop). The plan ends, and the GPU
    held for it is let go."""
    plan_ahead([])
    if _worker is not None:
        _worker.stop(grace=grace, keep_s=keep_s)
        if _worker.kept:
            log.info("the GPU worker is kept for %g s for the next run (keep_worker_s=0: ended with the run)",
                     keep_s)
    _release()


def cuda_seen():
    """(available, why) of CUDA as this process's kept child found it (None: no kept child),
    so that the parent need not import torch (~2.5 s on the H100's host) to ask."""
    return _worker.cuda if _worker is not None and _worker.sock is not None else None


# ---- the child side ---------------------------------------------------------------------

def _stat_metrics(prefix, samples, spec, shape):
    """Median, p10, p90 (us per launch), and the rates they mean: TFLOP/s when the kernel
    does floating-point work, GB/s of the fewest bytes it must move."""
    from ablate.gpu.stats import summary

    s = summary(samples, prefix)
    out = {f"{prefix}_us": s["median"], f"{prefix}_us_p10": s["p10"], f"{prefix}_us_p90": s["p90"],
           f"{prefix}_gbps": spec.bytes_moved(shape) / s["median"] / 1e3}
    if spec.flops(shape):
        out[f"{prefix}_tflops"] = spec.flops(shape) / s["median"] / 1e6
    return out


def _state_record(when, state):
    """GPU readings as flat metrics and params."""
    if not state.get("available"):
        return {}, {f"gpu_state_{when}": f"unavailable: {state.get('error')}"}
    metrics = {f"{key}_{when}": state[key] for key in
               ("sm_clock_mhz", "sm_clock_max_mhz", "mem_clock_mhz", "temperature_c", "power_w")
               if state.get(key) is not None}
    reasons = state.get("throttle_reasons")
    params = {f"throttle_{when}": "unknown" if reasons is None else ",".join(reasons) or "none"}
    return metrics, params


@functools.cache
def _kernel(plugin, path):
    """One handle per library for the child's life: every job loads the base again, and a
    library's name is the hash of what went into it."""
    from ablate.build.library import load

    _note_loaded(path)  # a kept child serves the next sweep only while it is the same file
    return load(path, plugin.spec)


def _replicates(kspec, base, variant, shape, bench, spec, n_sets, device):
    """Time base, variant (launched spec["launches"] times: calibrations) and the peers in
    replicates until the slowdown is precise enough (timing.replicates). Every replicate
    gets input sets of its own, allocated while the earlier ones stay allocated, so that
    they lie elsewhere in memory; when the next would leave less than a quarter of the GPU's
    memory free, the oldest are released first, and `reused` says so.

    Returns {"replicates": one {candidate: samples} per replicate, "estimate": the final
    stats.slowdown, "stop_reason", "seconds", "launches": per sample, of the last replicate,
    "skipped": {peer: why}, "reused": bool}."""
    import numpy as np
    import torch

    from ablate.gpu import timing
    from ablate.gpu.stats import slowdown

    rng = np.random.default_rng(bench["seed"])
    held, skipped, launches, reused = [], {}, {}, False
    steps = []  # per replicate, (base, variant): the step of their samples (us per launch)
    need = n_sets * kspec.bytes_moved(shape)

    def take(i):
        nonlocal reused
        while held:
            free, total = torch.cuda.mem_get_info(device)
            if free - need >= total / 4:
                break
            held.pop(0)
            torch.cuda.empty_cache()
            reused = True
        sets = timing.make_inputs(kspec, shape, n_sets, bench["seed"] + 1 + i, device)
        held.append(sets)
        candidates, why, optional = timing.candidates(
            kspec, sets, shape, {"base": (base, 1), "variant": (variant, spec.get("launches", 1))},
            [p for p in spec["peers"] if p not in skipped])
        skipped.update(why)
        order = rng.permutation(list(candidates))
        samples, counts, dropped = timing.measure({n: candidates[n] for n in order}, n_sets, bench,
                                                  optional=optional)
        skipped.update(dropped)
        launches.update(counts)
        steps.append(tuple(timing.EVENT_RESOLUTION_US / counts[n] for n in ("base", "variant")))
        return samples

    def estimate(reps):
        return slowdown([r["base"] for r in reps], [r["variant"] for r in reps], bench["min_effect"],
                        resolution=steps[:len(reps)])

    reps, reason, seconds = timing.replicates(take, bench, estimate)
    held.clear()
    torch.cuda.empty_cache()
    return {"replicates": reps, "estimate": estimate(reps), "stop_reason": reason, "seconds": seconds,
            "launches": launches, "skipped": skipped, "reused": reused}


def gpu_job(spec):
    """Check base and variant, then time base, variant and the kernel's peers side by side."""
    import numpy as np
    import torch

    from ablate.gpu import gpu_state, peaks, timing
    from ablate.gpu.check import check
    from ablate.job.job import from_wire

    if not torch.cuda.is_available():
        raise RuntimeError("no CUDA device visible to the GPU worker")
    plugin, spec = from_wire(spec)
    peaks.use_dir(spec.get("peaks_dir"))  # the run's own, beside its build.dir (job.py)
    kspec = plugin.spec
    shape, bench = spec["shape"], spec["bench"]
    device = torch.device("cuda", torch.cuda.current_device())
    props = torch.cuda.get_device_properties(device)
    uuid = str(getattr(props, "uuid", "") or "") or None
    before = gpu_state.read(uuid, device.index)
    base, variant = (_kernel(plugin, spec[k]) for k in ("base_so", "variant_so"))
    params = {"gpu": props.name, "gpu_uuid": _uuid_text(uuid), "torch": torch.__version__, "cuda": torch.version.cuda,
              "driver": before.get("driver", "unavailable"), "bound": kspec.BOUND,
              "work": kspec.WORK, "inouts": ",".join(kspec.INOUTS) or "none"}
    if spec.get("sm_fraction"):  # half_sms: the variant on a green context of part of the SMs
        from ablate.gpu import green

        try:
            variant, sms = green.on_green_stream(variant, device.index, float(spec["sm_fraction"]))
        except green.GreenContextError as e:
            return Result("not_applicable", params, error=f"green contexts are unavailable on this machine: {e}")
        params.update({k: str(v) for k, v in sms.items()})
    artifacts = {}

    # The gate: both must be right before either is timed (the base too: a slowdown against
    # a wrong base means nothing).
    tolerance = bench.get("tolerance")
    checks = {who: check(k, shape, tolerance, seed=bench["seed"])
              for who, k in (("base", base), ("variant", variant))}
    metrics = {"rel_err": checks["variant"]["rel_err"], "base_rel_err": checks["base"]["rel_err"],
               "tolerance": kspec.tolerance(shape) if tolerance is None else tolerance}
    failed = [f"{who} failed the correctness gate: {c['error']}" for who, c in checks.items() if not c["ok"]]
    if failed:
        return Result("incorrect", params, metrics, artifacts, "; ".join(failed))

    n_sets = timing.input_set_count(bench["l2"], props.L2_cache_size, kspec.bytes_moved(shape))
    timed = _replicates(kspec, base, variant, shape, bench, spec, n_sets, device)
    reps = timed["replicates"]
    after = gpu_state.read(uuid, device.index)

    pooled = {name: np.concatenate([r[name] for r in reps if name in r]) for name in reps[0]}
    restores = pooled.pop(timing.RESTORE, None)
    if restores is not None:  # what each launch's inout restore adds to base and variant alike
        metrics[f"{timing.RESTORE}_us"] = float(np.median(restores))
    for name, times in pooled.items():
        metrics.update(_stat_metrics(name, times, kspec, shape))
    # peer_us: the first peer of the job's list that ran, the reference of record.
    ran = [p for p in spec["peers"] if p in pooled]
    if ran:
        metrics.update(_stat_metrics("peer", pooled[ran[0]], kspec, shape))
        params["peer"] = ran[0]
    # The slowdown and its interval over the replicates (stats.py), and what ended them.
    estimate = dict(timed["estimate"])
    estimate["slowdown_half_width"] = estimate.pop("half_width")
    metrics.update(estimate, timing_s=timed["seconds"])
    params.update({"stop_reason": timed["stop_reason"], "replicate_inputs": "reused" if timed["reused"] else "fresh"})
    # The fraction of the GPU's measured ceiling of the kernel's kind of work (peaks.py).
    name, value, unit = peaks.peak(kspec.WORK, device.index)
    rate = "gbps" if name == "peak_gbps" else "tflops"
    if bench.get("profile"):  # the roofline (ablate/report/roofline.py) stands under two ceilings
        params["roof"] = peaks.roof_of(kspec.WORK)
        metrics.update(peak_gbps=peaks.ceiling("memory", device.index),
                       peak_tflops=peaks.ceiling(params["roof"], device.index))
    if value:  # None: a kind of work this GPU lacks (FP8 before compute capability 8.9)
        metrics[name] = value
        for who in ("base", "variant"):
            if f"{who}_{rate}" in metrics:
                metrics[f"{who}_peak_fraction"] = metrics[f"{who}_{rate}"] / value
    for when, state in (("before", before), ("after", after)):
        m, p = _state_record(when, state)
        metrics.update(m)
        params.update(p)
    params.update({"input_sets": n_sets, **{f"launches_{n}": c for n, c in timed["launches"].items()}})
    params.update({f"peer_{p}_skipped": why[:500] for p, why in timed["skipped"].items()})
    artifacts["samples.json"] = json.dumps({"replicates": [{n: np.round(t, 4).tolist() for n, t in r.items()}
                                                           for r in reps]})
    artifacts["gpu_state.json"] = json.dumps({"before": before, "after": after}, indent=1)
    return Result("ok", params, metrics, artifacts)


def _uuid_text(uuid):
    """torch's device UUID as nvidia-smi writes it (GPU-xxxxxxxx-...)."""
    if not uuid:
        return "unknown"
    return uuid if uuid.startswith("GPU-") else f"GPU-{uuid}"


def checked_gpu_job(spec):
    """gpu_job, then one synchronize: an error a kernel left pending (and any sticky error a
    caught exception hid) is raised in this job, which is then crashed, never in the next."""
    import torch

    out = gpu_job(spec)
    torch.cuda.synchronize()
    return out


def _answer(handler, spec):
    try:
        return handler(spec)
    except Exception as e:  # a CUDA error, or anything else: crashed, and this child ends
        traceback.print_exc()
        text = str(e).strip()
        return Result("crashed", error=f"{type(e).__name__}: {text.splitlines()[0] if text else ''}".strip())


def _log_end():
    """{"log_end": where this job's output ends in the log}, the parent's slice of it (when
    stderr is a file: the parent's; nothing otherwise)."""
    st = os.fstat(2)
    return {"log_end": st.st_size} if stat.S_ISREG(st.st_mode) else {}


def serve(handler, warm=None):
    """Answer one JSON spec per line of stdin with one JSON result per line, until EOF or a
    crash. Answers go to a private copy of stdout; fd 1 then points at stderr, so nothing
    else (a print, torch, the CUDA runtime) can write into the protocol. `warm` runs then,
    before the first spec is read. A line {"keep_s": S, "key": K} instead of a spec keeps the
    idle child for the next sweep (`_kept`): it then serves whoever attaches within S
    seconds, in turn, the same way."""
    answers = os.fdopen(os.dup(1), "wb")  # not inheritable: grandchildren cannot write to it
    os.dup2(2, 1)
    sys.stdout = sys.stderr
    # Killed with the parent even mid-job (an idle child sees EOF anyway). Linux ties this
    # to the thread that started the child: Hydra's basic launcher runs jobs on the main one.
    if sys.platform.startswith("linux"):
        ctypes.CDLL(None).prctl(PR_SET_PDEATHSIG, signal.SIGKILL)
    if warm is not None:
        try:
            warm()
        except Exception:  # the first job meets the same failure and reports it as its own
            traceback.print_exc()
    _note_loaded()
    end = _serve_lines(handler, sys.stdin.buffer, answers)
    while isinstance(end, dict):  # kept: the next sweep's connection, if one comes in time
        conn = _kept(end, answers)
        if conn is None:
            return 0
        lines, answers = conn.makefile("rb"), conn.makefile("wb")
        end = _serve_lines(handler, lines, answers, conn)
        lines.close()
        conn.close()  # the connection ends with `answers`, after the keep line's reply
    return 1 if end == "crashed" else 0


def _serve_lines(handler, lines, answers, conn=None):
    """Answer each spec line: "eof" at the end, "crashed" after a crash (the CUDA context may
    be poisoned: nothing more is served), the keep line's dict where one comes. On a kept
    child's connection (`conn`), a sweep that dies while a job runs ends the child too (its
    first parent's death does, through PR_SET_PDEATHSIG)."""
    busy, done = threading.Event(), threading.Event()
    if conn is not None:
        threading.Thread(target=_watch, args=(conn.fileno(), busy, done), daemon=True).start()
    try:
        for line in lines:
            spec = json.loads(line)
            if "keep_s" in spec and "key" in spec:
                return spec
            busy.set()
            out = _answer(handler, spec)
            sys.stderr.flush()  # the job's log is whole before the parent reads it
            out = out.to_dict() if isinstance(out, Result) else out  # a test's handler answers a dict
            busy.clear()
            answers.write(json.dumps({**out, **_log_end()}).encode() + b"\n")
            answers.flush()
            if out["status"] == "crashed":
                return "crashed"
        return "eof"
    except (BrokenPipeError, ConnectionError):
        return "eof"
    finally:
        done.set()


def _watch(fd, busy, done):
    """Kill this child's group when the attached sweep hangs up while a job runs."""
    poll = select.poll()
    poll.register(fd, select.POLLRDHUP)
    poll.poll()
    while not done.wait(0.1):
        if busy.is_set():
            os.killpg(os.getpgrp(), signal.SIGKILL)


_loaded = {}  # path: (inode, size, mtime) of each module and library this child loaded


def _stat(path):
    try:
        st = os.stat(path)
    except OSError:
        return None
    return st.st_ino, st.st_size, st.st_mtime_ns


def _note_loaded(*paths):
    """Record the files this child runs (every imported module's, and `paths`) as they are
    now, for a kept child to check when a sweep attaches."""
    files = [getattr(m, "__file__", None) for m in list(sys.modules.values())] + [str(p) for p in paths]
    for f in files:
        if f and f not in _loaded:
            _loaded[f] = _stat(f)


def _changed():
    """The first module or library this child loaded whose file changed since (an edit to
    ablate, a plugin's python, a library rebuilt in place, another torch), else None."""
    return next((f for f, st in _loaded.items() if _stat(f) != st), None)


def _kept(keep, answers):
    """Wait, idle, for the next sweep to attach (`keep`: {"keep_s", "key"}): the connection,
    its log as this child's stdout and stderr; None when none came within keep_s seconds, a
    child of this key is kept already, or something this child loaded changed."""
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        listener.bind(_address(keep["key"]))
    except OSError:  # another child of this key is kept: this one ends
        return None
    listener.listen(4)
    if sys.platform.startswith("linux"):
        ctypes.CDLL(None).prctl(PR_SET_PDEATHSIG, 0)  # outlives the sweep that kept it
    null = os.open(os.devnull, os.O_WRONLY)
    os.dup2(null, 1)
    os.dup2(null, 2)
    os.close(null)
    _note_loaded()
    with contextlib.suppress(OSError):
        answers.write(b'{"kept": true}\n')
        answers.flush()
        answers.close()
    deadline = time.monotonic() + float(keep["keep_s"])
    with listener:
        while True:
            listener.settimeout(max(deadline - time.monotonic(), 0.001))
            try:
                conn, _ = listener.accept()
            except (TimeoutError, socket.timeout):
                return None
            uid = struct.unpack("3i", conn.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED,
                                                      struct.calcsize("3i")))[1]
            try:
                conn.settimeout(10)
                _, fds, _, _ = socket.recv_fds(conn, 4096, 1)
            except OSError:
                fds = []
            if uid != os.getuid() or len(fds) != 1:
                conn.close()
                for fd in fds:
                    os.close(fd)
                continue
            changed = _changed()
            if changed:
                with contextlib.suppress(OSError):
                    conn.sendall(json.dumps({"stale": f"{changed} changed"}).encode() + b"\n")
                conn.close()
                os.close(fds[0])
                return None
            os.dup2(fds[0], 1)
            os.dup2(fds[0], 2)
            os.close(fds[0])
            conn.settimeout(None)
            conn.sendall(json.dumps({"ready": True, "cuda": _cuda}).encode() + b"\n")
            return conn  # the listener closes: another sweep meanwhile starts a child of its own


_cuda = None  # [available, why] as _warm found it


def _warm():
    """What every job of the child needs, started before the first spec arrives (the parent
    starts the child early: prestart_worker): torch, a CUDA context on the child's GPU, and
    the modules of the gate and the timing."""
    import torch

    global _cuda
    if torch.cuda.is_available():
        torch.empty(1, device="cuda")
    _cuda = [True, None] if torch.cuda.is_available() else [False, "no CUDA device is visible"]
    from scipy import stats  # noqa: F401 (the interval's t quantile, ablate/gpu/stats.py: for its import time)

    from ablate.gpu import check, timing  # noqa: F401 (imported for their import time)


def kept_keys():
    """The keys of this user's kept children waiting now (Linux lists abstract sockets in
    /proc/net/unix); a child serving a run does not listen, so it is not among them."""
    named = "@" + _address("")[1:]  # how the table writes the abstract namespace's names
    try:
        lines = Path("/proc/net/unix").read_text().splitlines()[1:]
    except OSError:
        return []
    # Flags 00010000: listening (a child serving a run has its connection under the same name).
    names = {f[7] for f in map(str.split, lines) if len(f) == 8 and f[3] == "00010000"}
    return sorted(n[len(named):] for n in names if n.startswith(f"{named}{os.getuid()}-"))


def stop_kept(argv=(), keys=None):
    """`ablate stop-workers`: end this user's kept GPU workers now (each waits keep_worker_s
    idle seconds otherwise, holding ~0.8 GB of its GPU's memory); one serving a run is left to
    it. `keys`: only those (tests), of those waiting."""
    import argparse

    argparse.ArgumentParser(prog="ablate stop-workers", description=stop_kept.__doc__.split("\n\n")[0]).parse_args(argv)
    ended = []
    for key in (k for k in kept_keys() if keys is None or k in keys):
        w = Worker()
        w.key, w.log = key, tempfile.TemporaryFile()
        if w._attach():
            ended.append(w.pid)
            w.stop()
    print(f"ended {len(ended)} kept GPU worker{'s' if len(ended) != 1 else ''}"
          f"{': pid ' + ', '.join(map(str, ended)) if ended else ''}")
    return 0


def main(argv):
    if not argv or argv[0] != "--serve" or len(argv) > 2:
        sys.exit("usage: python -m ablate.gpu.worker --serve [MODULE:FUNCTION]")
    handler = checked_gpu_job
    if len(argv) == 2:
        module, _, name = argv[1].partition(":")
        handler = getattr(importlib.import_module(module), name)
    return serve(handler, warm=_warm if handler is checked_gpu_job else None)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
