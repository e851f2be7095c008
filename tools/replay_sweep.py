"""A sweep's GPU schedule replayed on the CPU: the real sweep (`python -m ablate -m ...`: Hydra,
the callback's composition, the jobs' records in MLflow, the pool of ablate/gpu/pool.py) over
N stand-in GPUs, whose children sleep each job's measured GPU time instead of timing it.

    python tools/replay_sweep.py --gpus 2 [--durations tools/scale-out-durations.csv] [-- ARGS]

ARGS default to tools/scale-out.sh's sweep (attention, every pathology, four shapes). The
variants must be built already in $ABLATE_TEST_BUILD_DIR/build (the tests' kept build, arch
sm_90): nothing is compiled (as_built). The durations (seconds of
GPU work per pathology and shape) come from a one-GPU sweep's log (`--derive LOG...`: the
gap between consecutive answers where the GPU was the bottleneck, else the shape's median).
The wall time is printed last; it is the CPU stand-in's, not a GPU's: compare 1 against N
stand-in GPUs on the same machine.
"""
import argparse
import csv
import datetime
import os
import re
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
DURATIONS = Path(__file__).with_name("scale-out-durations.csv")
SWEEP = ["-m", "kernel=attention", "pathology=glob(*)", "shape=s512,s1k,s2k,s4k"]
TRACE_ENV = "ABLATE_REPLAY_TRACE"  # each stand-in job's GPU, start and end, a line each
LISTING = "{i}, GPU-{i:08d}-0000-0000-0000-000000000000, stand-in GPU\n"


def stand_in(spec):
    """The GPU job of a child: sleep the job's measured GPU time; the base 10 us, the
    variant 10 us times a made-up slowdown."""
    from ablate.job.result import Result

    began = time.time()
    time.sleep(float(spec.get("replay_s", 0.0)))
    if trace := os.environ.get(TRACE_ENV):
        with open(trace, "a") as f:
            f.write(f"{os.environ.get('CUDA_VISIBLE_DEVICES')} {began:.3f} {time.time():.3f}\n")
    return Result("ok", {"replayed": True},
                  {"base_us": 10.0, "variant_us": 12.0, "slowdown": 1.2, "slowdown_lo": 1.19, "slowdown_hi": 1.21})


def derive(logs):
    """{(pathology, shape): seconds} from one-GPU sweep logs: each answer's gap to the one before,
    where it is over 0.6 s (the GPU was the bottleneck, not the parent's ~0.2 s a job), averaged
    over the logs; else the median of its shape's."""
    stamp = r"\[(\S+ \S+)\]"
    gaps, shape_of = {}, {}
    for path in logs:
        prev = key = None
        for line in open(path):
            if "Launching" in line:
                prev = None
            if m := re.match(stamp + r"\[HYDRA\] \t#\d+ : (.*)", line):
                kv = dict(x.split("=", 1) for x in m.group(2).split())
                key = (kv["pathology"], kv["shape"])
                shape_of[key] = kv["shape"]
            elif (m := re.match(stamp + r"\[ablate\]\[\w+\] - \S+ on \S+: (\w+)", line)) and key:
                t = datetime.datetime.strptime(m.group(1), "%Y-%m-%d %H:%M:%S,%f").timestamp()
                if m.group(2) == "ok":
                    gaps.setdefault(key, [])
                    if prev is not None and t - prev > 0.6:
                        gaps[key].append(t - prev)
                prev = t
    known = {k: statistics.mean(v) for k, v in gaps.items() if v}
    median = {s: statistics.median([d for k, d in known.items() if k[1] == s]) for s in set(shape_of.values())}
    return {k: round(known.get(k, median[k[1]]), 3) for k in gaps}


def load(path):
    with open(path) as f:
        return {(r["pathology"], r["shape"]): float(r["seconds"]) for r in csv.DictReader(f)}


def kept_build():
    return Path(os.environ.get("ABLATE_TEST_BUILD_DIR") or ROOT / "runs" / "build" / "tests")


def kept_nvcc():
    return kept_build() / "nvcc"  # the tests' wrapper: the libraries' names hash the command that built them


def not_built():
    raise SystemExit("replay: a variant is not built in the tests' kept build (run the tests that build it)")


def as_built():
    """The tests' kept build, taken as this checkout's: each library's sources in this checkout
    (relative paths in its depfile) dated back to before the library, so that the sweep finds
    it built (their content is in the library's name: a changed source names another one,
    which then is not built, and the replay stops)."""
    build = kept_build() / "build"
    for dep in build.glob("*.deps"):
        lib = dep.with_suffix(".so")
        if not lib.exists():
            continue
        built = lib.stat().st_mtime
        _, _, deps = dep.read_text().replace("\\\n", " ").partition(" : ")
        for path in deps.split():
            f = ROOT / path
            if not path.startswith("/") and f.is_file() and f.stat().st_mtime > built:
                os.utime(f, (built - 1, built - 1))
    return build


def busy(trace, t0):
    """Each stand-in GPU's busy seconds and when it ended its last job (from the sweep's start)."""
    if not trace.exists():
        return ""
    on = {}
    for line in trace.read_text().splitlines():
        gpu, began, ended = line.split()
        on.setdefault(gpu, []).append((float(began), float(ended)))
    start = time.time() - (time.perf_counter() - t0)
    work = sum(e - b for j in on.values() for b, e in j)
    return f" (GPU work {work:.1f} s, the control's copies among it); " + ", ".join(f"GPU {int(gpu[4:12])}: {len(j)} jobs, busy {sum(e - b for b, e in j):.1f} s, "
                            f"first at {min(b for b, _ in j) - start:.1f} s, last done at {max(e for _, e in j) - start:.1f} s"
                            for gpu, j in sorted(on.items()))


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--gpus", type=int, default=1)
    p.add_argument("--durations", default=str(DURATIONS))
    p.add_argument("--derive", nargs="+", help="write --durations from these one-GPU sweep logs, then stop")
    p.add_argument("--scale", type=float, default=1.0,
                   help="GPU times times this: where this CPU is slower than the GPU host's (its parent's "
                        "~0.4 s a job against ~0.28 s: 1.45), so that GPU and parent keep their proportions")
    p.add_argument("--store", help="the MLflow sqlite file (default: a fresh one; a real sweep's store exists already)")
    p.add_argument("--trace", help="keep the stand-in GPUs' trace (GPU, start, end of each job) here")
    p.add_argument("args", nargs="*")
    a = p.parse_args()
    if a.derive:
        with open(a.durations, "w", newline="") as f:
            w = csv.writer(f)
            w.writerow(["pathology", "shape", "seconds"])
            for (path, shape), s in sorted(derive(a.derive).items()):
                w.writerow([path, shape, s])
        return 0
    seconds = {k: s * a.scale for k, s in load(a.durations).items()}
    tmp = Path(tempfile.mkdtemp(prefix="replay-"))
    (tmp / "bin").mkdir()
    smi = tmp / "bin" / "nvidia-smi"
    smi.write_text("#!/bin/sh\ncat <<'EOF'\n" + "".join(LISTING.format(i=i) for i in range(a.gpus)) + "EOF\n")
    smi.chmod(0o755)
    os.environ["PATH"] = f"{tmp / 'bin'}{os.pathsep}{os.environ['PATH']}"
    os.environ["ABLATE_GPU_LOCK_DIR"] = str(tmp / "locks")
    os.environ["ABLATE_KEEP_WORKER_S"] = "0"
    os.environ["MLFLOW_TRACKING_URI"] = f"sqlite:///{Path(a.store).resolve() if a.store else tmp / 'mlflow.db'}"
    os.environ.pop("CUDA_VISIBLE_DEVICES", None)
    os.environ[TRACE_ENV] = str(tmp / "trace")
    sys.path.insert(0, str(ROOT))

    import atexit

    from ablate import pipeline
    from ablate.build import compile as compile_module
    from ablate.gpu import pool
    from ablate.job import job as job_module

    build = as_built()
    pipeline.gpu_available = lambda: (True, None)
    compile_module.find_ninja = not_built
    wire = job_module.Job.wire

    def timed(self, base_lib, variant_lib):
        names = [n for n in self.variant.pathologies] or ["none"]
        return {**wire(self, base_lib, variant_lib),
                "replay_s": seconds.get(("+".join(names), self.shape_name), 0.0)}

    job_module.Job.wire = timed
    pool._pool = pool.Pool("tools.replay_sweep:stand_in")
    atexit.register(pool.stop_worker)
    args = a.args or SWEEP
    sys.argv = ["ablate", *args, f"build.dir={build}", "build.arch=sm_90", f"build.nvcc={kept_nvcc()}",
                f"hydra.sweep.dir={tmp / 'sweep'}", "hydra.run.dir=" + str(tmp / "run")]
    from ablate.__main__ import cli

    t0 = time.perf_counter()
    try:
        cli()
    finally:
        wall = time.perf_counter() - t0
        print(f"replay: {a.gpus} stand-in GPU{'s' if a.gpus != 1 else ''}: {wall:.1f} s"
              f"{busy(tmp / 'trace', t0)}", flush=True)
        if a.trace and (tmp / "trace").exists():
            lines = (tmp / "trace").read_text().splitlines()
            start = time.time() - (time.perf_counter() - t0)
            Path(a.trace).write_text("".join(f"{g} {float(b) - start:.3f} {float(e) - start:.3f}\n"
                                             for g, b, e in map(str.split, lines)))
        shutil.rmtree(tmp, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
