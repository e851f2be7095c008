"""Build variants with nvcc through one ninja run: one shared library per variant.

Each library is named by a hash of everything that goes into it (sources, headers, macros,
flags, arch, nvcc's version), so an unchanged variant is never rebuilt and a changed one
never overwrites another's library. ninja runs with `-k 0`, so a variant that fails is
recorded with its log while the others still build; a compile writes to a temporary name
and is moved into place only on success, so a failure never spoils an earlier library.
"""
import fcntl
import functools
import hashlib
import json
import os
import re
import shlex
import shutil
import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path

from ablate.build import cache, cute_aot, ptxas, seams, triton_aot
from ablate.paths import INCLUDE  # ablate's headers, on every include path

ARCH_RE = re.compile(r"^sm_(\d+a?)$")
DEFAULT_ARCH = "sm_90"  # the H100's, used when no GPU is visible
HEADER_SUFFIXES = {".h", ".hh", ".hpp", ".cuh", ".cu", ".inc"}


class BuildError(RuntimeError):
    """The build could not start at all (no nvcc, no ninja, a bad build config)."""


@dataclass
class BuildResult:
    variant: str
    status: str  # "built" or "build_failed"
    lib: Path  # the shared library; exists when built
    log: str  # the compile command, then nvcc's stdout and stderr (with ptxas -v)
    log_path: Path
    cached: bool  # the library was already up to date: nvcc did not run
    arch: str
    digest: str  # the 16 hex digits naming the library
    ptxas: dict = field(default_factory=dict)  # ptxas.parse(log)

    @property
    def ok(self) -> bool:
        return self.status == "built"


def build(variants: list, build_cfg, kernel, root, only_if_built=False) -> dict[str, BuildResult] | None:
    """Build `variants` in one ninja run; return {variant name: BuildResult}. `only_if_built`:
    None instead, where any of them would have to be compiled (nothing is).

    A Triton plugin (its spec names TRITON) is built by ablate.build.triton_aot instead, each
    variant's instances compiled by Triton for the arch, and a CuTe DSL plugin (CUTE) by
    ablate.build.cute_aot; the results are alike.

    `build_cfg` is `cfg.build` (dir, arch, nvcc, flags, jobs); `kernel` is the kernel's
    plugin (ablate.job.plugins.Plugin; anything with `source`, its translation unit, and `dir`,
    its folder and include root); `root` the project root, where nvcc runs and relative
    paths start. A variant that fails to compile gets status "build_failed" and its log;
    BuildError is raised only when nothing can be built (nvcc or ninja missing, bad arch or
    flags)."""
    if not variants:
        return {}
    if cute_aot.is_cute(kernel):  # a CuTe DSL kernel: compiled by the DSL for the arch, no nvcc
        if only_if_built:
            return None
        return cute_aot.build(variants, build_dir_of(build_cfg, Path(root).resolve()), int(build_cfg.get("jobs", 0) or 0),
                              kernel, root, target_arch(str(build_cfg.arch), kernel), BuildResult)
    if triton_aot.is_triton(kernel):  # a Triton kernel: compiled by Triton for the arch, no nvcc
        if only_if_built:
            return None  # not asked of Triton's builds: the caller builds
        return triton_aot.build(variants, build_dir_of(build_cfg, Path(root).resolve()), int(build_cfg.get("jobs", 0) or 0),
                                kernel, root, target_arch(str(build_cfg.arch), kernel), BuildResult)
    root = Path(root).resolve()
    build_dir = build_dir_of(build_cfg, root)
    build_dir.mkdir(parents=True, exist_ok=True)
    # A register cap is a fraction of the base's own count, read from the base's build: the
    # variants that need it are planned once the others (the base among them, added where the
    # caller did not ask for it) are built.
    capped = [v for v in variants if getattr(v, "regs_fraction", None)]
    first = [v for v in variants if v not in capped]
    if capped and not any(v.is_base for v in first):  # built alongside (a pair's rests, say):
        first = [type(capped[0])("none", ()), *first]  # a variant of no pathology (job/variant.py)
    results = _build_once(first, build_cfg, kernel, root, build_dir, only_if_built=only_if_built) if first else {}
    if results is None:
        return None
    if capped:
        base = results[next(v for v in first if v.is_base).name]
        if base.ok:
            more = _build_once(capped, build_cfg, kernel, root, build_dir, base_regs=base.ptxas["max_registers"],
                               only_if_built=only_if_built)
            if more is None:
                return None
            results.update(more)
        else:
            for v in capped:
                results[v.name] = BuildResult(v.name, "build_failed", build_dir / "none.so",
                                              f"the base failed to build, so its register count, which "
                                              f"{v.name}'s cap is a fraction of, is unknown", base.log_path,
                                              False, base.arch, "")
    return results


def _build_once(variants, build_cfg, kernel, root: Path, build_dir: Path, base_regs=None,
                only_if_built=False) -> dict | None:
    arch, edges = _plan(variants, build_cfg, kernel, root, base_regs)
    # In each digest: their content names the library (_digest), whatever their mtimes.
    sources = {p.resolve() for p in _kernel_sources(kernel)}
    hashed = {d: sources | {(root / h).resolve() for h in v.headers} for d, (v, _) in edges.items()}
    stale = [d for d in edges if not _up_to_date(build_dir, d, root)]

    def cached():
        # Every library is there and newer than everything its compile read: what ninja would
        # find, without starting it (a sweep's jobs each ask again for what its callback built).
        return {variant.name: _result(variant, build_dir, digest, arch, cached=True)
                for digest, (variant, _) in edges.items()}
    if not stale:
        return cached()
    if only_if_built:
        return None
    ninja_file = build_dir / "build.ninja"
    with open(build_dir / ".lock", "w") as lock:
        # One build at a time per directory: ninja's own logs are not safe to share.
        fcntl.flock(lock, fcntl.LOCK_EX)
        # Asked again under the lock: the build that held it may have made some of them since,
        # and ninja, handed them, could compile them again while that process reads them (a test
        # once found such a library missing, the other test process then rebuilding it: a clean
        # clone's CI, 2026-11-29; that this is how, not confirmed).
        stale = [d for d in stale if not _up_to_date(build_dir, d, root)]
        if not stale:
            return cached()
        before = {d: _mtime(build_dir / f"{d}.so") for d in edges}
        _write_atomically(ninja_file, ninja_manifest(edges, build_dir, kernel, root))
        jobs = _jobs(build_cfg, kernel, len(stale))
        # Only what is not up to date: a library another checkout built is, though this
        # checkout's copies of its sources are newer than it (ninja would compile it again).
        run = subprocess.run(
            [find_ninja(), "-f", str(ninja_file), "-k", "0", *(["-j", str(jobs)] if jobs else []),
             *(str(build_dir / f"{d}.so") for d in stale)],
            cwd=root, capture_output=True, text=True, check=False)
        ninja_output = run.stdout + run.stderr

        # Read while the lock is held: another build of this folder would rewrite the logs.
        results = {}
        for digest, (variant, _) in edges.items():
            lib, log_path = build_dir / f"{digest}.so", build_dir / f"{digest}.log"
            reported = _failed(ninja_output, lib)
            failed = reported or not lib.exists() or not log_path.exists()
            attempt, failed_log = build_dir / f"{digest}.log.tmp", build_dir / f"{digest}.failed.log"
            if not failed:
                failed_log.unlink(missing_ok=True)  # an earlier failure of the same inputs, now built
                if before[digest] != _mtime(lib):
                    _keep_unhashed_deps(build_dir / f"{digest}.deps", root, hashed[digest], build_dir)
                results[variant.name] = _result(variant, build_dir, digest, arch, cached=before[digest] == _mtime(lib))
                continue
            # nvcc's own log when its compile failed; else ninja's account of what went wrong.
            # Kept as <digest>.failed.log (the compile writes <digest>.log.tmp as it goes).
            if reported and attempt.exists():
                os.replace(attempt, failed_log)
            else:
                failed_log.write_text(ninja_output)
            results[variant.name] = BuildResult(variant.name, "build_failed", lib, failed_log.read_text(errors="replace"),
                                                failed_log, False, arch, digest)
        return results


def _result(variant, build_dir: Path, digest: str, arch: str, cached: bool) -> BuildResult:
    """The BuildResult of a library that is built."""
    log_path = build_dir / f"{digest}.log"
    log = log_path.read_text(errors="replace")
    return BuildResult(variant.name, "built", build_dir / f"{digest}.so", log, log_path, cached, arch, digest,
                       ptxas.parse(log))


def _up_to_date(build_dir: Path, digest: str, root: Path) -> bool:
    """Whether <digest>.so and its log exist and are newer than every file its kept depfile
    (<digest>.deps) names: what nvcc -MD named (the source and every header it included, the
    CUDA toolkit's and any package's among them) less what the digest holds by content
    (_keep_unhashed_deps), relative paths from the project root `root`, where nvcc ran."""
    lib, dep = build_dir / f"{digest}.so", build_dir / f"{digest}.deps"
    built = _mtime(lib)
    if built is None or _mtime(build_dir / f"{digest}.log") is None:
        return False
    try:
        paths = _deps(dep.read_text())
    except OSError:
        return False
    sums = _read_sums(build_dir / f"{digest}.sums")
    for path in paths:
        if path in sums:  # a file of the project: its content, as when the library was built
            if _sha256(root / path) != sums[path]:
                return False
            continue
        m = _mtime(root / path)  # an absolute path stays itself
        if m is None or m > built:
            return False
    return True


def _deps(text: str) -> list[str]:
    """The files a depfile names: `target : dep dep \\<newline> dep`; a space inside a path
    is `\\ ` (nvcc leaves the target's unescaped, which the split at " : " passes over)."""
    _, _, deps = text.replace("\\\n", " ").partition(" : ")
    return [p.replace("\\ ", " ") for p in re.split(r"(?<!\\)\s+", deps.strip()) if p]


def _keep_unhashed_deps(dep: Path, root: Path, hashed, build_dir: Path) -> None:
    """Rewrite a library's kept depfile with only the files its digest does not hold by
    content (`hashed`: the kernel folder's sources and headers, ablate's, the variant's; and
    the build folder's, whose generated headers and build copies are named by their
    content): the CUDA toolkit's headers, a header package's, a header of the project outside
    the kernel's folder (relative to the project root, so that each checkout checks its own).
    Another checkout's copies of the hashed files are newer than the library and the same,
    so `_up_to_date` finds it there as it does here."""
    try:
        paths = _deps(dep.read_text())
    except OSError:
        return
    rest = [(root / p).resolve() for p in paths]
    rest = [_shown(p, root) for p in rest if p not in hashed and not p.is_relative_to(build_dir)]
    # A file of the project outside what is hashed (another checkout's may differ) is checked
    # by its content: <digest>.sums.
    _write_atomically(dep.with_suffix(".sums"), json.dumps(
        {p: _sha256(root / p) for p in rest if not Path(p).is_absolute()}, indent=1))
    _write_atomically(dep, f"{dep.with_suffix('.so')} : " + " ".join(p.replace(" ", "\\ ") for p in rest) + "\n")


def _sha256(path: Path) -> str | None:
    try:
        return hashlib.sha256(path.read_bytes()).hexdigest()
    except OSError:
        return None


def _read_sums(path: Path) -> dict:
    try:
        return json.loads(path.read_text())
    except (OSError, ValueError):
        return {}


def library_path(variant, build_cfg, kernel, root, base_regs=None) -> Path:
    """Where `build` puts the library of `variant` (its name is the hash of its inputs;
    `base_regs`: the base's register count, for a variant with a register cap)."""
    root = Path(root).resolve()
    _, edges = _plan([variant], build_cfg, kernel, root, base_regs)
    return build_dir_of(build_cfg, root) / f"{next(iter(edges))}.so"


def _plan(variants, build_cfg, kernel, root: Path, base_regs=None) -> tuple[str, dict]:
    """The target arch and {digest: (variant, nvcc command)}, one per distinct library."""
    arch = target_arch(str(build_cfg.arch), kernel)
    version = nvcc_version(str(build_cfg.nvcc))
    sources = _kernel_sources(kernel)
    seams_h = seams.write_header(kernel, build_dir_of(build_cfg, root))  # ABLATE_SEAMS_JSON, from the base's declarations
    edges = {}
    for variant in variants:
        transforms = tuple(getattr(variant, "transforms", ()))
        tree = transformed(kernel, transforms, build_dir_of(build_cfg, root)) if transforms else None
        command = compile_command(variant, build_cfg, kernel, arch, root, seams_h,
                                  regs_cap=regs_cap(variant, base_regs), tree=tree)
        digest = _digest(command, version, sources, variant.headers, root, Path(kernel.dir).resolve())
        edges.setdefault(digest, (variant, command))
    return arch, edges


def regs_cap(variant, base_regs) -> int | None:
    """The register cap of a variant with `regs_fraction`: that fraction of the base's own
    count (ptxas raises a cap below its arch's lower bound to that bound, saying so in the log)."""
    fraction = getattr(variant, "regs_fraction", None)
    if not fraction:
        return None
    if not base_regs:
        raise BuildError(f"{variant.name}: its register cap is a fraction of the base's registers, "
                         "which are not known (build the base alongside it)")
    return max(1, int(fraction * int(base_regs)))


# `#pragma unroll`, `#pragma unroll 4`, `#pragma unroll (N)`: the whole directive, on one line.
_UNROLL = re.compile(r"^([ \t]*)#[ \t]*pragma[ \t]+unroll\b[^\n]*$", re.M)
TRANSFORM_FUNCTIONS = {"unroll_1": lambda text: _UNROLL.sub(r"\1#pragma unroll 1", text)}


def transformed(kernel, transforms, build_dir: Path) -> Path:
    """A build copy of the kernel's folder (its source and headers, HEADER_SUFFIXES) with
    `transforms` applied to each file's text; the sources themselves are untouched. Its folder
    is named by a hash of the transformed contents, so the compile command (and the library's
    name) changes whenever they do. Returns the copy's folder (its include root)."""
    folder = Path(kernel.dir).resolve()
    files = {}
    for path in sorted(_kernel_sources(kernel)):
        if not path.is_relative_to(folder):
            continue  # ablate's own headers are not the kernel's
        text = path.read_text(errors="replace")
        for name in transforms:
            text = TRANSFORM_FUNCTIONS[name](text)
        files[path.relative_to(folder).as_posix()] = text
    h = hashlib.sha256()
    for rel, text in files.items():
        h.update(rel.encode() + b"\0" + text.encode() + b"\0")
    tree = build_dir / "src" / f"{folder.name}-{'+'.join(transforms)}-{h.hexdigest()[:16]}"
    if not tree.is_dir():
        tmp = tree.with_name(f".{tree.name}.{os.getpid()}")
        for rel, text in files.items():
            (tmp / rel).parent.mkdir(parents=True, exist_ok=True)
            (tmp / rel).write_text(text)
        try:
            os.rename(tmp, tree)
        except OSError:  # another process made it first: same contents
            shutil.rmtree(tmp, ignore_errors=True)
    return tree


def build_dir_of(build_cfg, root: Path) -> Path:
    """build.dir (relative to the project root), or null: the build cache every checkout
    shares (ablate/build/cache.py)."""
    if build_cfg.get("dir") is None:
        return cache.build_dir().resolve()
    return (root / Path(str(build_cfg.dir)).expanduser()).resolve()


def compile_command(variant, build_cfg, kernel, arch: str, root, seams_header=None, regs_cap=None,
                    tree=None) -> list[str]:
    """nvcc's arguments for `variant`, paths relative to the project root `root` where they
    lie inside it (absolute otherwise), without the output and depfile arguments (those are
    added per build). `regs_cap`: its register cap (-maxrregcount, and ABLATE_REGS_CAP for
    ablate's header); `tree`: the transformed build copy of the kernel's folder to compile
    instead of the folder itself."""
    number = ARCH_RE.match(arch).group(1)
    flags = [str(f) for f in build_cfg.flags] + kernel_flags(kernel) + list(getattr(variant, "flags", ()))
    if regs_cap is not None:
        flags.append(f"-maxrregcount={int(regs_cap)}")
    command = [str(build_cfg.nvcc), *flags, "-shared", "-Xcompiler", "-fPIC", "-Xptxas", "-v",
               "-gencode", f"arch=compute_{number},code=sm_{number}"]
    source, include = Path(kernel.source), [kernel.dir]
    if tree is not None:  # the copy first; the folder still resolves paths that leave it (../x)
        source = Path(tree) / source.resolve().relative_to(Path(kernel.dir).resolve())
        include = [tree, kernel.dir]
    command += [f"-I{_shown(d, root)}" for d in (*include, INCLUDE, *include_dirs(kernel))]
    if seams_header is not None:  # first: the patches and the base may use ABLATE_SEAMS_JSON
        command += ["-include", _shown(seams_header, root)]
    for header in variant.headers:
        command += ["-include", header]
    # the candidate configuration the job's shape runs (ablate/job/candidates.py), then the pathologies'
    command += [f"-D{name}={value}" for name, value in getattr(variant, "base_macros", {}).items()]
    command += [f"-D{name}={value}" for name, value in variant.macros.items()]
    if regs_cap is not None:
        command.append(f"-DABLATE_REGS_CAP={int(regs_cap)}")
    # "+", not ",": nvcc splits -D values at commas (a,b would define a stray macro b).
    command += [f"-DABLATE_PATHOLOGIES={'+'.join(variant.pathologies)}", _shown(source, root)]
    for arg in command:
        if not arg or "\n" in arg or "\r" in arg:
            raise BuildError(f"bad nvcc argument {arg!r} (from build.flags, kernel or variant)")
    return command


def kernel_flags(kernel) -> list[str]:
    """The nvcc flags every build of `kernel` takes (`spec.FLAGS`, e.g. a header library's
    `--expt-relaxed-constexpr`), after build.flags and before a variant's own; none by default."""
    spec = getattr(kernel, "spec", None)
    flags = getattr(spec, "FLAGS", None) if spec is not None else None
    if flags is None:
        return []
    name = getattr(kernel, "name", "this kernel")
    if isinstance(flags, str) or not all(isinstance(f, str) and f for f in flags):
        raise BuildError(f"kernel {name!r}: spec.FLAGS must be a list of nvcc flags (strings), got {flags!r}")
    return list(flags)


def include_dirs(kernel) -> list[Path]:
    """The folders `spec.INCLUDE_DIRS` adds to `kernel`'s include path, after its own folder
    and ablate's: a list, or a function returning one (called at each build, so that it can
    find a header package where it is installed); a relative folder is relative to the
    plugin's. BuildError naming the kernel when the function fails (say, a missing
    dependency: its message is kept) or a folder does not exist. The folders' headers are not
    hashed into the library's name (a header library has thousands); their paths are, and
    ninja's depfile rebuilds a library whose headers changed."""
    spec = getattr(kernel, "spec", None)
    dirs = getattr(spec, "INCLUDE_DIRS", None) if spec is not None else None
    if dirs is None:
        return []
    name = getattr(kernel, "name", "this kernel")
    if callable(dirs):
        try:
            dirs = dirs()
        except Exception as e:  # noqa: BLE001 - the plugin's own reason, e.g. a package not installed
            raise BuildError(f"kernel {name!r}: spec.INCLUDE_DIRS: {e}") from None
    if isinstance(dirs, (str, Path)):
        dirs = [dirs]
    out = []
    for d in dirs:
        path = Path(d).expanduser()
        path = path if path.is_absolute() else Path(kernel.dir) / path
        if not path.is_dir():
            raise BuildError(f"kernel {name!r}: spec.INCLUDE_DIRS: {path} is not a directory")
        out.append(path.resolve())
    return out


def ninja_manifest(edges: dict, build_dir: Path, kernel, root: Path) -> str:
    """build.ninja text: one `nvcc` rule, one build statement per variant.

    The command logs itself and nvcc's output to <digest>.log.tmp, compiles to
    <digest>.tmp.so, and only when nvcc succeeds moves both into place; `build` renames a
    failed build's log to <digest>.failed.log. The depfile (nvcc -MD) makes header edits
    rebuild; ninja takes it into its log and deletes it, so the command keeps a copy,
    <digest>.deps, for `_up_to_date`."""
    lines = [
        "# Written by ablate.build.compile; rewritten on every build.",
        f"builddir = {_ninja_escape(str(build_dir))}",
        "",
        "rule nvcc",
        "  command = $cmd",
        "  description = nvcc $variant",
        "  depfile = $dep",
        "  deps = gcc",
        "",
    ]
    for digest, (variant, command) in edges.items():
        source = _ninja_path(command[-1])  # the kernel's source, or its transformed copy
        lib, tmp = build_dir / f"{digest}.so", build_dir / f"{digest}.tmp.so"
        log, log_tmp = build_dir / f"{digest}.log", build_dir / f"{digest}.log.tmp"
        dep, kept = build_dir / f"{digest}.d", build_dir / f"{digest}.deps"
        nvcc = command + ["-MD", "-MF", str(dep), "-MT", str(lib), "-o", str(tmp)]
        shell = (f"printf '%s\\n' {shlex.quote(shlex.join(command))} > {shlex.quote(str(log_tmp))}"
                 f" && {shlex.join(nvcc)} >> {shlex.quote(str(log_tmp))} 2>&1"
                 f" && cp -f {shlex.quote(str(dep))} {shlex.quote(str(kept))}"
                 f" && mv -f {shlex.quote(str(tmp))} {shlex.quote(str(lib))}"
                 f" && mv -f {shlex.quote(str(log_tmp))} {shlex.quote(str(log))}")
        implicit = " ".join(_ninja_path(h) for h in variant.headers)
        lines += [
            f"build {_ninja_path(str(lib))} | {_ninja_path(str(log))}: nvcc {source}"
            + (f" | {implicit}" if implicit else ""),
            f"  variant = {_ninja_escape(variant.name)}",
            f"  dep = {_ninja_escape(str(dep))}",
            f"  cmd = {_ninja_escape(shell)}",
            "",
        ]
    return "\n".join(lines)


# Set by the sweep's callback to the arch `auto` resolved to, so that jobs running beside each
# other (a parallel launcher) never probe a GPU another job is timing on.
ARCH_ENV = "ABLATE_BUILD_ARCH"


@functools.cache
def gpu_arch() -> str | None:
    """The visible GPU's sm_XY: nvidia-smi's compute capability of the first GPU that
    CUDA_VISIBLE_DEVICES leaves visible, else asked of torch in a child process (so this
    process never initialises CUDA before forking workers; the child took ~5 s of a warm
    sweep's start on the H100's host); None without one, and without asking torch where
    this Linux machine has no NVIDIA device at all (no_nvidia_device)."""
    decided, arch = _smi_arch()
    if decided:
        return arch
    if no_nvidia_device():
        return None
    probe = ("import torch\n"
             "if torch.cuda.is_available():\n"
             "    print('sm_%d%d' % torch.cuda.get_device_capability())")
    try:
        out = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True,
                             timeout=120, check=False).stdout.strip()
    except subprocess.TimeoutExpired:
        out = ""
    return out if ARCH_RE.match(out) else None


@functools.cache
def resolve_arch(arch: str) -> str:
    """`auto` -> the visible GPU's sm_XY (gpu_arch), or sm_90 without one; else `arch`
    checked against ^sm_\\d+a?$."""
    if arch == "auto" and os.environ.get(ARCH_ENV):
        arch = os.environ[ARCH_ENV]  # the sweep's, resolved once by its callback
    if arch == "auto":
        return gpu_arch() or DEFAULT_ARCH
    if not ARCH_RE.match(arch):
        raise BuildError(f"build.arch={arch!r}: expected auto or sm_XY (e.g. sm_80, sm_90a)")
    return arch


# The device files through which the CUDA driver reaches an NVIDIA GPU on Linux (WSL2: /dev/dxg).
NVIDIA_DEVICE_FILES = ("/dev/nvidiactl", "/dev/dxg")


def no_nvidia_device() -> bool:
    """Whether this is a Linux machine where CUDA cannot reach any GPU: none of its device
    files exist (a container given no GPU, a CPU machine). Then nothing needs torch to say
    so: its import, in a child for the arch and in the run for whether CUDA is there, took
    most of a single job's start on this project's 2-core CPU machine (`ablate
    pathology=scalar_loads shape=s512`, falling back to static: 10.4 s -> 5.3 s;
    docs/benchmarks.md, "Sweep speed"). False where it cannot tell (another OS)."""
    return sys.platform.startswith("linux") and not any(os.path.exists(f) for f in NVIDIA_DEVICE_FILES)


def _smi_arch() -> tuple[bool, str | None]:
    """(True, sm_XY or None) when nvidia-smi says which GPU CUDA_VISIBLE_DEVICES shows first
    and its compute capability (None: it hides every GPU); (False, None) when it cannot say
    (no nvidia-smi, a driver without compute_cap, a name it does not list)."""
    names = os.environ.get("CUDA_VISIBLE_DEVICES")
    first = None if names is None else names.split(",")[0].strip()
    if first is not None and (not first or first.startswith("-")):
        return True, None  # "" or an invalid first entry: CUDA sees no GPU
    try:
        run = subprocess.run(["nvidia-smi", "--query-gpu=index,uuid,compute_cap", "--format=csv,noheader"],
                             capture_output=True, text=True, timeout=60, check=False)
    except (OSError, subprocess.TimeoutExpired):
        return False, None
    rows = [[f.strip() for f in line.split(",")] for line in run.stdout.strip().splitlines()]
    rows = [r for r in rows if len(r) == 3] if run.returncode == 0 else []
    row = next((r for r in rows if first is None or first in (r[0], r[1]) or r[1].startswith(first)), None)
    cap = re.fullmatch(r"(\d+)\.(\d+)", row[2]) if row else None
    return (True, f"sm_{cap.group(1)}{cap.group(2)}") if cap else (False, None)


def target_arch(arch: str, kernel) -> str:
    """What a kernel's libraries are built for: `arch` (build.arch) resolved, or the arch the
    kernel requires (`spec.ARCH`, e.g. sm_90a for instructions only that chip runs) where it
    names one. BuildError when build.arch names another chip than the required one."""
    resolved = resolve_arch(arch)
    required = getattr(getattr(kernel, "spec", None), "ARCH", None)
    if required is None:
        return resolved
    name = getattr(kernel, "name", "this kernel")
    if not ARCH_RE.match(str(required)):
        raise BuildError(f"kernel {name!r}: spec.ARCH={required!r}, expected sm_XY (e.g. sm_90a)")
    if arch != "auto" and _chip(resolved) != _chip(required):
        raise BuildError(f"build.arch={arch}: kernel {name!r} is built for {required} only "
                         "(its spec.ARCH); leave build.arch=auto")
    return required


def unavailable(kernel) -> str | None:
    """One line saying why the visible GPU cannot run `kernel` (its spec.ARCH is another
    chip's), or None when it can or no GPU is visible."""
    required, gpu = getattr(kernel.spec, "ARCH", None), gpu_arch()
    if required is None or gpu is None or _chip(gpu) == _chip(str(required)):
        return None
    return (f"kernel {kernel.name!r} needs a {required} GPU (its spec.ARCH) and this one is "
            f"{gpu}: it is unavailable here")


def _chip(arch: str) -> str:
    """sm_90a -> sm_90: the `a` variant's code runs on that chip only, but it is the chip."""
    return arch.rstrip("a")


def nvcc_version(nvcc: str) -> str:
    """`nvcc --version`'s output (part of every library's hash); asked once per nvcc binary
    (its path and mtime) in a process, since every job's build asks again."""
    found = shutil.which(nvcc)
    try:
        stamp = os.stat(found).st_mtime_ns if found else None
    except OSError:
        stamp = None
    return _nvcc_version(nvcc, found, stamp)


@functools.cache
def _nvcc_version(nvcc: str, found, stamp) -> str:
    try:
        run = subprocess.run([nvcc, "--version"], capture_output=True, text=True, check=False)
    except OSError as err:
        raise BuildError(f"build.nvcc={nvcc!r} cannot be run: {err}") from None
    if run.returncode != 0:
        raise BuildError(f"`{nvcc} --version` failed: {run.stderr.strip()}")
    return run.stdout


def available_memory_gib() -> float | None:
    """The memory the kernel allows new processes now (/proc/meminfo's MemAvailable), in GiB;
    None where it does not say."""
    try:
        for line in Path("/proc/meminfo").read_text().splitlines():
            if line.startswith("MemAvailable:"):
                return int(line.split()[1]) / 2**20
    except (OSError, ValueError, IndexError):
        pass
    return None


def _jobs(build_cfg, kernel, compiles: int) -> int:
    """ninja's -j (0: ninja's default, the cores + 2): build.jobs, but no more compiles at once than
    the memory available now holds where the kernel's spec says what one takes (BUILD_MEMORY_GIB,
    the peak of one compile of its source, measured): past it the compiles push each other out
    of memory and the build crawls (cutlass_gemm's two at once on a CI machine of 23 GiB: an hour
    at 2% of its tests, 2026-11-29)."""
    jobs = int(build_cfg.get("jobs", 0) or 0)
    need = getattr(getattr(kernel, "spec", None), "BUILD_MEMORY_GIB", None)
    if not need or compiles < 2 or (free := available_memory_gib()) is None:
        return jobs
    fits = max(1, int(free // float(need)))
    return min(jobs or (os.cpu_count() or 1) + 2, fits)


def find_ninja() -> str:
    """ninja on PATH, else the one in the `ninja` PyPI package."""
    if found := shutil.which("ninja"):
        return found
    try:
        import ninja

        path = Path(ninja.BIN_DIR) / "ninja"
        if path.is_file():
            return str(path)
    except ImportError:
        pass
    raise BuildError("ninja not found: `pip install ninja` (requirements.txt has it)")


def _kernel_sources(kernel) -> list[Path]:
    """The kernel's source, every header in its folder and ablate's own, in a stable order."""
    source, folder = Path(kernel.source).resolve(), Path(kernel.dir).resolve()
    if not source.is_file():
        raise BuildError(f"the kernel's source {source} is not a file")
    if not folder.is_dir():
        raise BuildError(f"the kernel's folder {folder} is not a directory")
    files = {source} | {p for d in (folder, INCLUDE) for p in d.rglob("*")
                        if p.is_file() and p.suffix in HEADER_SUFFIXES}
    return sorted(files)



def _shown(path, root: Path) -> str:
    """A path as nvcc's command line gives it: relative to the project root inside it."""
    path = Path(path).resolve()
    return path.relative_to(root).as_posix() if path.is_relative_to(root) else str(path)


def _digest(command: list[str], version: str, sources: list[Path], headers: tuple[str, ...],
            root: Path, folder: Path | None = None) -> str:
    """The library's name: the hash of its nvcc command, nvcc's version, and the name and
    content of every source and header. Paths inside the project root are relative to it
    (two checkouts of the same code give the same name); those of a plugin `folder` outside it
    are relative to the folder (two copies of a plugin do too: its content is hashed)."""
    outside = folder is not None and not folder.is_relative_to(root)

    def name(path: Path) -> str:
        if path.is_relative_to(root):
            return path.relative_to(root).as_posix()
        if outside and path.is_relative_to(folder):
            return "<plugin>/" + path.relative_to(folder).as_posix()
        return str(path)

    def shown(part: str) -> str:  # an absolute path the command gives (a variant's header), as name() does
        part = part.replace(f"{root}/", "")
        return part.replace(str(folder), "<plugin>") if outside else part

    h = hashlib.sha256()
    for part in (*command, version):
        h.update(shown(part).encode() + b"\0")
    for path in [*sources, *(root / p for p in headers)]:
        h.update(name(path).encode() + b"\0" + path.read_bytes() + b"\0")
    return h.hexdigest()[:16]


def first_error(log: str) -> str:
    """The first line of a build's log that says what failed (nvcc's `error` or `fatal`), or ""."""
    return next((ln.strip() for ln in log.splitlines() if "error" in ln.lower() or "fatal" in ln.lower()), "")


def _failed(ninja_output: str, lib: Path) -> bool:
    """Whether ninja reported the build of `lib` as failed (`FAILED: [code=1] lib ...`)."""
    return any(line.startswith("FAILED:") and str(lib) in line
               for line in ninja_output.splitlines())


def _mtime(path: Path) -> int | None:
    try:
        return path.stat().st_mtime_ns
    except FileNotFoundError:
        return None


def _write_atomically(path: Path, text: str) -> None:
    tmp = path.with_name(f".{path.name}.{os.getpid()}")
    tmp.write_text(text)
    os.replace(tmp, path)


def _ninja_escape(text: str) -> str:
    """A value in a ninja variable: `$` is ninja's only special character there."""
    return text.replace("$", "$$")


def _ninja_path(path: str) -> str:
    """A path in a ninja build line, where space and colon are special too."""
    return path.replace("$", "$$").replace(" ", "$ ").replace(":", "$:")
