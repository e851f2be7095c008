"""Which GPUs this host has, and which of them a sweep times on.

A sweep times on every GPU it may use, one GPU child each (ablate/gpu/pool.py); two sweeps
(or a sweep and a single job) on one host must not time on one GPU at once, or their
timings would disturb each other. So a sweep claims each GPU it uses for its time: an
exclusive lock on a file named after the GPU's UUID (fcntl.flock, released when the sweep
ends or its process dies); a GPU that another holds is left to it, and where all are held
the sweep waits for one (`claim`). The child is started with CUDA_VISIBLE_DEVICES naming
that GPU alone.

The GPUs are those CUDA_VISIBLE_DEVICES names when it is set (a SLURM job's allocation), else
every GPU nvidia-smi lists. The locks live in ABLATE_GPU_LOCK_DIR, by default a folder of
the machine's temporary directory, so that two sweeps on one host share them too.
"""
import contextlib
import fcntl
import logging
import os
import subprocess
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

log = logging.getLogger(__name__)

LOCK_DIR_ENV = "ABLATE_GPU_LOCK_DIR"


@dataclass(frozen=True)
class Gpu:
    index: str          # nvidia-smi's index (CUDA_VISIBLE_DEVICES' entry when that names it otherwise)
    uuid: str | None    # GPU-..., None when nvidia-smi could not say
    name: str | None

    @property
    def pin(self) -> str:
        """What CUDA_VISIBLE_DEVICES is set to in the GPU child: the UUID, which no
        renumbering can change, else the index."""
        return self.uuid or self.index


def listed():
    """[Gpu] of every GPU nvidia-smi lists ([] when there is no nvidia-smi or no driver)."""
    try:
        out = subprocess.run(["nvidia-smi", "--query-gpu=index,uuid,name", "--format=csv,noheader"],
                             capture_output=True, text=True, timeout=60)
    except (OSError, subprocess.TimeoutExpired):
        return []
    if out.returncode != 0:
        return []
    gpus = []
    for line in out.stdout.strip().splitlines():
        index, uuid, name = (field.strip() for field in line.split(",", 2))
        gpus.append(Gpu(index, uuid, name))
    return gpus


def visible():
    """The GPUs a job may use: those CUDA_VISIBLE_DEVICES names (indices or UUIDs) when it is
    set, in its order, else every GPU listed."""
    gpus = listed()
    names = os.environ.get("CUDA_VISIBLE_DEVICES")
    if names is None:
        return gpus
    chosen = []
    for entry in (e.strip() for e in names.split(",")):
        if not entry or entry.startswith("-"):
            break  # CUDA stops at the first invalid entry; "" hides every GPU
        found = next((g for g in gpus if entry in (g.index, g.uuid) or (g.uuid or "").startswith(entry)), None)
        chosen.append(found or Gpu(entry, None, None))
    return chosen


def count():
    """How many GPUs a job may use (at least 1, so that a launcher preset still runs one job
    at a time where nvidia-smi is missing)."""
    return max(1, len(visible()))


def lock_dir():
    folder = Path(os.environ.get(LOCK_DIR_ENV) or Path(tempfile.gettempdir()) / "ablate-gpus")
    if not folder.is_dir():
        folder.mkdir(parents=True, exist_ok=True)
        with contextlib.suppress(OSError):  # shared by every user's sweeps, like /tmp
            folder.chmod(0o1777)
    return folder


def _try_lock(gpu, folder):
    """An open, locked file descriptor for `gpu`, or None when another process holds it."""
    key = (gpu.uuid or f"index-{gpu.index}").replace("/", "_")
    fd = os.open(folder / f"{key}.lock", os.O_RDONLY | os.O_CREAT, 0o666)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        return fd
    except BlockingIOError:
        os.close(fd)
        return None


def try_lock(gpu):
    """The lock of `gpu` where no other job holds it now (a descriptor: closing it lets the
    GPU go), else None; never waits."""
    return _try_lock(gpu, lock_dir())


@contextlib.contextmanager
def claim(prefer=None, gpus=None, poll_s=0.5):
    """A GPU of this host to this job alone, for the `with` block: `prefer` first (the Gpu the
    caller's child already runs on), then the others in order; while every one is taken,
    wait. Yields None when no GPU is known (the child then sees what the process sees)."""
    gpus = visible() if gpus is None else list(gpus)
    if not gpus:
        yield None
        return
    order = ([prefer] if prefer in gpus else []) + [g for g in gpus if g != prefer]
    folder, said = lock_dir(), False
    while True:
        for gpu in order:
            fd = _try_lock(gpu, folder)
            if fd is not None:
                try:
                    yield gpu
                finally:
                    os.close(fd)  # closing the descriptor releases the lock
                return
        if not said:
            log.info("every GPU (%s) is taken by another job; waiting for one (locks in %s)",
                     ", ".join(g.index for g in gpus), folder)
            said = True
        time.sleep(poll_s)


def register_resolver():
    """`${ablate_gpus:}` in a config: how many GPUs a job may use (for a launcher config that
    runs that many jobs at a time; a sweep of ablate's own uses them all by itself)."""
    from omegaconf import OmegaConf

    if not OmegaConf.has_resolver("ablate_gpus"):  # hydra_plugins/ablate_kernel registers it as Hydra starts
        OmegaConf.register_new_resolver("ablate_gpus", count, use_cache=True)
