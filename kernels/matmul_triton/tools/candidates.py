"""matmul_triton's candidate configurations (spec.CANDIDATES) timed against cuBLAS over shapes:
the figures spec.RULES (the configuration chosen by shape) is set from.

    python kernels/matmul_triton/tools/candidates.py [--shapes 'decode_m*,odd_*,sq2k_*']
        [--candidates wide,square,...] [--replicates 2] [--samples 10] [--out FILE.json]

Every candidate is built once, ahead of time for the GPU's arch, as the base with its META
(ablate.build.compile.build: the candidates compile in parallel, one process each, all
instances). Then, per shape (names or globs of conf/shape): each candidate's output is checked
against the reference at the shape's tolerance (ablate.gpu.check: an incorrect candidate, or
one that cannot launch, is reported and not timed); the correct ones and cuBLAS
(spec.PEERS["cublas"], torch.matmul) are timed together with ablate.gpu.timing, as a sweep's
jobs and `python -m ablate benchmark` time: CUDA-graph replays of at least --min-sample-us,
inputs rotated past L2, candidates alternated, order reversed every other round; --replicates
measurements with fresh graphs, their samples pooled.

Printed per shape: each candidate's median us per launch, p10-p90 and time / cuBLAS, fastest
first, `<- chosen` beside spec.choose's pick. Then one line per shape: the chosen candidate
and the fastest, each as time / cuBLAS, and `BEATEN` where the fastest beats the choice by
more than --margin (2%): those are the shapes whose rule in spec.RULES the figures say to
change. --out writes every figure as JSON (after each shape, so a run cut short keeps what
it measured).
"""
import argparse
import fnmatch
import json
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[3]
sys.path.insert(0, str(ROOT))

KERNEL = "matmul_triton"


def shape_names(plugin, patterns):
    """The kernel's shape names that the comma-separated names or globs pick, in order."""
    known = plugin.options("shape")
    out = []
    for pattern in [p for p in patterns.split(",") if p]:
        hits = fnmatch.filter(known, pattern)
        if not hits:
            raise SystemExit(f"--shapes: {pattern!r} names no shape of {KERNEL}; choose from {', '.join(known)}")
        out += [h for h in hits if h not in out]
    return out


def load_shapes(plugin, names):
    from omegaconf import OmegaConf

    return {n: plugin.spec.validate_shape(OmegaConf.to_container(OmegaConf.load(plugin.conf / "shape" / f"{n}.yaml")))
            for n in names}


def build_candidates(plugin, names, arch, build_dir):
    """{candidate: its library, or the first error of its build}."""
    from omegaconf import OmegaConf

    from ablate.build.compile import build, first_error
    from ablate.job.variant import Variant

    spec = plugin.spec
    variants = [Variant(name=n, pathologies=(), base_meta={**spec.META, **spec.CANDIDATES[n]}) for n in names]
    results = build(variants, OmegaConf.create({"dir": str(build_dir), "arch": arch, "jobs": 0}), plugin, ROOT)
    return {n: r.lib if r.ok else f"build failed: {first_error(r.log)}" for n, r in results.items()}


def time_shape(plugin, shape, kernels, args):
    """({candidate: samples in us}, {candidate: why not timed}) at one shape, cuBLAS among them."""
    import numpy as np
    import torch

    from ablate.gpu import timing
    from ablate.gpu.check import check

    spec = plugin.spec
    ok, skipped = {}, {}
    for name, kernel in kernels.items():
        if isinstance(kernel, str):
            skipped[name] = kernel
            continue
        try:
            gate = check(kernel, shape, seed=0)
        except Exception as e:  # a launch refused: too much shared memory, no instance for the shape
            skipped[name] = f"cannot run: {str(e).splitlines()[0] if str(e) else type(e).__name__}"
            torch.cuda.synchronize()
            continue
        if not gate["ok"]:
            skipped[name] = f"incorrect: {gate['error']}"
            continue
        ok[name] = (kernel, 1)
    bench = {"samples": args.samples, "warmup": args.warmup, "min_sample_us": args.min_sample_us}
    l2 = torch.cuda.get_device_properties(torch.cuda.current_device()).L2_cache_size
    n_sets = timing.input_set_count("cold", l2, spec.bytes_moved(shape))
    pooled = {}
    for r in range(args.replicates):
        sets = timing.make_inputs(spec, shape, n_sets, 1 + r, "cuda")
        candidates, peer_skipped, optional = timing.candidates(spec, sets, shape, ok, ["cublas"])
        # a candidate whose graph cannot be captured is dropped with why, as a peer is
        samples, _, dropped = timing.measure(candidates, n_sets, bench, optional=[*optional, *ok])
        skipped.update(peer_skipped)
        skipped.update(dropped)
        for name, s in samples.items():
            pooled.setdefault(name, []).append(s)
        del sets, candidates
        torch.cuda.empty_cache()
    return {n: np.concatenate(s) for n, s in pooled.items()}, skipped


def report(name, shape, chosen, samples, skipped, margin):
    """Lines for one shape, and its summary row."""
    import numpy as np

    ref = float(np.median(samples["cublas"])) if "cublas" in samples else None
    rows = []
    for cand, s in samples.items():
        med = float(np.median(s))
        rows.append({"candidate": cand, "median_us": med, "p10_us": float(np.percentile(s, 10)),
                     "p90_us": float(np.percentile(s, 90)), "vs_cublas": med / ref if ref else None})
    rows.sort(key=lambda r: r["median_us"])
    lines = [f"## {name} ({shape['m']}x{shape['n']}x{shape['k']} {shape['dtype']})"]
    for r in rows:
        vs = f"{r['vs_cublas']:.3f}" if r["vs_cublas"] is not None else "n/a"
        mark = "  <- chosen" if r["candidate"] == chosen else ""
        lines.append(f"  {r['candidate']:<12} {r['median_us']:10.2f} us  [{r['p10_us']:.2f}, {r['p90_us']:.2f}]  "
                     f"time/cublas {vs}{mark}")
    lines += [f"  {cand:<12} not timed: {why}" for cand, why in skipped.items()]
    ours = [r for r in rows if r["candidate"] != "cublas"]
    best = ours[0] if ours else None
    pick = next((r for r in ours if r["candidate"] == chosen), None)
    summary = {"shape": name, "chosen": chosen, "chosen_vs_cublas": pick and pick["vs_cublas"],
               "best": best and best["candidate"], "best_vs_cublas": best and best["vs_cublas"],
               "beaten": bool(best and pick and best["median_us"] < pick["median_us"] * (1 - margin)),
               "chosen_not_timed": pick is None}
    return lines, rows, summary


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--shapes", default="decode_m*,odd_*,sq2k_*", help="comma-separated shape names or globs")
    p.add_argument("--candidates", default=None, help="comma-separated names of spec.CANDIDATES (default: all)")
    p.add_argument("--replicates", type=int, default=2)
    p.add_argument("--samples", type=int, default=10)
    p.add_argument("--warmup", type=int, default=3)
    p.add_argument("--min-sample-us", type=float, default=1000.0)
    p.add_argument("--margin", type=float, default=0.02, help="BEATEN where the fastest is this much faster")
    p.add_argument("--arch", default="auto", help="build.arch: auto (the GPU's) or sm_90")
    p.add_argument("--build-dir", default=str(ROOT / "runs" / "candidates" / "build"))
    p.add_argument("--out", default=None, help="write every figure here as JSON")
    p.add_argument("--build-only", action="store_true", help="build the candidates and stop (no GPU needed)")
    args = p.parse_args(argv)

    from ablate.job import plugins

    plugin = plugins.load(KERNEL)
    spec = plugin.spec
    names = [c for c in (args.candidates or ",".join(spec.CANDIDATES)).split(",") if c]
    unknown = [c for c in names if c not in spec.CANDIDATES]
    if unknown:
        raise SystemExit(f"--candidates: {unknown} are not in spec.CANDIDATES ({', '.join(spec.CANDIDATES)})")
    shapes = load_shapes(plugin, shape_names(plugin, args.shapes))
    chosen = {n: spec.choose(s) for n, s in shapes.items()}
    names += [c for c in sorted(set(chosen.values())) if c not in names]  # the choice is always timed
    t0 = time.monotonic()
    libs = build_candidates(plugin, names, args.arch, Path(args.build_dir))
    print(f"built {len(names)} candidates in {time.monotonic() - t0:.0f} s: "
          + ", ".join(f"{n} ({'ok' if not isinstance(v, str) else v})" for n, v in libs.items()), flush=True)
    if args.build_only:
        return 0

    import torch

    if not torch.cuda.is_available():
        raise SystemExit("no CUDA device: the candidates are timed on a GPU (--build-only builds them)")
    from ablate.build.library import load

    kernels = {n: v if isinstance(v, str) else load(v, spec) for n, v in libs.items()}
    out = {"gpu": torch.cuda.get_device_name(), "torch": torch.__version__, "candidates":
           {n: {**spec.META, **spec.CANDIDATES[n]} for n in names}, "shapes": {}, "summary": []}
    for name, shape in shapes.items():
        t = time.monotonic()
        samples, skipped = time_shape(plugin, shape, kernels, args)
        lines, rows, summary = report(name, shape, chosen[name], samples, skipped, args.margin)
        print("\n".join(lines) + f"\n  ({time.monotonic() - t:.1f} s)", flush=True)
        out["shapes"][name] = {"shape": shape, "rows": rows, "skipped": skipped}
        out["summary"].append(summary)
        write(args.out, out)  # after every shape: a run cut short keeps what it measured
    print("\n| shape | chosen | chosen / cuBLAS | fastest | fastest / cuBLAS | |\n| --- | --- | ---: | --- | ---: | --- |")
    for s in out["summary"]:
        def f(x):
            return "n/a" if x is None else f"{x:.3f}"
        flag = "BEATEN" if s["beaten"] else ("chosen not timed" if s["chosen_not_timed"] else "")
        print(f"| {s['shape']} | {s['chosen']} | {f(s['chosen_vs_cublas'])} | {s['best']} | "
              f"{f(s['best_vs_cublas'])} | {flag} |")
    print(f"\ntotal {time.monotonic() - t0:.0f} s on {out['gpu']}")
    if args.out:
        print(f"wrote {args.out}")
    return 0


def write(path, out):
    if path:
        Path(path).parent.mkdir(parents=True, exist_ok=True)
        Path(path).write_text(json.dumps(out, indent=1))


if __name__ == "__main__":
    sys.exit(main())
