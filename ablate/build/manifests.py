"""Builds by a Python compiler (Triton, CuTe DSL; ablate/build/triton_aot.py, cute_aot.py): each
variant planned as a JSON request, named in the build folder by its digest, compiled where its
manifest is missing (under the folder's lock: the tests' two processes share one folder), and
read back as compile.BuildResult. The kinds differ in the plan, the digest and the compile; the
rest is here."""
import fcntl
import functools
import hashlib
import importlib.metadata
import json
from pathlib import Path

from ablate.build import ptxas


def build(variants, build_dir: Path, arch: str, result, *, plan, digest, compile_all, suffix: str, who: str):
    """{variant name: `result`} of `variants`: `plan(variant)` their requests (ValueError: the
    variant cannot be planned, its build_failed says why), `digest(request)` their names,
    `compile_all({digest: request})` those not built yet; `who` names the compiler in a log."""
    build_dir.mkdir(parents=True, exist_ok=True)
    plans = {}
    for variant in variants:
        try:
            request = plan(variant)
        except ValueError as e:
            plans[variant.name] = (variant, None, str(e))
            continue
        plans[variant.name] = (variant, request, digest(request))
    todo = {}
    with open(build_dir / ".lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        for name, (variant, request, name_of) in plans.items():
            if request is not None and not (build_dir / f"{name_of}{suffix}").is_file():
                todo.setdefault(name_of, request)
        if todo:
            compile_all(todo)
        # Read while the lock is held, as compile.build does: another build of this folder
        # would rewrite a failure's log.
        return _results(plans, todo, build_dir, arch, result, suffix, who)


def _results(plans, todo, build_dir, arch, result, suffix, who):
    """{variant name: `result`} of the planned variants, read off the folder: built where its
    manifest and log are there, else build_failed with its failure's log."""
    results = {}
    for name, (variant, request, digest) in plans.items():
        if request is None:  # the variant cannot be planned: its meta names nothing of the kernel's
            failed = build_dir / f"{variant.name}.failed.log"
            failed.write_text(f"error: {digest}\n")
            results[name] = result(name, "build_failed", build_dir / f"none{suffix}", failed.read_text(),
                                   failed, False, arch, "")
            continue
        lib, log_path, failed_log = (build_dir / f"{digest}{s}" for s in (suffix, ".log", ".failed.log"))
        ok = lib.is_file() and log_path.is_file()
        path = log_path if ok else failed_log
        log = path.read_text(errors="replace") if path.exists() else f"the {who} compile left no log"
        results[name] = result(name, "built" if ok else "build_failed", lib, log, path,
                               ok and digest not in todo, arch, digest,
                               ptxas.parse(log, demangle_names=False) if ok else {})
    return results


def settle(build_dir: Path, digest: str, suffix: str, log: str, returncode: int, who: str):
    """One compile's outcome put in place: its log beside the manifest it wrote, or the manifest
    removed and the log kept as the failure's."""
    if returncode == 0 and (build_dir / f"{digest}{suffix}").is_file():
        (build_dir / f"{digest}.log").write_text(log)
        (build_dir / f"{digest}.failed.log").unlink(missing_ok=True)
    else:
        (build_dir / f"{digest}{suffix}").unlink(missing_ok=True)
        (build_dir / f"{digest}.failed.log").write_text(log + f"\nerror: the {who} compile exited {returncode}\n")


def digest(request: dict, kernel_dir, versions: str, compiler: Path) -> str:
    """A request's name in the build folder: the request (not the folder's path: the plugin's
    Python is hashed by names relative to it, so two checkouts or copies of a plugin share a
    build in the build cache), the compiler's `versions`, the kind's own module `compiler`."""
    h = hashlib.sha256()
    described = {k: v for k, v in request.items() if k != "kernel_dir"}
    h.update(json.dumps(described, sort_keys=True).encode() + b"\0" + versions.encode() + b"\0")
    h.update(Path(compiler).read_bytes())
    folder = Path(kernel_dir).resolve()
    for path in sorted(folder.rglob("*.py")):
        if "__pycache__" not in path.parts:
            h.update(path.relative_to(folder).as_posix().encode() + b"\0" + path.read_bytes() + b"\0")
    return h.hexdigest()[:16]


@functools.cache
def _distributions() -> dict:
    """importlib.metadata.packages_distributions(), once a process: it reads every installed
    distribution's file list (0.67 s in the project's environment, 2026-12-02), and each variant's
    build request of a library's kernel asked for it again."""
    return importlib.metadata.packages_distributions()


def distribution(top: str) -> str:
    """"name version" of the installed distribution that holds the top-level package `top` (the
    library a module-path kernel comes from), or "`top` (no distribution)"."""
    name = (_distributions().get(top) or [top])[0]
    try:
        return f"{name} {importlib.metadata.version(name)}"
    except importlib.metadata.PackageNotFoundError:
        return f"{top} (no distribution)"
