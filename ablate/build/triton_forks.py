"""The compile processes of a Triton build: one Python process imports torch and Triton once,
then forks one child per variant, `jobs` at once.

A variant's compile (ablate/build/triton_aot.py, compile_variant) used to be a process of its
own: ~5.5 s a variant on the 2-core CPU machine, of which ~2.8 s was importing torch (for the
instances' `meta` tensors), ~0.5 s Triton's and ablate's imports, ~0.3-0.5 s Triton's hash of
its own sources (`triton_key`), and ~0.7 s the compile itself (two instances; cProfile of one
compile of tests/fixtures/plugins/even_axpy). A forked child starts with all of that done.

Each child is still a process of its own, as before: its stdout and stderr go to files of its
own (the variant's log), it has a fresh Triton cache (TRITON_CACHE_DIR: a hit in a shared one
would skip ptxas, whose report is the log), and a crash ends it alone. The parent forks before
anything of CUDA or a plugin is loaded and while it runs a single thread (torch's import starts
none), so a child inherits nothing it could deadlock on.

    python -m ablate.build.triton_forks JOBS REQUEST.json...

writes, per request R, R.out (stdout), R.err (stderr) and R.rc (the child's exit status).
"""
import json
import os
import shutil
import sys
import tempfile
import traceback
from pathlib import Path

from ablate.build import triton_aot


def _warm() -> None:
    """What every compile needs, done once before the children are forked."""
    import torch
    from triton.compiler import ASTSource, make_backend  # noqa: F401
    from triton.runtime.cache import triton_key

    torch.empty(1, device="meta")
    triton_key()  # Triton's hash of its own sources, in every compile's key (lru-cached)


def _child(request: Path, cache: str) -> int:
    """Runs in the forked child: compile the variant of `request`, its output into its files;
    the exit status is what `python -m ablate.build.triton_aot REQUEST` would return."""
    out, err, _ = triton_aot.fork_outputs(request)
    for fd, path in ((1, out), (2, err)):
        f = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
        os.dup2(f, fd)
        os.close(f)
    os.environ["TRITON_CACHE_DIR"] = cache
    try:
        triton_aot.compile_variant(json.loads(request.read_text()))
        code = 0
    except SystemExit as e:  # as Python's own exit would: a message to stderr and 1
        if isinstance(e.code, int) or e.code is None:
            code = e.code or 0
        else:
            print(e.code, file=sys.stderr)
            code = 1
    except BaseException:
        traceback.print_exc()
        code = 1
    sys.stdout.flush()
    sys.stderr.flush()
    return code


def serve(requests: list[Path], jobs: int) -> None:
    """Compile every request in a forked child, `jobs` at once, each child's exit status
    written (R.rc) as it ends."""
    _warm()
    pending, running = list(requests), {}
    while pending or running:
        while pending and len(running) < max(1, jobs):
            request = pending.pop(0)
            cache = tempfile.mkdtemp(prefix=f"{request.name}.cache.", dir=request.parent)
            sys.stdout.flush()
            sys.stderr.flush()
            pid = os.fork()
            if pid == 0:
                code = 1
                try:
                    code = _child(request, cache)
                finally:
                    os._exit(code)
            running[pid] = (request, cache)
        pid, status = os.wait()
        if pid not in running:
            continue
        request, cache = running.pop(pid)
        shutil.rmtree(cache, ignore_errors=True)
        triton_aot.fork_outputs(request)[2].write_text(str(os.waitstatus_to_exitcode(status)))


if __name__ == "__main__":
    if len(sys.argv) < 3:
        sys.exit("usage: python -m ablate.build.triton_forks JOBS REQUEST.json...")
    serve([Path(p) for p in sys.argv[2:]], int(sys.argv[1]))
