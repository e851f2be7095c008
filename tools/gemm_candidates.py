"""A kernel's candidate configurations (its spec's CANDIDATES) against its first peer (cuBLAS, for
the GEMMs) over any shapes: what ablate's tuning times at a shape, shown whole.

    python tools/gemm_candidates.py [--kernel cutlass_gemm] [--shapes 'decode_*,sq4k']
                                    [--shape m=282,n=10696,k=3296,dtype=fp16 ...]
                                    [--candidates all|a,b] [--json FILE] [--build-only]
                                    [--counters] [--override bench.samples=40 ...]

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

`--counters` then reads each timed candidate's and the peer's hardware counters with Nsight
Compute, one launch each, caches flushed, at the GPU's own clocks (ablate/gpu/profile.py, as
`bench.profile=true` reads a job's base and variant), and prints them side by side: the time, the
tensor pipes', DRAM's and L2's share of their peaks, the bytes the SMs received from L2 and how
many of them came by multicast (one L2 read delivered to every CTA of a cluster), the L2's reads
behind them (fewer where multicast or the L2's request coalescer serve one read to several SMs), the
crossbar's L2 side busy: where a candidate's time goes that the peer's does not.
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


# --counters: ablate's own (the time, DRAM bytes, the speed-of-light shares) and the L2 -> SM
# crossbar's (what told m64 from cuBLAS at 896 x 1008 x 3808: the same bytes into the SMs, two
# thirds of cuBLAS's by multicast; docs/history/2026-12-03-counters.md)
CROSSBAR = {"into SMs": "l1tex__m_xbar2l1tex_read_bytes.sum",
            "multicast": "l1tex__m_xbar2l1tex_read_bytes_mem_global_op_tma_ld_dest_multicast.sum",
            # the L2's reads for the SMs (32-byte sectors): under "into SMs" by what multicast and the
            # L2's request coalescer (one read for the SMs of a GPC asking the same sector at once)
            # deliver more than once (wide_strip at 1616 x 2864 x 3296: 346 MB into SMs from 298 MB of
            # reads, from 191 MB with C stored by pointers; docs/history/2026-12-03-lrc.md)
            "L2 reads": "lts__t_sectors_srcunit_tex_op_read.sum",
            "L2 out busy": "lts__lts2xbar_cycles_active.avg.pct_of_peak_sustained_elapsed",
            "cluster": "launch__cluster_dim_x"}


def counter_metrics():
    from ablate.gpu import profile

    return sorted({*profile.OWN, *CROSSBAR.values()})


def counter_sides(record, libs):
    """The driver's sides (ablate/gpu/profile_driver.py): the timed candidates fastest first,
    each its library in `libs`, then the peer where one was timed."""
    order = sorted(record["times_us"], key=record["times_us"].get)
    peer = [{"name": record["peer"], "peer": record["peer"]}] if record.get("peer_us") else []
    return [{"name": n, "so": libs[n]} for n in order] + peer


def counter_table(found) -> list[str]:
    """The counters of each side ({name: {metric: value}}, in order) as lines of a table."""
    from ablate.gpu import profile

    cols = {"us": (profile.TIME, lambda v: f"{v / 1e3:.2f}"),
            **{k: (m, lambda v: f"{v:.1f}%") for k, m in profile.SOL.items() if k in ("tensor pipe", "DRAM", "L2")},
            "into SMs": (CROSSBAR["into SMs"], lambda v: f"{v / 1e6:.0f} MB"),
            "multicast": (CROSSBAR["multicast"], lambda v: f"{v / 1e6:.0f} MB"),
            "L2 reads": (CROSSBAR["L2 reads"], lambda v: f"{v * 32 / 1e6:.0f} MB"),
            "L2 out busy": (CROSSBAR["L2 out busy"], lambda v: f"{v:.1f}%"),
            "cluster": (CROSSBAR["cluster"], lambda v: f"{max(v, 1):.0f}")}
    rows = [["", *cols]] + [[name, *(fmt(values[m]) if values.get(m) is not None else "-" for m, fmt in cols.values())]
                            for name, values in found.items()]
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
    return ["    " + "  ".join(c.ljust(w) if i == 0 else c.rjust(w) for i, (c, w) in enumerate(zip(r, widths)))
            for r in rows]


def read_counters(job, record):
    """The counters of the record's timed candidates and its peer at the job's shape
    ({name: {metric: value}}), or the one line saying why ncu gave none."""
    from ablate.gpu import profile
    from ablate.gpu.autotune import candidate_builds

    built = candidate_builds(job, record["times_us"])  # the timing's builds, found again
    sides = counter_sides(record, {n: str(b.lib) for n, b in built.items()})
    wire = {"kernel_dir": str(job.plugin.dir), "shape": job.shape, "seed": int(job.bench.get("seed") or 0),
            "sides": sides}
    bench = {**job.bench, "ncu_timeout_s": max(float(job.bench.get("ncu_timeout_s") or 120), 20.0 * len(sides))}
    found, _, reason, _ = profile.run(wire, counter_metrics(), bench, [s["name"] for s in sides])
    return found if found is not None else reason


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
    p.add_argument("--counters", action="store_true",
                   help="then read each timed candidate's and the peer's counters with ncu, one launch each")
    p.add_argument("--override", action="append", default=[], help="Hydra override (repeatable)")
    args = p.parse_args(argv)
    from ablate.gpu.autotune import candidate_builds, measure_candidates, said_candidates

    records = {}
    for label, job in jobs(args):
        names = chosen_candidates(job.plugin.spec, args.candidates, job.shape)
        if args.build_only:
            built = candidate_builds(job, names)  # what the timing builds, so that it finds them built
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
        if args.counters:
            found = read_counters(job, record)
            if isinstance(found, str):
                print(f"  counters: none: {found}")
            else:
                record["counters"] = found
                print("  counters (ncu, one launch each, caches flushed, the GPU's clocks):")
                print("\n".join(counter_table(found)))
    if args.json:
        Path(args.json).write_text(json.dumps(records, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
