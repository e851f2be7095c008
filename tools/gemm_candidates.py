"""cutlass_gemm's candidate configurations against cuBLAS over a grid of shapes: the measurement
behind the table that chooses a configuration by shape (kernels/cutlass_gemm/base/choice.def).

    python tools/gemm_candidates.py [--shapes 'decode_*,odd_*'] [--candidates large,streamk]
                                    [--rounds 2] [--out FILE] [--json FILE] [--build-only]
                                    [--raster swizzled]
                                    [--override bench.samples=40 ...]

It builds, in one ninja run, the base (the table's choice at each shape) and one tuning build
per candidate of spec.CANDIDATES (-DABLATE_GEMM_FORCE=<index>: that configuration alone, run
at every shape). Then for each shape (globs over the kernel's conf/shape names; all of them by
default) it checks every build against the spec's FP64 reference (an incorrect or refusing
build is named and left out of that shape's timing, never reported as a speed) and times
them all with the kernel's peer, torch.matmul (cuBLAS), in one measurement under ablate's
protocol (ablate.gpu.timing, as `ablate benchmark`: CUDA-graph replay, inputs rotated past
L2, candidates alternated), `--rounds` times on fresh graphs, the samples pooled.

`--raster swizzled` builds the base and every candidate again under another of the raster seam's
walks (base/seams.cuh; the base's is Fitted, the largest swizzle up to 8 that launches no padded
tile): swizzled (Swizzled: a swizzle of 8 at every shape, the base's until the eighth session)
or row_by_row (RowByRow, no_swizzle's), named <build>_<raster>.
It prints `ablate benchmark`'s table (every build's median, p10, p90, time / torch_matmul),
then a matrix: per shape, cuBLAS's time over each build's (>= 1: as fast as cuBLAS or
faster), the best candidate, the base's choice and the wave efficiency the table reads.
`--json FILE` writes the same numbers; `--out FILE` appends the markdown. `--build-only`
builds everything and checks each tuning build runs the configuration it names, on a machine
without a GPU too.
"""
import argparse
import fnmatch
import json
import random
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

KERNEL = "cutlass_gemm"
BASE = "chosen"  # the base build's name in the tables: the table's choice at each shape


def shape_names(plugin, patterns):
    """The kernel's shape names that match any of the comma-separated globs (all: None); an
    error naming a glob that matches none."""
    names = plugin.options("shape")
    if not patterns:
        return names
    out = []
    for pattern in (p for p in patterns.split(",") if p):
        found = [n for n in names if fnmatch.fnmatchcase(n, pattern)]
        if not found:
            raise SystemExit(f"--shapes: {pattern!r} matches no shape of {plugin.name}; choose from {', '.join(names)}")
        out += [n for n in found if n not in out]
    return out


def candidate_names(spec, wanted):
    names = list(spec.CANDIDATES) if not wanted else [c for c in wanted.split(",") if c]
    unknown = [c for c in names if c not in spec.CANDIDATES]
    if unknown:
        raise SystemExit(f"--candidates: unknown {unknown}; choose from {', '.join(spec.CANDIDATES)}")
    return names


# --raster NAME: each build again under another walk of the raster seam (base/seams.cuh; the base
# takes Fitted), named with this suffix ("large_swizzled", "chosen_swizzled").
RASTERS = {"swizzled": "Swizzled", "row_by_row": "RowByRow"}


def build_names(names, raster=None):
    """The columns: each candidate, then, under --raster, the base and each candidate again."""
    return names if raster is None else names + [f"{n}_{raster}" for n in [BASE, *names]]


def variants(spec, base, names, raster=None):
    """The base and one tuning build per candidate, as variants of no pathology but a macro; under
    `raster`, the base and each candidate again with the raster seam replaced."""
    from ablate.job.variant import Variant

    def build(label, macros):
        return Variant(f"candidate_{label}", (f"candidate_{label}",), macros=macros)

    out = [base] + [build(n, {spec.FORCE_MACRO: str(spec.CANDIDATES[n])}) for n in names]
    if raster is not None:
        seam = {"ABLATE_SEAM_RASTER": RASTERS[raster]}
        out += [build(f"{BASE}_{raster}", seam)]
        out += [build(f"{n}_{raster}", {spec.FORCE_MACRO: str(spec.CANDIDATES[n]), **seam}) for n in names]
    return out


def build_all(job, names, raster=None):
    """{build name: library path} of the base and the candidates that built; lines for those that did not."""
    from ablate.build.compile import BuildError, build, first_error, unavailable

    if why := unavailable(job.plugin):
        raise SystemExit(why)
    todo = variants(job.plugin.spec, job.base, names, raster)
    try:
        results = build(todo, job.build, job.plugin, ROOT)
    except BuildError as e:
        raise SystemExit(f"cannot build: {e}")
    libs, notes = {}, []
    for v in todo:
        r = results[v.name]
        name = BASE if v.is_base else v.name.removeprefix("candidate_")
        if r.status == "built":
            libs[name] = r.lib
        else:
            notes.append(f"{name} did not build: {first_error(r.log)} (log: {r.log_path})")
    if BASE not in libs:
        raise SystemExit(f"the base did not build: {notes}")
    return libs, notes


def loaded(spec, libs):
    """{name: Kernel}; SystemExit where a tuning build runs another configuration than its name
    (spec.CANDIDATES and base/cutlass_gemm.cu's Candidate disagree)."""
    from ablate.build.library import load

    kernels = {}
    for name, lib in libs.items():
        kernel = load(lib, spec)
        configs = sorted(c["name"] for c in kernel.info()["configs"])
        config = next((name.removesuffix(f"_{r}") for r in RASTERS if name.endswith(f"_{r}")), name)
        if config != BASE and configs != sorted(f"{d}_{config}" for d in spec.DTYPES):
            raise SystemExit(f"the tuning build of {name} ({spec.FORCE_MACRO}={spec.CANDIDATES[config]}) "
                             f"reports the configurations {configs}: spec.CANDIDATES and base/cutlass_gemm.cu's "
                             "Candidate disagree")
        kernels[name] = kernel
    return kernels


def gate(kernels, shape, bench):
    """({name: Kernel} of the builds correct at the shape, [lines naming the others])."""
    from ablate.gpu.check import check

    good, notes = {}, []
    for name, kernel in kernels.items():
        try:
            result = check(kernel, shape, bench.tolerance, seed=bench.seed)
        except Exception as e:  # noqa: BLE001 - a refusal (KernelError) or a launch failure: named
            notes.append(f"{name} failed: {str(e).splitlines()[0]}")
            continue
        if result["ok"]:
            good[name] = kernel
        else:
            notes.append(f"{name} incorrect: {result['error']}")
    return good, notes


def time_shape(spec, kernels, shape, bench, peers, rounds, seed):
    """{name: samples in us} of every kernel and peer, pooled over `rounds` measurements of
    them all together (fresh graphs, the candidates in a new order each round)."""
    import numpy as np
    import torch

    from ablate.gpu import timing

    l2 = torch.cuda.get_device_properties(torch.cuda.current_device()).L2_cache_size
    n_sets = timing.input_set_count(bench.l2, l2, spec.bytes_moved(shape))
    sets = timing.make_inputs(spec, shape, n_sets, bench.seed + 1, "cuda")
    pooled, notes = {}, []
    order = list(kernels)
    for r in range(rounds):
        random.Random(seed + r).shuffle(order)
        candidates, skipped, optional = timing.candidates(spec, sets, shape, {n: (kernels[n], 1) for n in order}, peers)
        notes += [f"peer {p} skipped: {why}" for p, why in skipped.items()]
        samples, _, dropped = timing.measure(candidates, n_sets, bench, optional=optional)
        notes += [f"{name} dropped: {why}" for name, why in dropped.items()]
        for name, s in samples.items():
            pooled[name] = np.concatenate([pooled[name], s]) if name in pooled else s
        del candidates
    del sets
    torch.cuda.empty_cache()
    return pooled, sorted(set(notes))


def matrix(spec, results, names, peer):
    """Markdown: per shape, the peer's median over each build's (>= 1: as fast or faster), the
    best candidate, and the base's speed over the best's (< 1: the table picks a slower one)."""
    head = ["shape", "m", "wave eff. %", "table's pick", BASE, *names, "best", f"{BASE} / best"]
    lines = ["| " + " | ".join(head) + " |", "| --- | ---: | ---: | --- |" + " ---: |" * (len(names) + 1) + " --- | ---: |"]
    for name, r in sorted(results.items(), key=lambda item: (item[1]["shape"]["m"], item[1]["wave_efficiency"])):
        speed = r["vs_cublas"]
        ranked = sorted((s, n) for n, s in speed.items() if n != BASE)
        best = ranked[-1][1] if ranked else None
        cells = [f"**{speed[n]:.3f}**" if n == best else (f"{speed[n]:.3f}" if n in speed else "n/a")
                 for n in names]
        chosen = f"{speed[BASE]:.3f}" if BASE in speed else "n/a"
        versus = f"{speed[BASE] / speed[best]:.3f}" if BASE in speed and best else "n/a"
        lines.append(f"| {name} | {r['shape']['m']} | {r['wave_efficiency']} | {r['choice']} | {chosen} | "
                     + " | ".join(cells) + f" | {best or 'n/a'} | {versus} |")
    return "\n".join([f"cuBLAS ({peer}) time / each build's time, medians (>= 1: as fast as cuBLAS or faster; "
                      "target >= 0.95), by m then wave efficiency (of 128x128 tiles on the GPU's SMs, as "
                      "base/choice.def reads it); n/a: the build failed the check at that shape (notes above)", "",
                      *lines]) + "\n"


def header_lines(bench, state, builds, rounds):
    import datetime

    import torch

    props = torch.cuda.get_device_properties(torch.cuda.current_device())
    now = datetime.datetime.now(datetime.timezone.utc)
    return [f"### {KERNEL}: candidate configurations vs cuBLAS, {now:%Y-%m-%d %H:%M} UTC", "",
            f"- GPU: {props.name} ({props.multi_processor_count} SMs, {props.L2_cache_size / 2**20:.0f} MiB L2), "
            f"driver {state['driver'] if state.get('available') else 'unknown'}",
            f"- torch {torch.__version__}, CUDA {torch.version.cuda}",
            f"- protocol: CUDA-graph replay of >= {bench.min_sample_us} us per sample, L2 {bench.l2}, "
            f"{bench.samples} samples after {bench.warmup} warm-up replays, every build and the peer alternated "
            f"in one measurement, {rounds} round(s) per shape pooled; times are us per launch",
            f"- builds: {', '.join(builds)} ({BASE}: the base, base/choice.def's pick at each shape)"]


def main(argv=None):
    argv = sys.argv[1:] if argv is None else list(argv)
    p = argparse.ArgumentParser(prog="python tools/gemm_candidates.py", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--shapes", default=None, help="comma-separated globs over the kernel's shape names (default: all)")
    p.add_argument("--candidates", default=None, help="comma-separated names of spec.CANDIDATES (default: all)")
    p.add_argument("--rounds", type=int, default=2, help="measurements of each shape, pooled (default 2)")
    p.add_argument("--out", default=None, help="append the markdown to this file")
    p.add_argument("--json", default=None, help="write every median and speed to this file")
    p.add_argument("--raster", choices=sorted(RASTERS), default=None,
                   help="also build the base and each candidate under this walk of the raster seam (swizzled: "
                        "a swizzle of 8 at every shape; row_by_row: no swizzle), named <build>_<raster>")
    p.add_argument("--build-only", action="store_true",
                   help="build the base and the candidates, check each runs the configuration it names, stop")
    p.add_argument("--override", action="append", default=[],
                   help="Hydra override of the app's config, e.g. bench.samples=40 or build.jobs=16 (repeatable)")
    args = p.parse_args(argv)
    if args.rounds < 1:
        raise SystemExit(f"--rounds must be at least 1, got {args.rounds}")

    from hydra.errors import HydraException

    from ablate.job import plugins
    from ablate.job.job import make_job
    from ablate.tools import benchmark

    try:
        plugin, kernel_path, overrides = plugins.tool_kernel(KERNEL, [], args.override)
        cfg = plugins.compose(plugin.name, ["pathology=none", *overrides], kernel_path, return_hydra_config=True)
    except plugins.PluginError as e:
        raise SystemExit(f"gemm_candidates: {e}")
    except HydraException as e:
        raise SystemExit(f"cannot compose the config (check --override): {e}")
    job = make_job(cfg, cfg.hydra.runtime.choices.shape)
    spec = plugin.spec
    names = candidate_names(spec, args.candidates)
    shapes = benchmark.load_shapes(plugin, shape_names(plugin, args.shapes))
    peers = list(spec.PEERS)

    libs, notes = build_all(job, names, args.raster)
    kernels = loaded(spec, libs)
    if args.build_only:
        print("\n".join([f"{name}: {lib}" for name, lib in libs.items()] + notes))
        return 1 if notes else 0

    import numpy as np
    import torch
    if not torch.cuda.is_available():
        raise SystemExit("no CUDA device: the candidates are timed on a GPU (--build-only builds them without one)")
    sms = torch.cuda.get_device_properties(torch.cuda.current_device()).multi_processor_count
    state = benchmark.gpu_state_now()
    header = header_lines(cfg.bench, state, list(kernels), args.rounds)
    notes.insert(0, benchmark.state_line("before", state))
    rows, results = [], {}
    for name, shape in shapes.items():
        good, shape_notes = gate(kernels, shape, cfg.bench)
        try:
            samples, timing_notes = time_shape(spec, good, shape, cfg.bench, peers, args.rounds, cfg.bench.seed)
        except Exception as e:  # noqa: BLE001 - one shape's failure (a capture refused) costs that shape alone
            notes.append(f"{name}: not timed: {type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''}")
            print(notes[-1], flush=True)
            torch.cuda.synchronize()
            continue
        rows += benchmark.candidate_rows(plugin, name, shape, samples, peers, None)
        medians = {n: float(np.median(s)) for n, s in samples.items()}
        peer = medians.get(peers[0])
        results[name] = {"shape": shape, "choice": spec.choice(shape, sms), "sms": sms,
                         "wave_efficiency": spec.wave_efficiency(shape["m"], shape["n"], sms),
                         "median_us": medians,
                         "vs_cublas": {n: peer / t for n, t in medians.items() if peer and n not in peers}}
        notes += [f"{name}: {n}" for n in shape_notes + timing_notes]
        print(f"{name}: " + ", ".join(f"{n} {v:.3f}" for n, v in results[name]["vs_cublas"].items()), flush=True)
    notes.append(benchmark.state_line("after", benchmark.gpu_state_now()))
    header.append(f"- command: `{' '.join(['python', 'tools/gemm_candidates.py', *argv])}`")
    text = (benchmark.markdown(plugin, rows, shapes, peers, header, notes) + "\n"
            + matrix(spec, results, build_names(names, args.raster), peers[0]))
    print(text)
    if args.out:
        out = Path(args.out)
        out.parent.mkdir(parents=True, exist_ok=True)
        with out.open("a") as f:
            f.write(("\n" if out.exists() and out.stat().st_size else "") + text)
        print(f"appended to {out}")
    if args.json:
        Path(args.json).write_text(json.dumps(results, indent=1) + "\n")
        print(f"wrote {args.json}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
