"""The GPU child's loop: one long-lived process per GPU that answers the jobs' specs.

A variant that faults (an illegal or misaligned address leaves the CUDA context unusable)
or hangs must not take the sweep down with it, so the GPU work runs in a child. Starting one
per job costs python, torch, a CUDA context and cuDNN (~5-7 s) every time, so one child
serves the jobs of its GPU in turn:

    python -m ablate.gpu.worker --serve [MODULE:FUNCTION]

warms up (torch, the CUDA context: `_warm`), says {"hello": pid} once it is ready (a child
that dies before it could not start: its GPU is dropped, ablate/gpu/pool.py), then reads one
JSON spec per line on stdin and answers one JSON result per line, in order, on a private
copy of its stdout (everything else it prints goes to stderr, a file the parent slices per
job into the job's `worker.log`: each answer says where its job's output ends, `log_end`).
The job itself is ablate/gpu/measure.py's; MODULE:FUNCTION replaces it in tests. After a
crash (the context may be poisoned) it exits; on EOF it ends; a line {"keep_s", "key"}
keeps it for the next sweep (ablate/gpu/kept.py).
"""
import ctypes
import importlib
import json
import os
import select
import signal
import stat
import sys
import threading
import traceback

from ablate.gpu import kept, measure
from ablate.job.result import Result


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
    idle child for the next sweep (kept.wait_for_sweep): it then serves whoever attaches within S
    seconds, in turn, the same way."""
    answers = os.fdopen(os.dup(1), "wb")  # not inheritable: grandchildren cannot write to it
    os.dup2(2, 1)
    sys.stdout = sys.stderr
    # Killed with the parent even mid-job (an idle child sees EOF anyway). Linux ties this
    # to the thread that started the child: Hydra's basic launcher runs jobs on the main one.
    if sys.platform.startswith("linux"):
        ctypes.CDLL(None).prctl(kept.PR_SET_PDEATHSIG, signal.SIGKILL)
    if warm is not None:
        try:
            warm()
        except Exception:  # the first job meets the same failure and reports it as its own
            traceback.print_exc()
    kept.note_loaded()
    answers.write(json.dumps({"hello": os.getpid()}).encode() + b"\n")  # ready: this child started
    answers.flush()
    end = _serve_lines(handler, sys.stdin.buffer, answers)
    while isinstance(end, dict):  # kept: the next sweep's connection, if one comes in time
        conn = kept.wait_for_sweep(end, answers, _cuda)
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


def main(argv):
    if not argv or argv[0] != "--serve" or len(argv) > 2:
        sys.exit("usage: python -m ablate.gpu.worker --serve [MODULE:FUNCTION]")
    handler = measure.checked_gpu_job
    if len(argv) == 2:
        module, _, name = argv[1].partition(":")
        handler = getattr(importlib.import_module(module), name)
    return serve(handler, warm=_warm if handler is measure.checked_gpu_job else None)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
