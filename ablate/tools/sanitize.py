"""compute-sanitizer over a kernel's base and every pathology, on the kernel's small shapes.

    python -m ablate.tools.sanitize [--kernel NAME] [--tools memcheck,racecheck]
                              [--pathologies a,b] [--shapes 'm=37 *,m=133 *'] [--jobs 4]
                              [--candidates all|a,b]

builds every variant (ablate.build.compile; a kernel of CANDIDATES builds them on its
DEFAULT_CANDIDATE at its default shape; `--candidates` sanitizes the base built on each of its
candidates instead, `none@<candidate>`), runs `compute-sanitizer --tool X --error-exitcode 1` on a
tiny driver for each of the kernel's spec.SANITIZE_SHAPES, checks each run's output against
the kernel's reference, prints a variant x tool table (clean, or the first error lines) and
exits non-zero if anything was found. The driver is this module too:

    python -m ablate.tools.sanitize --drive LIB KERNEL_DIR CASE_DIR

runs the kernel once on the inputs saved in CASE_DIR (raw bytes, made and checked by this
process with torch on the CPU) and writes its outputs back there. It talks to the CUDA driver
through ctypes and does not import torch: a sanitized torch process spends most of its time
loading torch's own kernels, and races or faults in those are not ours.
"""
import argparse
import ctypes
import fnmatch
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor, as_completed
from pathlib import Path

from ablate.job import plugins
from ablate.paths import ROOT

TOOLS = ("memcheck", "racecheck", "initcheck", "synccheck")
# Red zone after every allocation, so a read or write just past a tensor's end is reported
# even when the allocator placed another tensor right behind it.
PADDING_BYTES = 65536


# ---- the driver: what runs under the sanitizer ----------------------------------------------

def _driver_api():
    """libcuda with the few entry points the driver uses, each checked."""
    cuda = ctypes.CDLL("libcuda.so.1")
    cuda.cuMemAlloc_v2.argtypes = [ctypes.POINTER(ctypes.c_uint64), ctypes.c_size_t]
    cuda.cuMemcpyHtoD_v2.argtypes = [ctypes.c_uint64, ctypes.c_void_p, ctypes.c_size_t]
    cuda.cuMemcpyDtoH_v2.argtypes = [ctypes.c_void_p, ctypes.c_uint64, ctypes.c_size_t]
    cuda.cuMemFree_v2.argtypes = [ctypes.c_uint64]

    def call(name, *args):
        rc = getattr(cuda, name)(*args)
        if rc != 0:
            text = ctypes.c_char_p()
            cuda.cuGetErrorName(rc, ctypes.byref(text))
            raise RuntimeError(f"{name} failed: {rc} ({(text.value or b'?').decode()})")
    return call


def drive(lib_path, kernel_dir, case_dir):
    """Run the kernel once on a saved case and save its outputs; return the exit code."""
    try:
        return _drive(lib_path, kernel_dir, Path(case_dir))
    except (OSError, RuntimeError) as e:  # no driver, no device, a failed CUDA call
        print(f"driver failed: {e}", file=sys.stderr)
        return 2


def _drive(lib_path, kernel_dir, case):
    from ablate.build.library import cuda_error_name, load
    from ablate.job.job import from_wire

    meta = json.loads((case / "case.json").read_text())
    plugin, _ = from_wire({"kernel_dir": kernel_dir})
    kernel = load(lib_path, plugin.spec)
    call = _driver_api()
    call("cuInit", 0)
    dev, ctx = ctypes.c_int(), ctypes.c_void_p()
    call("cuDeviceGet", ctypes.byref(dev), 0)
    # The primary context is the one the library's CUDA runtime picks up.
    call("cuDevicePrimaryCtxRetain", ctypes.byref(ctx), dev)
    call("cuCtxSetCurrent", ctx)
    ptrs, host = {}, {}
    for name, t in meta["tensors"].items():
        host[name] = ctypes.create_string_buffer((case / f"{name}.bin").read_bytes(), t["nbytes"])
        ptr = ctypes.c_uint64()
        call("cuMemAlloc_v2", ctypes.byref(ptr), t["nbytes"])
        call("cuMemcpyHtoD_v2", ptr.value, host[name], t["nbytes"])
        ptrs[name] = ptr.value
    rc = kernel.launch(ptrs, meta["shape"], None)
    if rc != 0:
        print(f"{kernel.spec.SYMBOL} returned {cuda_error_name(rc)} ({rc})", file=sys.stderr)
        return 2
    call("cuCtxSynchronize")
    for name in meta["outputs"]:
        call("cuMemcpyDtoH_v2", host[name], ptrs[name], meta["tensors"][name]["nbytes"])
        (case / f"{name}.out").write_bytes(host[name].raw)
    for ptr in ptrs.values():
        call("cuMemFree_v2", ptr)
    return 0


# ---- cases: inputs made, and outputs checked, by this process (torch on the CPU) -------------

def write_case(spec, shape, seed, folder):
    """Save one seeded set of inputs (`out` tensors NaN-poisoned, inout tensors as made) as
    raw bytes in `folder`; returns the tensors, which stay as they are: the reference of
    check_case reads the inout tensors' original contents from them."""
    import torch

    from ablate.gpu.check import poisoned_inputs

    folder.mkdir(parents=True, exist_ok=True)
    tensors = poisoned_inputs(spec, shape, seed, "cpu")
    meta = {"shape": shape, "outputs": list(spec.OUTPUTS), "tensors": {}}
    for name, t in tensors.items():
        data = t.contiguous().view(-1).view(torch.uint8).numpy().tobytes()
        (folder / f"{name}.bin").write_bytes(data)
        meta["tensors"][name] = {"dtype": str(t.dtype).removeprefix("torch."), "shape": list(t.shape),
                                 "nbytes": len(data)}
    (folder / "case.json").write_text(json.dumps(meta))
    return tensors


def check_case(spec, tensors, folder, shape):
    """The driver's outputs in `folder` against the reference (run on `tensors`, the inputs as
    written, inout tensors included): None when right, else why."""
    import torch

    from ablate.gpu.check import compare

    meta = json.loads((folder / "case.json").read_text())
    got = dict(tensors)
    for name in spec.OUTPUTS:
        path = folder / f"{name}.out"
        if not path.exists():
            return [f"the driver wrote no output {name}"]
        t = meta["tensors"][name]
        raw = torch.frombuffer(bytearray(path.read_bytes()), dtype=torch.uint8)
        got[name] = raw.view(getattr(torch, t["dtype"])).reshape(t["shape"])
    before = {name: tensors[name] for name in spec.INOUTS}  # as written to the case: unlaunched
    result = compare(spec, got, shape, spec.tolerance(shape), before)
    return None if result["ok"] else [f"wrong output: {result['error']}"]


# ---- the runner: build, sanitize, report ----------------------------------------------------

def check_device():
    """Fail with one clear line when there is no CUDA device to sanitize on."""
    try:
        call = _driver_api()
        call("cuInit", 0)
        count = ctypes.c_int()
        call("cuDeviceGetCount", ctypes.byref(count))
    except (OSError, RuntimeError) as e:
        raise SystemExit(f"no CUDA device: compute-sanitizer needs a GPU ({e})")
    if count.value < 1:
        raise SystemExit("no CUDA device: compute-sanitizer needs a GPU")


def find_sanitizer(nvcc="nvcc"):
    """compute-sanitizer from PATH, else from the CUDA toolkit that holds nvcc."""
    found = shutil.which("compute-sanitizer")
    if found:
        return found
    nvcc_path = shutil.which(nvcc)
    if nvcc_path:
        bin_dir = Path(nvcc_path).resolve().parent
        for candidate in (bin_dir / "compute-sanitizer",
                          bin_dir.parent / "compute-sanitizer" / "compute-sanitizer"):
            if candidate.is_file():
                return str(candidate)
    raise SystemExit("compute-sanitizer not found on PATH nor beside nvcc; "
                     "pass --sanitizer /path/to/compute-sanitizer")


def pathology_names(plugin):
    """Every pathology of the kernel, the base (`none`) first."""
    return sorted(plugin.options("pathology"), key=lambda n: n != "none")


def build_pathologies(plugin, names, overrides=(), kernel_path=()):
    """Compose the app's config for each pathology and build them all in one ninja run, less
    those the kernel declares not applicable (kernel.not_applicable), which a sweep never
    builds either: cutlass_gemm's regs_capped is one that ptxas refuses after minutes. A
    tunable's neighbour that needs more shared memory or threads a block than the arch allows
    is not applicable too, as in a sweep (ablate.pipeline.over_limits): it cannot launch; and so
    is one that does not compile (quack_rmsnorm's num_threads 64 at hidden 8192, H200 2026-12-02).

    Returns (the first's job, {pathology name: BuildResult}, {pathology name: why it is
    declared not applicable}).
    """
    from ablate.build.compile import build
    from ablate.pipeline import job_of
    from ablate.pipeline import cannot_launch, tuned_only

    # static: the variants built on the default shape's configuration, no candidate timed first
    cfgs = {n: plugins.compose(plugin.name, [f"pathology={n}", "mode=static", *overrides], kernel_path) for n in names}
    jobs = {n: job_of(c) for n, c in cfgs.items()}
    declared = {n: "; ".join(j.opted_out.values()) for n, j in jobs.items() if j.opted_out}
    built = [n for n in names if n not in declared]
    first = jobs[names[0]]
    results = build([jobs[n].variant for n in built], first.build, plugin, ROOT) if built else {}
    results = {n: results[jobs[n].variant.name] for n in built}
    for n, result in list(results.items()):  # a tunable's neighbour over the arch's limits, or one that
        why = (cannot_launch(jobs[n].variant, result, plugin.spec)  # does not compile: as a sweep says
               or (not result.ok and tuned_only(jobs[n].variant)
                   and f"this neighbour does not compile (log: {result.log_path})"))
        if why:
            declared[n] = why.removeprefix("not applicable: ")
            del results[n]
    return first, results, declared


def build_candidates(plugin, names, overrides=(), kernel_path=()):
    """The base built on each of `names` (candidates of the kernel's CANDIDATES), in one ninja run:
    {none@<candidate>: BuildResult}."""
    from ablate.build.compile import build
    from ablate.job import candidates
    from ablate.pipeline import job_of

    job = job_of(plugins.compose(plugin.name, ["pathology=none", "mode=static", *overrides], kernel_path))
    variants = [candidates.base_on(job.base, plugin.spec, n) for n in names]
    results = build(variants, job.build, plugin, ROOT)
    return {v.name: results[v.name] for v in variants}


def not_run_at(plugin, name, shapes, build=None, candidate=None):
    """{index: why} of the shapes where pathology `name` is not run, as a sweep runs no job there
    (the base runs everywhere): the kernel's spec says it does not apply (spec.not_applicable; on
    `candidate`, the configuration the build holds, where the kernel declares CANDIDATES),
    or the instance the shape runs cannot launch in the pathology's `build` (pipeline.cannot_fit:
    more registers, shared memory or threads a block than an SM holds)."""
    from ablate.build.library import variant_info
    from ablate.job.job import not_applicable_at
    from ablate.pipeline import cannot_fit

    if name == "none" or name.startswith("none@"):  # the base, on whichever configuration
        return {}
    info = variant_info(build.lib, plugin.spec, (name,)) if build is not None else None
    why = {}
    for i, shape in enumerate(shapes):
        if reason := not_applicable_at(plugin, [name], shape, candidate).get(name):
            why[i] = reason
        elif info is not None and (reason := cannot_fit(build, info, plugin.spec, shape)):
            why[i] = reason.removeprefix("not applicable: ")
    return why


def sanitize_one(sanitizer, tool, lib, kernel_dir, case, timeout_s):
    """Run the driver under one tool on a copy of a case; None when clean and right, else the
    lines that say why. Returns (problems, the copy's folder)."""
    work = Path(tempfile.mkdtemp(prefix="case-", dir=case.parent))
    for f in case.iterdir():
        shutil.copy(f, work / f.name)
    cmd = [sanitizer, "--tool", tool, "--error-exitcode", "1"]
    if tool == "memcheck":
        cmd += ["--padding", str(PADDING_BYTES)]
    cmd += [sys.executable, "-m", "ablate.tools.sanitize", "--drive", str(lib), str(kernel_dir), str(work)]
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(
        [str(ROOT), *filter(None, [os.environ.get("PYTHONPATH")])])}
    start = time.monotonic()
    try:
        proc = subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True,
                              timeout=timeout_s)
    except subprocess.TimeoutExpired:
        return [f"timed out after {timeout_s} s"], work, timeout_s
    return findings(proc.returncode, proc.stdout + proc.stderr), work, time.monotonic() - start


def findings(returncode, output):
    """None for a clean run, else the first lines that report a problem: the sanitizer's
    own, then the driver's (a wrong or failed run of the kernel is a finding too).

    A racecheck hazard counts even when the tool files it as a warning: a warning there is
    still two threads touching the same shared memory without an order.
    """
    hazards = re.search(r"RACECHECK SUMMARY: (\d+) hazard", output)
    if returncode == 0 and not (hazards and int(hazards.group(1)) > 0):
        return None
    quiet = re.compile(r"COMPUTE-SANITIZER|ERROR SUMMARY: 0 error|SUMMARY: 0 hazard|^=+\s*$")
    lines = output.splitlines()
    tool = [ln for ln in lines if ln.startswith("=========") and not quiet.search(ln)]
    driver = [ln for ln in lines if ln.strip() and not ln.startswith("=========")
              and not ln.startswith("ok: ")]
    if "Traceback (most recent call last):" in driver:  # the driver raised: its exception, not its frames
        start = driver.index("Traceback (most recent call last):")
        driver = driver[:start] + [next(ln for ln in reversed(driver) if not ln.startswith(" "))]
    return (tool + driver)[:8] or [f"exit code {returncode}, no output"]


def report(names, tools, results):
    """Markdown table: one row per variant, one column per tool, then the details."""
    lines = ["| variant | " + " | ".join(tools) + " |",
             "| --- | " + " | ".join("---" for _ in tools) + " |"]
    details = []
    for name in names:
        row = []
        for tool in tools:
            problems = results[name][tool]
            if not problems:
                row.append("clean")
                continue
            where, first = problems[0]
            more = f", {len(problems) - 1} more" if len(problems) > 1 else ""
            row.append(f"**errors** ({where}{more})")
            details.append(f"\n{name} / {tool} / {where}:\n  " + "\n  ".join(first))
        lines.append(f"| {name} | " + " | ".join(row) + " |")
    return "\n".join(lines + details)


def chosen_shapes(plugin, patterns):
    """The spec's SANITIZE_SHAPES whose label (as the report prints it) matches any of the
    comma-separated globs (all: None); an error naming a glob that matches none."""
    shapes = [plugin.spec.validate_shape(dict(s)) for s in plugin.spec.SANITIZE_SHAPES]
    if not patterns:
        return shapes
    labels = [plugin.label(s) for s in shapes]
    matched = set()
    for pattern in (p for p in patterns.split(",") if p):
        found = {i for i, label in enumerate(labels) if fnmatch.fnmatchcase(label, pattern)}
        if not found:
            raise SystemExit(f"--shapes: {pattern!r} matches no sanitizer shape of {plugin.name}; "
                             f"its shapes: {'; '.join(labels)}")
        matched |= found
    return [shapes[i] for i in sorted(matched)]


def run(args):
    try:
        plugin, kernel_path, overrides = plugins.tool_kernel(args.kernel, args.kernel_path, args.override)
    except plugins.PluginError as e:
        raise SystemExit(f"ablate.tools.sanitize: {e}")
    sanitizer = args.sanitizer or find_sanitizer()
    known = pathology_names(plugin)
    names = args.pathologies.split(",") if args.pathologies else known
    tools = args.tools.split(",")
    unknown = sorted(set(tools) - set(TOOLS))
    if unknown:
        raise SystemExit(f"unknown tool(s) {unknown}; choose from {list(TOOLS)}")
    missing = [n for n in names if n not in known]
    if missing:
        raise SystemExit(f"unknown pathology {missing} of kernel {plugin.name}; choose from {known}")
    shapes = chosen_shapes(plugin, args.shapes)
    sets = getattr(plugin.spec, "CANDIDATE_SETS", {})
    wanted = (list(sets) if args.candidates == "all" else args.candidates.split(",")) if args.candidates else []
    if args.candidates and (not sets or any(c not in sets for c in wanted)):
        raise SystemExit(f"--candidates: {args.candidates!r}: kernel {plugin.name} declares "
                         + (f"the candidates {', '.join(sets)}" if sets else "no CANDIDATES"))
    if wanted:
        names = [f"none@{c}" for c in wanted]

    check_device()
    print(f"building the variants of {plugin.name} (those it declares not applicable left out) ...",
          file=sys.stderr, flush=True)
    from hydra.errors import HydraException
    from ablate.build.compile import BuildError, unavailable
    if why := unavailable(plugin):
        raise SystemExit(why)
    try:
        if wanted:
            builds, declared, on = build_candidates(plugin, wanted, overrides, kernel_path), {}, None
        else:
            first, builds, declared = build_pathologies(plugin, names, overrides, kernel_path)
            on = first.candidate  # the configuration every pathology's build holds
    except HydraException as e:
        raise SystemExit(f"cannot compose the config (check --override): {e}")
    except ValueError as e:  # a VariantError, or another setting a job refuses
        raise SystemExit(f"bad config: {e}")
    except BuildError as e:
        raise SystemExit(f"cannot build: {e}")
    spec = plugin.spec
    results = {n: {t: [] for t in tools} for n in names}
    with tempfile.TemporaryDirectory(prefix="ablate-sanitize-") as tmp:
        cases = {}
        for i, shape in enumerate(shapes):
            folder = Path(tmp) / f"case{i}"
            cases[i] = (shape, folder, write_case(spec, shape, i, folder))
        jobs, skipped = {}, []
        with ThreadPoolExecutor(max_workers=args.jobs) as pool:
            for name in builds:
                b = builds[name]
                if b.status != "built":
                    for tool in tools:
                        results[name][tool].append(("build", [f"build failed: see {b.log_path}"]))
                    continue
                why = not_run_at(plugin, name, shapes, b, on)
                skipped += [(name, plugin.label(shapes[i]), w) for i, w in why.items()]
                for tool in tools:
                    for i, (shape, folder, _) in cases.items():
                        if i not in why:
                            jobs[(name, tool, i)] = pool.submit(sanitize_one, sanitizer, tool, b.lib,
                                                                plugin.dir, folder, args.timeout)
            which = {job: key for key, job in jobs.items()}
            for done, job in enumerate(as_completed(which), 1):
                name, tool, i = which[job]
                shape, _, tensors = cases[i]
                problems, work, seconds = job.result()
                if not problems:
                    problems = check_case(spec, tensors, work, shape)
                if problems:
                    results[name][tool].append((plugin.label(shape), problems))
                # a line as each finishes: a sweep of CUTLASS variants under racecheck runs for minutes
                print(f"[{done}/{len(jobs)}] {name} / {tool} / {plugin.label(shape)}: "
                      f"{'errors' if problems else 'clean'} ({seconds:.0f} s)", file=sys.stderr, flush=True)
    checked = list(builds)  # the names less the declared ones, in their order
    print(report(checked, tools, results))
    bad = [n for n in checked if any(results[n][t] for t in tools)]
    print(f"\n{len(checked) - len(bad)} of {len(checked)} {plugin.name} variants clean under {', '.join(tools)}"
          + (f"; errors in: {', '.join(bad)}" if bad else ""))
    for name, why in declared.items():
        print(f"not run: {name}, which kernel {plugin.name} declares not applicable: {why}")
    for name, label, why in skipped:
        print(f"not run: {name} at {label}, where it does not apply: {why}")
    return exit_status(checked, bad)


def exit_status(checked, bad) -> int:
    """The sweep's rule (ablate/sweep/outcome.py): 1, with a line saying why, where nothing
    was checked or the base (`none`) has errors; 0 where only variants have (each a result,
    reported above)."""
    if not checked:
        print("sanitize: no variant was checked", file=sys.stderr)
        return 1
    if "none" in bad:
        print("sanitize: the base (none) has errors, so the variants' findings may be its own", file=sys.stderr)
        return 1
    if any(n.startswith("none@") for n in bad):
        print("sanitize: the base has errors on a candidate: " + ", ".join(n for n in bad if n.startswith("none@")),
              file=sys.stderr)
        return 1
    return 0


def main(argv=None):
    p = argparse.ArgumentParser(prog="python -m ablate.tools.sanitize", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    plugins.add_kernel_arguments(p)
    p.add_argument("--tools", default="memcheck,racecheck",
                   help=f"comma-separated, from {','.join(TOOLS)}")
    p.add_argument("--pathologies", default=None,
                   help="comma-separated names from the kernel's pathologies (default: all, base included)")
    p.add_argument("--shapes", default=None,
                   help="comma-separated globs over the spec's sanitizer shapes as the report labels them "
                        "(default: all), e.g. 'm=37 *'")
    p.add_argument("--candidates", default=None,
                   help="sanitize the base built on each of these of the kernel's CANDIDATES (comma-separated, or "
                        "all) instead of the pathologies")
    p.add_argument("--jobs", type=int, default=4, help="sanitizer processes at a time")
    p.add_argument("--timeout", type=int, default=600, help="seconds per sanitizer process")
    p.add_argument("--sanitizer", default=None, help="path of compute-sanitizer")
    p.add_argument("--override", action="append", default=[],
                   help="Hydra override for the build, e.g. build.arch=sm_90 (repeatable)")
    p.add_argument("--drive", nargs=3, metavar=("LIB", "KERNEL_DIR", "CASE_DIR"),
                   help="(internal) run the kernel once on a saved case: what the sanitizer watches")
    args = p.parse_args(argv)
    if args.drive:
        return drive(*args.drive)
    return run(args)


if __name__ == "__main__":
    sys.exit(main())
