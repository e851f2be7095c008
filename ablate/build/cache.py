"""The build cache every checkout shares: `$XDG_CACHE_HOME/ablate` (else `~/.cache/ablate`),
its variants' libraries in `build/`, each named by the hash of everything that goes into it
(ablate/build/compile.py: the sources and headers by content, with their paths relative to the
project root or to the plugin's folder, flags, arch, nvcc's version; a Triton build's
meta-parameters, Python and Triton's version), so that two checkouts of the same code, or two
copies of a plugin, find each other's builds. `build.dir=` builds elsewhere instead.

    ablate cache          where it is, how large, how many libraries
    ablate cache clear    empty it (each build folder's lock taken first: a build running
                          now finishes before its folder is emptied)
"""
import argparse
import fcntl
import os
import shutil
import sys
from pathlib import Path

CACHE_ENV = "XDG_CACHE_HOME"


def root() -> Path:
    """The user's ablate cache folder."""
    base = os.environ.get(CACHE_ENV) or ""
    return (Path(base).expanduser() if base.strip() else Path.home() / ".cache") / "ablate"


def build_dir() -> Path:
    """Where a build with `build.dir: null` (the default) puts its libraries."""
    return root() / "build"


def usage(folder: Path | None = None) -> tuple[int, int]:
    """(bytes, libraries) under `folder` (default: the cache): files' sizes, and the nvcc
    (`.so`), Triton (`.triton.json`) and CuTe DSL (`.cute.json`) libraries among them."""
    folder = Path(folder or root())
    size = count = 0
    for dirpath, _, files in os.walk(folder):
        for name in files:
            try:
                size += os.lstat(os.path.join(dirpath, name)).st_size
            except OSError:
                continue
            count += name.endswith((".so", ".triton.json", ".cute.json")) and not name.endswith(".tmp.so")
    return size, count


def clear(folder: Path | None = None) -> int:
    """Empty the cache (or `folder`): every build folder's lock is taken first, so that a build
    running there finishes before it is emptied, then everything but the locks is deleted.
    Returns the bytes freed."""
    folder = Path(folder or root())
    if not folder.is_dir():
        return 0
    size, _ = usage(folder)
    locks = []
    try:
        for lock in sorted(folder.rglob(".lock")):  # one order for every clear: no deadlock between two
            f = open(lock, "a")
            fcntl.flock(f, fcntl.LOCK_EX)
            locks.append(f)
        kept = {Path(f.name) for f in locks}
        holders = {p for k in kept for p in k.parents}
        for path in sorted(folder.rglob("*"), key=lambda p: len(p.parts), reverse=True):
            if path in kept or path in holders:
                continue
            if path.is_dir() and not path.is_symlink():
                shutil.rmtree(path, ignore_errors=True)
            else:
                path.unlink(missing_ok=True)
    finally:
        for f in locks:
            f.close()
    return size


def _mb(size: int) -> str:
    return f"{size / 2**20:.1f} MiB"


def main(argv=None) -> int:
    p = argparse.ArgumentParser(prog="ablate cache", description=__doc__.split("\n\n")[0])
    p.add_argument("action", nargs="?", choices=["show", "clear"], default="show",
                   help="show (default): where it is and how large; clear: empty it")
    args = p.parse_args(argv)
    folder = root()
    if args.action == "clear":
        print(f"{folder}: {_mb(clear(folder))} freed")
        return 0
    size, libraries = usage(folder)
    print(f"{folder}: {_mb(size)}, {libraries} libraries"
          + ("" if folder.is_dir() else " (not made yet)"))
    return 0


if __name__ == "__main__":
    sys.exit(main())
