"""Every GPU of this host, one warm child each: the parent's side of a sweep's GPU work.

A sweep runs its jobs one after another in the launching process (Hydra's basic launcher),
but their GPU halves need not wait for each other: each job's spec is sent ahead to a GPU
child as soon as it is known (the sweep's callback: send_ahead, then plan_ahead once the
variants are built), and each job only collects its answer (run_worker). The pool keeps one
child per GPU it uses (ablate/gpu/handle.py, each pinned with CUDA_VISIBLE_DEVICES, each
kept between sweeps under its own name: ablate/gpu/kept.py) and hands the next spec to
whichever child has room, while the parent waits for a job's answer or reads what was
answered meanwhile (drain). A lone child takes up to AHEAD_ONE specs at once (it never waits
for the parent between jobs: the warm README sweep's 21 jobs in ~21 s on the H100); with
several children each takes as many while the queue is long, and AHEAD_MANY once it is
short, so that at the sweep's end a slow job holds back no more than that on its GPU while
the others take the rest.

Which GPUs: every one this process may use (gpus.visible: CUDA_VISIBLE_DEVICES narrows the
set), each claimed for the sweep (gpus.py's lock file: another sweep on this host waits for
it, or uses the GPUs this one left free). A single run (not a sweep) starts one child only.

Faults stay on their GPU: a child that crashes or times out is restarted on its GPU and the
specs it held behind the failed one go back to the queue; the other children go on. A child
that ends before it says it is ready (its "hello": ablate/gpu/child.py) could not start on
its GPU: that GPU is dropped with one line and its specs go to the others (with no other
GPU left, its jobs are crashed with the child's last output, as with one GPU).

Honest across GPUs: the control (the base timed against itself, pathology `none`) is timed
on every GPU of the sweep: the job's answer carries each GPU's base time (`base_us_gpu<i>`)
and their spread (`gpu_spread`: the slowest over the fastest, less 1), which `ablate rank`
reports and uses where results from different GPUs are compared (ablate/report/rank.py).

Each answer records its GPU: the params `gpu_index`, `gpu_uuid` and `gpu` (its name).
"""
import atexit
import contextlib
import json
import logging
import os
import select
import subprocess
import tempfile
import time

from ablate.gpu.handle import Worker

log = logging.getLogger("ablate")
AHEAD_ONE = 8  # specs in flight on a lone child: a few jobs' specs, far below a pipe's 64 KiB
AHEAD_MANY = 2  # per child when there are several: one timed, one waiting behind it
DEFAULT_TIMEOUT_S = 600.0  # a spec sent ahead without bench.timeout_s (tests' stand-ins)


_keys = {}  # id(spec): (spec, its key), for the specs the pool holds (kept alive: an id is not reused)


def spec_key(spec):
    """What a spec is, as text: a job's spec and the same spec composed again are one."""
    held = _keys.get(id(spec))
    if held is not None and held[0] is spec:
        return held[1]
    key = json.dumps(spec, sort_keys=True, default=str)
    if len(_keys) < 100_000:
        _keys[id(spec)] = (spec, key)
    return key


def is_control(spec):
    """The base timed against itself (pathology `none`), launched as the base is."""
    return (isinstance(spec.get("base_so"), str) and spec.get("base_so") == spec.get("variant_so")
            and spec.get("launches", 1) == 1 and not spec.get("sm_fraction"))


class Pool:
    """The children of this process's sweep, one per GPU; `handler` (MODULE:FUNCTION) replaces
    the GPU job in tests."""

    def __init__(self, handler=None):
        self.handler = handler
        self.workers = []  # one Worker per GPU in use, in gpus.visible's order
        self.claims = contextlib.ExitStack()  # the GPU locks, held until stop (or the GPU is dropped)
        self.locks = {}  # Gpu: the descriptor of its lock, taken without waiting
        self.dropped = set()  # the GPUs whose child could not start: not tried again in this sweep
        self.pending = []  # (spec, worker it must go to or None), not yet sent, in job order
        self.done = {}  # spec_key: [(worker, Result)] answered, waiting for their jobs
        self.copies = {}  # id(copy): (the control's key, copy) of a control's copies to the other GPUs
        self.extras = {}  # the control's key: [(worker, Result)] of its copies
        self.copied = set()  # the keys of the controls whose copies were queued
        self.timeouts = {}  # spec_key: timeout_s, as its job gave it
        self.said_taken = False

    # ---- the children --------------------------------------------------------------------

    def ensure(self, every=False, wait=False):
        """Children on the GPUs of this host: on every free one (`every`), else at least one.
        A GPU another sweep holds is left to it; where all are held, `wait` waits for one,
        else nothing is started. No GPU known (no nvidia-smi): one child that sees what this
        process sees, started when its first spec comes."""
        from ablate.gpu import gpus

        found = gpus.visible()
        if not found:
            if not self.workers:
                self.workers.append(Worker(self.handler))
            return
        have = {w.gpu for w in self.workers}
        for gpu in found:
            if gpu in have or gpu in self.dropped or (self.workers and not every):
                continue
            fd = gpus.try_lock(gpu)
            if fd is None:
                if not self.said_taken:
                    log.info("GPU %s is timing another sweep's jobs: this sweep leaves it", gpu.index)
                    self.said_taken = True
                continue
            self.locks[gpu] = fd
            self._add(gpu)
        if not self.workers and wait:
            self._add(self.claims.enter_context(gpus.claim(gpus=found)))

    def _add(self, gpu):
        w = Worker(self.handler)
        w.gpu = gpu
        try:
            w._start()
        except OSError as e:
            self._drop(w, f"{type(e).__name__}: {e}")
            return
        self.workers.append(w)

    def _drop(self, w, why):
        """The GPU of `w` is left out of the sweep: one line; its specs go to the others."""
        log.warning("GPU %s (%s): its GPU worker could not start (%s); dropped, its jobs go to the other GPUs",
                    w.gpu.index if w.gpu else "?", (w.gpu.name or w.gpu.uuid) if w.gpu else "unpinned", why)
        if w in self.workers:
            self.workers.remove(w)
        self._requeue(w, list(w.sent))
        w.stop()
        self.dropped.add(w.gpu)
        if w.gpu in self.locks:  # let it go: another sweep may have better luck with it
            os.close(self.locks.pop(w.gpu))

    def _requeue(self, w, specs):
        """Specs `w` lost (its child ended) back to the front of the queue: the jobs' specs for
        any child, a control's copy for `w` alone (dropped with `w`), and a control whose copies
        the other GPUs time for `w` too (on another GPU it would be timed twice there, and
        never on w's: a hang ahead of it on two H200s left the control on one GPU)."""
        back = []
        for spec in specs:
            if id(spec) in self.copies:
                if w in self.workers:
                    back.append((spec, w))
                else:
                    key, _ = self.copies.pop(id(spec))
                    self.extras.setdefault(key, [])
            elif w in self.workers and is_control(spec) and spec_key(spec) in self.copied:
                back.append((spec, w))
            else:
                back.append((spec, None))
        self.pending[0:0] = back

    # ---- the queue ------------------------------------------------------------------------

    def submit(self, spec):
        """Queue `spec` behind the others (once: a spec queued, sent or answered already is not
        queued again) and send what the children have room for."""
        if not self._known(spec_key(spec)):
            self.pending.append((spec, None))
        self.pump(0)

    def _known(self, key):
        return (self.done.get(key) or any(spec_key(s) == key for s, pin in self.pending if pin is None)
                or any(spec_key(s) == key for w in self.workers for s in w.sent if id(s) not in self.copies))

    def _depth(self):
        """Specs a child may hold now: AHEAD_ONE while the queue holds more than that for every
        child, so that the children never run dry while the parent is busy elsewhere (MLflow's
        start after the composition: ~3 s on the H100's host, the children's two specs ~2 s);
        AHEAD_MANY once the queue is short, so that the sweep's last jobs spread evenly."""
        if len(self.workers) == 1:
            return AHEAD_ONE
        free = sum(pin is None for _, pin in self.pending)
        return AHEAD_ONE if free > AHEAD_ONE * len(self.workers) else AHEAD_MANY

    def _dispatch(self):
        depth = self._depth()
        i = 0
        while i < len(self.pending):
            spec, pin = self.pending[i]
            room = [w for w in self.workers if (pin is None or w is pin) and len(w.sent) < depth]
            if not room:
                if pin is None:
                    break  # every child is full: the jobs' specs keep their order
                i += 1
                continue
            w = min(room, key=lambda c: (len(c.sent), not c.hello))
            if not w.alive():
                if w.proc is not None and not w.hello and len(self.workers) > 1:  # ended before it was ready
                    self._drop(w, self._last_words(w))
                    continue
                if w.sent:  # it died on a spec in flight: that answer (its crash) first, then a fresh child
                    self._collect(w, eof=True)
                    continue
                w.stop()
                w._start()
            self.pending.pop(i)
            w._send(spec)
            if pin is None and is_control(spec) and len(self.workers) > 1 and spec_key(spec) not in self.copied:
                key = spec_key(spec)
                self.copied.add(key)
                for other in self.workers:
                    if other is not w:
                        copy = dict(spec)
                        self.copies[id(copy)] = (key, copy)
                        self.pending.insert(i, (copy, other))

    def _timeout(self, spec):
        bench = spec.get("bench") if isinstance(spec.get("bench"), dict) else {}
        return float(self.timeouts.get(spec_key(spec)) or bench.get("timeout_s") or DEFAULT_TIMEOUT_S)

    def pump(self, wait):
        """Send what the children have room for, then read what they answered, waiting up to
        `wait` seconds for the first answer (or a deadline); each answer that is whole goes
        to its job, each child that died or ran past its deadline is dealt with."""
        self._dispatch()
        busy = [w for w in self.workers if w.sent]
        if not busy:
            if wait:
                time.sleep(min(wait, 0.05))
            return
        now = time.monotonic()
        due = min(w.began + self._timeout(w.sent[0]) for w in busy)
        ended = set()
        for w in busy:  # what was read already, and what is there now, without waiting
            w.drain()
        if not any(w.has_answer() for w in busy):
            fds = {w._fds()[0]: w for w in busy if w.proc is not None or w.sock is not None}
            left = max(0.0, min(wait, due - now))
            ready = select.select(list(fds), [], [], left)[0] if fds else []
            for fd in ready:
                if not fds[fd]._read():
                    ended.add(fds[fd])
        now = time.monotonic()
        for w in busy:
            if w.has_answer() or w in ended or not w.alive() or now >= w.began + self._timeout(w.sent[0]):
                self._collect(w, eof=w in ended)
        self._dispatch()

    def _collect(self, w, eof=False):
        """The answer of w's first spec (or its timeout, or its crash), to its job; `eof`: its
        child hung up (it ended, or is ending)."""
        spec, behind = w.sent[0], list(w.sent[1:])
        if not w.has_answer() and not w.hello and len(self.workers) > 1:
            w.drain()
            if not w.has_answer() and not w.hello and (eof or not w.alive() or self._ended(w)):
                self._drop(w, self._last_words(w))
                return
        out = w._answer(self._timeout(spec))
        self._deliver(w, spec, out)
        if not w.alive():  # timed out or crashed: the specs behind are lost with it, a fresh child on its GPU
            self._requeue(w, behind)
            w.sent = []
            try:
                w._start()
            except OSError as e:
                self._drop(w, f"{type(e).__name__}: {e}")

    def _ended(self, w):
        """Whether w's child, not yet ready, is past the deadline of its first spec."""
        return time.monotonic() >= w.began + self._timeout(w.sent[0])

    @staticmethod
    def _last_words(w):
        """How a child that never started ended: its exit and the last line it wrote."""
        code = None
        if w.proc is not None:
            with contextlib.suppress(subprocess.TimeoutExpired):
                code = w.proc.wait(timeout=5)  # it hung up: its exit is a moment away
        out = b""
        if w.log is not None:
            size = os.fstat(w.log.fileno()).st_size
            out = os.pread(w.log.fileno(), min(size, 4096), max(size - 4096, 0))
        last = (out.decode(errors="replace").strip().splitlines() or ["no output"])[-1]
        state = "still starting at its first job's deadline" if code is None else f"exit code {code}"
        return f"{state}; last output: {last}"

    def _deliver(self, w, spec, out):
        record_gpu(out, w.gpu)
        copy = self.copies.pop(id(spec), None)
        if copy is not None:
            self.extras.setdefault(copy[0], []).append((w, out))
        else:
            self.done.setdefault(spec_key(spec), []).append((w, out))

    def _copies_out(self, key):
        return any(k == key for k, _ in self.copies.values())

    # ---- the jobs -------------------------------------------------------------------------

    def result(self, spec, timeout_s):
        """The job's Result: its answer, sent ahead or sent now (first in the queue), waited
        for while the other children go on."""
        key = spec_key(spec)
        self.timeouts[key] = timeout_s
        if not self._known(key):
            self.pending.insert(0, (spec, None))
        # Always once, even where the answer is in already: the children that answered while
        # the parent recorded the jobs before get their next specs now, not when a job must
        # wait (the CPU replay of the 84-job scale-out sweep on 2 stand-in GPUs, tools/replay_sweep.py:
        # each idle ~1 s otherwise, right after the answers computed during composition).
        self.pump(0)
        while not self.done.get(key) or self._copies_out(key):
            if not self.workers:  # every GPU dropped: the last one's child could not start
                self.ensure(wait=True)
                if not self.workers:
                    self.workers.append(Worker(self.handler))
            self.pump(1.0)
        w, out = self.done[key].pop(0)
        if not self.done[key]:
            del self.done[key]
        if key in self.extras:
            spread(out, [(w, out)] + self.extras.pop(key))
        return out

    def send_ahead(self, spec):
        if not any(w.alive() and w.gpu is not None for w in self.workers):
            return False
        self.submit(spec)
        return True

    def stop(self, grace=0, keep_s=0):
        """End the children (or keep them: Worker.stop), forget the queue, let the GPUs go."""
        kept = 0
        for w in self.workers:
            w.stop(grace=grace, keep_s=keep_s)
            kept += w.kept
        self.pending, self.done, self.copies, self.extras = [], {}, {}, {}
        self.copied, self.timeouts = set(), {}
        self.workers = []
        _keys.clear()
        for fd in self.locks.values():
            os.close(fd)
        self.locks, self.dropped = {}, set()
        self.claims.close()
        self.said_taken = False
        return kept


def record_gpu(out, gpu):
    """The GPU the job timed on: nvidia-smi's index; its UUID and name where the child could
    not say (the child's own reading stands)."""
    if gpu is None:
        return
    out.params["gpu_index"] = gpu.index
    if gpu.uuid and out.params.get("gpu_uuid", "unknown") == "unknown":
        out.params["gpu_uuid"] = gpu.uuid
    if gpu.name and "gpu" not in out.params:
        out.params["gpu"] = gpu.name


def spread(out, answers):
    """The control's base time on each GPU (`base_us_gpu<index>`) and their spread
    (`gpu_spread`: slowest over fastest, less 1) where at least two GPUs timed it."""
    times = {}
    for w, r in answers:
        if r.status == "ok" and r.metrics.get("base_us") and w.gpu is not None:
            times[w.gpu.index] = float(r.metrics["base_us"])
    if len(times) < 2:
        return
    for index, us in times.items():
        out.metrics[f"base_us_gpu{index}"] = us
    out.metrics["gpu_spread"] = max(times.values()) / min(times.values()) - 1
    out.params["control_gpus"] = ",".join(sorted(times))


# ---- this process's pool: what the sweep's callback and the jobs call ---------------------

_pool = None


def _the_pool():
    global _pool
    if _pool is None:
        _pool = Pool()
        atexit.register(stop_worker)
    return _pool


def plan_ahead(specs):
    """The specs the sweep's next jobs will bring to run_worker, in job order (the sweep's
    callback works them out once the variants are built: ablate/pipeline.py, timed_wire):
    each is queued now (behind those sent ahead already) and goes to a child as soon as one
    has room, so that the GPUs are never idle while the parent records a job and composes
    the next (~0.2-0.3 s a job on the H100's host: docs/benchmarks.md, "Sweep speed"). Never
    with counters (ncu would then profile one job while a child times another). `plan_ahead([])`
    forgets the queue."""
    pool = _the_pool()
    if not specs:
        pool.pending = [(s, pin) for s, pin in pool.pending if pin is not None]
        return
    for spec in specs:
        if not pool._known(spec_key(spec)):
            pool.pending.append((spec, None))
    pool.pump(0)


def send_ahead(spec) -> bool:
    """Queue `spec` for the children now, where at least one is started on a GPU: the sweep's
    callback sends its jobs as soon as each is worked out and found built, so that the GPUs
    time them while the callback composes the rest (~2-3 s on the H100's host for 21 jobs:
    docs/benchmarks.md, "Sweep speed"). Whether it was queued (False: the job sends it when
    it runs, as before)."""
    return _pool is not None and _pool.send_ahead(spec)


def drain():
    """Read the answers the children have given so far and send them what they have room for:
    for a caller that is busy between sending specs ahead and the jobs that read them (a
    child whose answers fill its pipe, 64 KiB, a few answers, would wait for them to be read)."""
    if _pool is not None:
        _pool.pump(0)


def run_worker(spec, timeout_s):
    """The GPU half of a job: its answer from whichever child timed it (a child is started on
    first use, on a GPU this sweep holds)."""
    pool = _the_pool()
    pool.ensure(wait=True)
    return pool.result(spec, timeout_s)


def prestart_worker(every=False):
    """Start the children now, so that their python, torch and CUDA contexts start while the
    sweep still composes its jobs and builds (the first job waited ~10 s for them on the
    H100: docs/benchmarks.md, "Sweep speed"): one on every free GPU of this host (`every`:
    a sweep), else one on the first free one (the command line's guess, before Hydra says
    whether it is a sweep). Nothing is started where no GPU is listed or all are taken."""
    from ablate.gpu import gpus

    if not gpus.visible():
        return
    pool = _the_pool()
    pool.ensure(every=every)


def stop_worker(grace=0, keep_s=0):
    """End the children (at the end of a sweep, and at exit): every answer wanted has been
    read, so by default each group is killed at once rather than waited for while python,
    torch and the CUDA context tear down (the sweep's last line to its exit: 2.0-2.6 s waited
    for, 1.3-1.8 s after, on the H100: docs/benchmarks.md, "Sweep speed"); `grace` seconds to
    exit on EOF first where asked. `keep_s` > 0 (the config's keep_worker_s): each idle child
    that served jobs is kept instead for the next sweep to attach to (Worker.stop). The queue
    is forgotten, and the GPUs are let go."""
    if _pool is None:
        return
    kept = _pool.stop(grace=grace, keep_s=keep_s)
    if kept:
        log.info("%s kept for %g s for the next run (keep_worker_s=0: ended with the run)",
                 "the GPU worker is" if kept == 1 else f"{kept} GPU workers are", keep_s)


def cuda_seen():
    """(available, why) of CUDA as this process's kept child found it (None: no kept child),
    so that the parent need not import torch (~2.5 s on the H100's host) to ask."""
    if _pool is None:
        return None
    return next((w.cuda for w in _pool.workers if w.sock is not None and w.cuda is not None), None)


def stop_kept(argv=(), keys=None):
    """`ablate stop-workers`: end this user's kept GPU workers now (each waits keep_worker_s
    idle seconds otherwise, holding ~0.8 GB of its GPU's memory); one serving a run is left to
    it. `keys`: only those (tests), of those waiting."""
    import argparse

    from ablate.gpu import kept

    argparse.ArgumentParser(prog="ablate stop-workers", description=stop_kept.__doc__.split("\n\n")[0]).parse_args(argv)
    ended = []
    for key in (k for k in kept.kept_keys() if keys is None or k in keys):
        w = Worker()
        w.key, w.log = key, tempfile.TemporaryFile()
        if w._attach():
            ended.append(w.pid)
            w.stop()
    print(f"ended {len(ended)} kept GPU worker{'s' if len(ended) != 1 else ''}"
          f"{': pid ' + ', '.join(map(str, ended)) if ended else ''}")
    return 0
