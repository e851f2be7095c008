"""A GPU child kept between sweeps, both ends of its socket.

A child that served a sweep may be kept when the sweep ends (the config's `keep_worker_s`):
it then waits, idle, on a socket of Linux's abstract namespace named after what it was
started as (`child_key`: the command, the project, the python and the environment, its
GPU's pin among them, so each GPU's child is kept under its own name) for the next sweep
that would start the very same child; that sweep attaches to it (`attach`) instead of
starting one (python, torch, the CUDA context and the first uses of its libraries: ~7-10 s
on the H100), once the child has checked that no file it loaded has changed (`changed`).
A kept child serves one sweep at a time and ends after keep_worker_s idle seconds.
"""
import contextlib
import ctypes
import hashlib
import json
import os
import socket
import struct
import sys
import time
from pathlib import Path

from ablate.paths import ROOT

PR_SET_PDEATHSIG = 1  # linux/prctl.h
# Not part of what a child is: they change from one sweep (or shell) to the next, never what
# a child computes (the sweep's MLflow run: ablate/sweep/callbacks.py; how long it is kept).
VOLATILE_ENV = {"PWD", "OLDPWD", "SHLVL", "_", "ABLATE_SWEEP_RUN_ID", "ABLATE_KEEP_WORKER_S"}


def child_key(command, env) -> str:
    """What a child is, as a name: this user, the project, the python, the command and the
    environment it starts with (VOLATILE_ENV aside). A kept child serves only a sweep that
    would start the very same one; what it loaded since is checked when one attaches."""
    text = json.dumps([str(ROOT), sys.executable, list(command),
                       sorted((k, v) for k, v in env.items() if k not in VOLATILE_ENV)])
    return f"{os.getuid()}-{hashlib.sha256(text.encode()).hexdigest()[:32]}"


def address(key):
    """A kept child's socket: Linux's abstract namespace (no file to leave behind)."""
    return f"\0ablate-gpu-worker-{key}"


def attach(key, log_fd):
    """Attach to the kept child of `key` (the parent's end of the socket): it gets `log_fd` to
    write to and checks that nothing it loaded has changed since (a stale one says so and
    ends). (socket, pid, cuda as the child found it) where it took this process's jobs, else
    None (none kept, one busy with another sweep, one that just ended, or a stale one)."""
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        sock.connect(address(key))
        pid, uid, _ = struct.unpack("3i", sock.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED,
                                                           struct.calcsize("3i")))
        if uid != os.getuid():  # another user's process took the name: not ours to use
            raise ConnectionError(f"the socket's owner is uid {uid}")
        sock.settimeout(10)
        socket.send_fds(sock, [b'{"attach": true}\n'], [log_fd])
        reply = b""
        while not reply.endswith(b"\n"):
            chunk = sock.recv(4096)
            if not chunk:
                raise ConnectionError("closed")
            reply += chunk
        reply = json.loads(reply)
    except (OSError, ValueError):
        sock.close()
        return None
    if not reply.get("ready"):
        sock.close()  # stale: it ends by itself
        return None
    sock.settimeout(None)
    return sock, pid, tuple(reply["cuda"]) if reply.get("cuda") else None


def kept_keys():
    """The keys of this user's kept children waiting now (Linux lists abstract sockets in
    /proc/net/unix); a child serving a run does not listen, so it is not among them."""
    named = "@" + address("")[1:]  # how the table writes the abstract namespace's names
    try:
        lines = Path("/proc/net/unix").read_text().splitlines()[1:]
    except OSError:
        return []
    # Flags 00010000: listening (a child serving a run has its connection under the same name).
    names = {f[7] for f in map(str.split, lines) if len(f) == 8 and f[3] == "00010000"}
    return sorted(n[len(named):] for n in names if n.startswith(f"{named}{os.getuid()}-"))


_loaded = {}  # path: (inode, size, mtime) of each module and library this child loaded


def _stat(path):
    try:
        st = os.stat(path)
    except OSError:
        return None
    return st.st_ino, st.st_size, st.st_mtime_ns


def note_loaded(*paths):
    """Record the files this child runs (every imported module's, and `paths`) as they are
    now, for a kept child to check when a sweep attaches."""
    files = [getattr(m, "__file__", None) for m in list(sys.modules.values())] + [str(p) for p in paths]
    for f in files:
        if f and f not in _loaded:
            _loaded[f] = _stat(f)


def changed():
    """The first module or library this child loaded whose file changed since (an edit to
    ablate, a plugin's python, a library rebuilt in place, another torch), else None."""
    return next((f for f, st in _loaded.items() if _stat(f) != st), None)


def wait_for_sweep(keep, answers, cuda):
    """Wait, idle, for the next sweep to attach (`keep`: {"keep_s", "key"}): the connection,
    its log as this child's stdout and stderr; None when none came within keep_s seconds, a
    child of this key is kept already, or something this child loaded changed."""
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        listener.bind(address(keep["key"]))
    except OSError:  # another child of this key is kept: this one ends
        return None
    listener.listen(4)
    if sys.platform.startswith("linux"):
        ctypes.CDLL(None).prctl(PR_SET_PDEATHSIG, 0)  # outlives the sweep that kept it
    null = os.open(os.devnull, os.O_WRONLY)
    os.dup2(null, 1)
    os.dup2(null, 2)
    os.close(null)
    note_loaded()
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
            stale = changed()
            if stale:
                with contextlib.suppress(OSError):
                    conn.sendall(json.dumps({"stale": f"{stale} changed"}).encode() + b"\n")
                conn.close()
                os.close(fds[0])
                return None
            os.dup2(fds[0], 1)
            os.dup2(fds[0], 2)
            os.close(fds[0])
            conn.settimeout(None)
            conn.sendall(json.dumps({"ready": True, "cuda": cuda}).encode() + b"\n")
            return conn  # the listener closes: another sweep meanwhile starts a child of its own
