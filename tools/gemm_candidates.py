"""A kernel's candidate configurations (its spec's CANDIDATES) against its first peer (cuBLAS, for
the GEMMs) over any shapes: what ablate's tuning times at a shape, shown whole.

    python tools/gemm_candidates.py [--kernel cutlass_gemm] [--shapes 'decode_*,sq4k']
                                    [--shape m=282,n=10696,k=3296,dtype=fp16 ...]
                                    [--candidates all|a,b] [--json FILE] [--build-only]
                                    [--override bench.samples=40 ...]

For each shape (globs over the kernel's conf/shape names, and `--shape` fields given outright) it
builds the base on each candidate (`--candidates`: those named, or all; by default those the
spec's candidates(shape) keeps, as the tuning does), checks each against the spec's reference (an
incorrect or refusing one is named and left out, never reported as a speed) and times them with
the peer in one measurement under ablate's protocol (ablate.gpu.timing: CUDA-graph replays, inputs
rotated past L2, candidates alternated), in the GPU worker, as a job's tuning does
(ablate/gpu/autotune.py, measure_candidates); nothing is kept. It prints per shape the pick (the
fastest, or a preferred one within bench.min_effect of it: autotune.pick), each candidate's speed
against the peer (the peer's time / the candidate's: above 1 faster) and the seconds the
measurement took. `--build-only` builds every candidate (no GPU needed).
"""
import argparse
import fnmatch
import json
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))


def shape_names(plugin, patterns):
    """The kernel's shape names that match any of the comma-separated globs (none: None); an
    error naming a glob that matches none."""
    names = plugin.options("shape")
    out = []
    for pattern in (p for p in (patterns or "").split(",") if p):
        found = [n for n in names if fnmatch.fnmatchcase(n, pattern)]
        if not found:
            raise SystemExit(f"--shapes: {pattern!r} matches no shape of {plugin.name}; choose from {', '.join(names)}")
        out += [n for n in found if n not in out]
    return out


def given_shape(text):
    """`m=282,n=10696,k=3296,dtype=fp16` as Hydra overrides of the shape's fields."""
    fields = [f for f in text.split(",") if f]
    if not fields or any("=" not in f for f in fields):
        raise SystemExit(f"--shape {text!r}: give the shape's fields as name=value,name=value")
    return [f"shape.{f}" for f in fields]


def chosen_candidates(spec, wanted, shape):
    if not getattr(spec, "CANDIDATE_SETS", None):
        raise SystemExit("the kernel declares no CANDIDATES")
    if wanted == "all":
        return list(spec.CANDIDATE_SETS)
    if wanted:
        names = [c for c in wanted.split(",") if c]
        unknown = [c for c in names if c not in spec.CANDIDATE_SETS]
        if unknown:
            raise SystemExit(f"--candidates: {unknown} are not in spec.CANDIDATES ({', '.join(spec.CANDIDATE_SETS)})")
        return names
    from ablate.job import candidates

    return candidates.timed(spec, shape)


def jobs(args):
    """(label, job at that shape) for each shape asked, mode=gpu, on the peer's first name."""
    from ablate.job import plugins
    from ablate.job.job import make_job

    try:
        plugin = plugins.load(args.kernel)
    except plugins.PluginError as e:
        raise SystemExit(f"tools/gemm_candidates.py: {e}")
    asked = [([f"shape={n}"], n) for n in shape_names(plugin, args.shapes)]
    asked += [(given_shape(s), s) for s in args.shape]
    if not asked:
        raise SystemExit("name some shapes: --shapes GLOBS or --shape m=...,n=...")
    for overrides, label in asked:
        cfg = plugins.compose(plugin.name, ["pathology=none", *overrides, *args.override])
        try:
            yield label, make_job(cfg, label)
        except ValueError as e:
            raise SystemExit(f"{label}: {e}")


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--kernel", default="cutlass_gemm")
    p.add_argument("--shapes", default=None, help="comma-separated globs over the kernel's shape names")
    p.add_argument("--shape", action="append", default=[], help="a shape's fields, m=..,n=..,k=..,dtype=.. (repeatable)")
    p.add_argument("--candidates", default=None, help="all, or comma-separated names (default: those timed at the shape)")
    p.add_argument("--json", default=None, help="write every shape's record to this file")
    p.add_argument("--build-only", action="store_true", help="build every candidate and stop (no GPU)")
    p.add_argument("--override", action="append", default=[], help="Hydra override (repeatable)")
    args = p.parse_args(argv)
    from ablate.build.compile import build
    from ablate.gpu.autotune import measure_candidates, said_candidates
    from ablate.job import candidates

    records = {}
    for label, job in jobs(args):
        names = chosen_candidates(job.plugin.spec, args.candidates, job.shape)
        if args.build_only:
            from dataclasses import replace

            variants = [replace(candidates.on(job.base, job.plugin.spec, n), name=f"none@{n}") for n in names]
            built = build(variants, job.build, job.plugin, ROOT)
            bad = [n for n, r in built.items() if not r.ok]
            print(f"{label}: {len(built) - len(bad)} of {len(built)} candidates built"
                  + (f"; failed: {', '.join(bad)}" if bad else ""))
            continue
        record = measure_candidates(job, names)
        record["peer_speed"] = {n: record["peer_us"] / t for n, t in record["times_us"].items()} \
            if record.get("peer_us") else {}
        records[label] = record
        print(f"{label}: {said_candidates(record)}")
        for n, t in sorted(record["times_us"].items(), key=lambda kv: kv[1]):
            speed = record["peer_speed"].get(n)
            print(f"    {n:22s} {t:10.2f} us" + (f"   {speed:.3f} of {record['peer']}'s speed" if speed else ""))
        for n, why in record["rejected"].items():
            print(f"    {n:22s} left out: {why}")
    if args.json:
        Path(args.json).write_text(json.dumps(records, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
