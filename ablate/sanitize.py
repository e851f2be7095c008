"""compute-sanitizer over the base kernel and every pathology, on a small shape.

    python -m ablate.sanitize [--tools memcheck,racecheck] [--pathologies a,b] [--seq 333]

builds every variant (ablate.build), runs `compute-sanitizer --tool X --error-exitcode 1` on a
tiny driver for each head dim, causal and not, prints a variant x tool table (clean, or the
first error lines) and exits non-zero if anything was found. The driver is this module too:

    python -m ablate.sanitize --drive LIB D CAUSAL S

runs the kernel once (B=1, H=2) and checks its output against a float32 reference. It talks to
the CUDA driver through ctypes and does not import torch: a sanitized torch process spends
most of its time loading torch's own kernels, and races or faults in those are not ours.
"""
import argparse
import ctypes
import math
import os
import re
import shutil
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
TOOLS = ("memcheck", "racecheck", "initcheck", "synccheck")
BATCH, HEADS = 1, 2
TOLERANCE = 2e-3
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


def reference(q, k, v, causal, scale):
    """float32 attention of (B, H, S, D) arrays, in numpy (the shape is small)."""
    import numpy as np
    q, k, v = (x.astype(np.float32) for x in (q, k, v))
    s = np.einsum("bhqd,bhkd->bhqk", q, k) * np.float32(scale)
    if causal:
        n = s.shape[-1]
        s = np.where(np.triu(np.ones((n, n), dtype=bool), 1), -np.inf, s)
    p = np.exp(s - s.max(axis=-1, keepdims=True))
    p /= p.sum(axis=-1, keepdims=True)
    return np.einsum("bhqk,bhkd->bhqd", p, v)


def drive(lib_path, head_dim, causal, seq):
    """Run the kernel once on fresh inputs and check its output; return the exit code."""
    try:
        return _drive(lib_path, head_dim, causal, seq)
    except (OSError, RuntimeError) as e:  # no driver, no device, a failed CUDA call
        print(f"driver failed: {e}", file=sys.stderr)
        return 2


def _drive(lib_path, head_dim, causal, seq):
    import numpy as np
    shape = (BATCH, HEADS, seq, head_dim)
    rng = np.random.default_rng([head_dim, int(causal), seq])
    q, k, v = (rng.standard_normal(shape, dtype=np.float32).astype(np.float16) for _ in range(3))
    o = np.full(shape, np.nan, dtype=np.float16)  # poisoned: rows the kernel skips stay NaN
    scale = 1.0 / math.sqrt(head_dim)

    call = _driver_api()
    call("cuInit", 0)
    dev, ctx = ctypes.c_int(), ctypes.c_void_p()
    call("cuDeviceGet", ctypes.byref(dev), 0)
    # The primary context is the one the library's CUDA runtime picks up.
    call("cuDevicePrimaryCtxRetain", ctypes.byref(ctx), dev)
    call("cuCtxSetCurrent", ctx)
    ptrs = []
    for host in (q, k, v, o):
        ptr = ctypes.c_uint64()
        call("cuMemAlloc_v2", ctypes.byref(ptr), host.nbytes)
        call("cuMemcpyHtoD_v2", ptr.value, host.ctypes.data, host.nbytes)
        ptrs.append(ptr.value)

    lib = ctypes.CDLL(str(lib_path))
    lib.ablate_attention_fwd.restype = ctypes.c_int
    lib.ablate_attention_fwd.argtypes = [ctypes.c_void_p] * 4 + [ctypes.c_int] * 5 + [
        ctypes.c_float, ctypes.c_void_p]
    rc = lib.ablate_attention_fwd(*ptrs, BATCH, HEADS, seq, head_dim, int(causal), scale, None)
    if rc != 0:
        print(f"ablate_attention_fwd returned CUDA error {rc}", file=sys.stderr)
        return 2
    call("cuCtxSynchronize")
    call("cuMemcpyDtoH_v2", o.ctypes.data, ptrs[3], o.nbytes)
    for ptr in ptrs:
        call("cuMemFree_v2", ptr)

    ref = reference(q, k, v, causal, scale)
    if not np.isfinite(o).all():
        print(f"output has {int((~np.isfinite(o)).sum())} non-finite values", file=sys.stderr)
        return 3
    rel_err = float(np.linalg.norm(o.astype(np.float32) - ref) / np.linalg.norm(ref))
    if rel_err >= TOLERANCE:
        print(f"rel err {rel_err:.3g} >= {TOLERANCE}", file=sys.stderr)
        return 3
    print(f"ok: D={head_dim} causal={int(causal)} S={seq} rel err {rel_err:.2e}")
    return 0


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


def pathology_names(conf_dir=ROOT / "conf"):
    """Every pathology in conf/pathology, the base (`none`) first."""
    names = sorted(p.stem for p in (conf_dir / "pathology").glob("*.yaml"))
    return sorted(names, key=lambda n: n != "none")


def build_pathologies(names, overrides=()):
    """Compose the app's config for each pathology and build them all in one ninja run.

    Returns (cfg of the first, {pathology name: BuildResult}).
    """
    from hydra import compose, initialize_config_dir
    from ablate.build import build
    from ablate.variant import variant_from_cfg

    with initialize_config_dir(config_dir=str(ROOT / "conf"), version_base=None):
        cfgs = {n: compose("config", overrides=[f"pathology={n}", *overrides]) for n in names}
    variants = {n: variant_from_cfg(c.pathology) for n, c in cfgs.items()}
    cfg = cfgs[names[0]]
    results = build(list(variants.values()), cfg.build, cfg.kernel, ROOT)
    return cfg, {n: results[variants[n].name] for n in names}


def sanitize_one(sanitizer, tool, lib, head_dim, causal, seq, timeout_s):
    """Run the driver under one tool; return None when clean, else the lines that say why."""
    cmd = [sanitizer, "--tool", tool, "--error-exitcode", "1"]
    if tool == "memcheck":
        cmd += ["--padding", str(PADDING_BYTES)]
    cmd += [sys.executable, "-m", "ablate.sanitize", "--drive", str(lib), str(head_dim),
            str(int(causal)), str(seq)]
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(
        [str(ROOT), *filter(None, [os.environ.get("PYTHONPATH")])])}
    try:
        proc = subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True,
                              timeout=timeout_s)
    except subprocess.TimeoutExpired:
        return [f"timed out after {timeout_s} s"]
    return findings(proc.returncode, proc.stdout + proc.stderr)


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


def run(args):
    sanitizer = args.sanitizer or find_sanitizer()
    names = args.pathologies.split(",") if args.pathologies else pathology_names()
    tools = args.tools.split(",")
    unknown = sorted(set(tools) - set(TOOLS))
    if unknown:
        raise SystemExit(f"unknown tool(s) {unknown}; choose from {list(TOOLS)}")
    known = set(pathology_names())
    missing = [n for n in names if n not in known]
    if missing:
        raise SystemExit(f"unknown pathology {missing}; choose from {sorted(known)}")
    if args.seq < 1:
        raise SystemExit(f"--seq must be >= 1, got {args.seq}")

    check_device()
    from hydra.errors import HydraException
    from ablate.build import BuildError
    from ablate.variant import VariantError
    try:
        cfg, builds = build_pathologies(names, args.override)
    except HydraException as e:
        raise SystemExit(f"cannot compose the config (check --override): {e}")
    except VariantError as e:
        raise SystemExit(f"bad pathology config: {e}")
    except BuildError as e:
        raise SystemExit(f"cannot build: {e}")
    head_dims = list(cfg.kernel.head_dims)
    results = {n: {t: [] for t in tools} for n in names}
    jobs = {}
    with ThreadPoolExecutor(max_workers=args.jobs) as pool:
        for name in names:
            b = builds[name]
            if b.status != "built":
                for tool in tools:
                    results[name][tool].append(("build", [f"build failed: see {b.log_path}"]))
                continue
            for tool in tools:
                for d in head_dims:
                    for causal in (False, True):
                        jobs[(name, tool, d, causal)] = pool.submit(
                            sanitize_one, sanitizer, tool, b.lib, d, causal, args.seq,
                            args.timeout)
        for (name, tool, d, causal), job in jobs.items():
            problems = job.result()
            if problems:
                results[name][tool].append((f"D={d} causal={int(causal)} S={args.seq}", problems))
    print(report(names, tools, results))
    bad = [n for n in names if any(results[n][t] for t in tools)]
    print(f"\n{len(names) - len(bad)} of {len(names)} variants clean under {', '.join(tools)}"
          + (f"; errors in: {', '.join(bad)}" if bad else ""))
    return 1 if bad else 0


def main(argv=None):
    p = argparse.ArgumentParser(prog="python -m ablate.sanitize", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--tools", default="memcheck,racecheck",
                   help=f"comma-separated, from {','.join(TOOLS)}")
    p.add_argument("--pathologies", default=None,
                   help="comma-separated names from conf/pathology (default: all, base included)")
    p.add_argument("--seq", type=int, default=333,
                   help="sequence length S: small (racecheck is slow), not a tile multiple, "
                        "and long enough that the K/V ring in shared memory wraps around "
                        "(3+ key tiles at 128 keys), where a missing barrier would race")
    p.add_argument("--jobs", type=int, default=4, help="sanitizer processes at a time")
    p.add_argument("--timeout", type=int, default=600, help="seconds per sanitizer process")
    p.add_argument("--sanitizer", default=None, help="path of compute-sanitizer")
    p.add_argument("--override", action="append", default=[],
                   help="Hydra override for the build, e.g. build.arch=sm_90 (repeatable)")
    p.add_argument("--drive", nargs=4, metavar=("LIB", "D", "CAUSAL", "S"),
                   help="(internal) run the kernel once: what the sanitizer watches")
    args = p.parse_args(argv)
    if args.drive:
        lib, d, causal, s = args.drive
        return drive(lib, int(d), bool(int(causal)), int(s))
    return run(args)


if __name__ == "__main__":
    sys.exit(main())
