"""A kernel's base against its peers, under the sweeps' timing protocol.

    python -m ablate.tools.benchmark [--kernel NAME] [--shapes a,b] [--peers a,b]
                               [--out FILE] [--override bench.samples=200 ...]

For each shape (the kernel's conf/shape/<name>.yaml) it first checks the base against the
kernel's reference (a wrong kernel's speed is not reported), then times the base and each of
the kernel's peers (spec.PEERS; all of them by default) with ablate.gpu.timing (CUDA-graph
replay, inputs rotated past L2, candidates alternated), against the GPU's measured ceiling
of the kernel's kind of work (spec.WORK; ablate.gpu.peaks: the device-to-device copy for
memory, the matrix product of its kind for compute; measured once per GPU and cached). It prints a markdown block for docs/benchmarks.md: per
shape and candidate the median, p10 and p90 in us per launch, TFLOP/s, GB/s, the fraction of
the ceiling, and the time ratio to each peer (< 1: faster than that peer), with the date,
GPU, torch, CUDA and the command line. `--out FILE` appends the same block to FILE (never
overwrites).
"""
import argparse
import datetime
import json
import shlex
import sys
from pathlib import Path

from ablate.job import plugins
from ablate.gpu.stats import summary
from ablate.paths import ROOT


def load_shapes(plugin, names):
    """{name: validated shape dict} for `names`; an unknown name is an error listing the choices."""
    from omegaconf import OmegaConf

    from ablate.job.job import shape_of

    choices = plugin.options("shape")
    shapes = {}
    for name in names:
        if name not in choices:
            raise SystemExit(f"unknown shape {name!r} of kernel {plugin.name}; choose from {', '.join(choices)}")
        path = plugin.conf / "shape" / f"{name}.yaml"
        try:
            shapes[name] = shape_of(plugin, OmegaConf.load(path))
        except ValueError as e:
            raise SystemExit(f"{path}: {e}")
    return shapes


def candidate_rows(plugin, shape_name, shape, samples, peers, ceiling):
    """One row per candidate ({name: samples in us}) with its statistics, rates, fraction of
    the ceiling and time ratio to each peer measured in the same run (None when absent)."""
    spec = plugin.spec
    stats = {name: summary(s, name) for name, s in samples.items()}
    rows = []
    for name, st in stats.items():
        seconds = st["median"] * 1e-6
        row = {"shape": shape_name, "candidate": name, **st,
               "tflops": spec.flops(shape) / seconds / 1e12 if spec.flops(shape) else None,
               "gbps": spec.bytes_moved(shape) / seconds / 1e9}
        rate = row["gbps"] if spec.WORK == "memory" else row["tflops"]
        row["of_peak"] = rate / ceiling if rate is not None and ceiling else None
        for peer in peers:
            ref = stats.get(peer)
            row[f"vs_{peer}"] = st["median"] / ref["median"] if ref else None
        rows.append(row)
    return rows


def markdown(plugin, rows, shapes, peers, header_lines, notes):
    """The block for docs/benchmarks.md: header lines, the table, then notes."""
    def num(x, fmt):
        return "n/a" if x is None else format(x, fmt)

    ceiling = "copy" if plugin.spec.WORK == "memory" else plugin.spec.WORK
    lines = list(header_lines) + [
        "",
        "| shape | candidate | median us | p10 us | p90 us | TFLOP/s | GB/s | of " + ceiling + " | "
        + " | ".join(f"time / {p}" for p in peers) + " |",
        "| --- | --- | ---: | ---: | ---: | ---: | ---: | ---: |" + " ---: |" * len(peers),
    ]
    for r in rows:
        lines.append(
            f"| {r['shape']} ({plugin.label(shapes[r['shape']])}) | {r['candidate']} | "
            f"{r['median']:.2f} | {r['p10']:.2f} | {r['p90']:.2f} | {num(r['tflops'], '.1f')} | "
            f"{r['gbps']:.0f} | {num(r['of_peak'], '.1%')} | "
            + " | ".join(num(r[f"vs_{p}"], ".3f") for p in peers) + " |")
    if notes:
        lines += [""] + [f"- {n}" for n in notes]
    return "\n".join(lines) + "\n"


def command_line(argv):
    return shlex.join(["python", "-m", "ablate.tools.benchmark", *argv])


def build_base(job):
    """The base variant's library (cached by ablate.build.compile when unchanged)."""
    from ablate.build.compile import BuildError, build, first_error, unavailable

    if why := unavailable(job.plugin):
        raise SystemExit(why)
    try:
        result = build([job.base], job.build, job.plugin, ROOT)[job.base.name]
    except BuildError as e:
        raise SystemExit(f"cannot build the base: {e}")
    if result.status != "built":  # one line, as a sweep's failing base (ablate/sweep/outcome.py)
        raise SystemExit(f"the base kernel failed to build: {first_error(result.log)} (log: {result.log_path})")
    return result.lib


def shape_base_job(plugin, kernel_path, overrides, shape_name, default):
    """The job whose base runs `shape_name`: the default shape's `default` where the kernel's
    base is one at every shape, else a job composed at that shape (its CANDIDATES: the fastest
    timed there, on a GPU; a Triton spec's base_meta(shape): a configuration chosen by shape)."""
    from ablate.pipeline import job_of

    by_shape = getattr(plugin.spec, "base_meta", None) is not None and plugin.language == "triton"
    if not by_shape and not getattr(plugin.spec, "CANDIDATE_SETS", None):
        return default
    cfg = plugins.compose(plugin.name, ["pathology=none", f"shape={shape_name}", *overrides], kernel_path)
    return job_of(cfg, shape_name)


def time_shape(kernel, shape, bench, peers):
    """Samples (us per launch) of the base and each peer on one shape, plus notes on peers
    that could not run it."""
    import numpy as np
    import torch
    from ablate.gpu import timing

    spec = kernel.spec
    l2 = torch.cuda.get_device_properties(torch.cuda.current_device()).L2_cache_size
    # As ablate.gpu.worker does: the check used seed, the timing seed + 1.
    n_sets = timing.input_set_count(bench.l2, l2, spec.bytes_moved(shape))
    sets = timing.make_inputs(spec, shape, n_sets, bench.seed + 1, "cuda")
    candidates, skipped, optional = timing.candidates(spec, sets, shape, {"base": (kernel, 1)}, peers)
    samples, launches, dropped = timing.measure(candidates, n_sets, bench, optional=optional)
    notes = [f"peer {p} skipped: {why}" for p, why in skipped.items()]
    if timing.RESTORE in samples:
        notes.append(f"every launch restores the inout tensors {', '.join(spec.INOUTS)}, "
                     f"{float(np.median(samples.pop(timing.RESTORE))):.2f} us of each candidate's time")
    notes += [f"{name} dropped: {why}" for name, why in dropped.items()]
    notes.append(f"{n_sets} input set(s) rotated; launches per sample: "
                 + ", ".join(f"{name} {n}" for name, n in launches.items()))
    del sets, candidates
    torch.cuda.empty_cache()
    return samples, notes


def gpu_state_now():
    """NVML readings of the GPU torch is using (clocks, temperature, throttle reasons)."""
    import torch
    from ablate.gpu import gpu_state

    props = torch.cuda.get_device_properties(torch.cuda.current_device())
    return gpu_state.read(str(getattr(props, "uuid", "") or "") or None,
                          torch.cuda.current_device())


def header_lines(plugin, bench, state, ceiling):
    import torch

    from ablate.gpu import peaks

    device = torch.cuda.current_device()
    props = torch.cuda.get_device_properties(device)
    driver = state["driver"] if state.get("available") else "unknown"
    now = datetime.datetime.now(datetime.timezone.utc)
    name, value, unit = ceiling
    work = plugin.spec.WORK
    if value is None:
        why = peaks.measured(device, kinds=(work,)).get(f"{work}_error", "not measured")
        line = f"- ceiling: none for {work} on this GPU ({why})"
    elif name == "peak_gbps":
        ways = ", ".join(f"{way} {gbps:.0f}" for way, gbps in peaks.copies(device).items())
        line = (f"- ceiling, measured in this run: device-to-device copy of 1 GiB, the best of "
                f"({ways} GB/s): {value:.0f} {unit}")
    else:
        line = f"- ceiling, measured in this run: {peaks.WHAT[work]} (torch, {peaks.MATMUL_N}^3) {value:.0f} {unit}"
    return [
        f"### {plugin.name}: base vs its peers, {now:%Y-%m-%d %H:%M} UTC",
        "",
        f"- GPU: {props.name} ({props.multi_processor_count} SMs, "
        f"{props.L2_cache_size / 2**20:.0f} MiB L2), driver {driver}",
        f"- torch {torch.__version__}, CUDA {torch.version.cuda}, "
        f"cuDNN {torch.backends.cudnn.version()}",
        line,
        f"- protocol: CUDA-graph replay of >= {bench.min_sample_us} us per sample, "
        f"L2 {bench.l2}, {bench.samples} samples after {bench.warmup} warm-up replays, "
        "candidates alternated (order reversed every other round); times are us per launch",
    ]


def state_line(when, state):
    if not state.get("available"):
        return f"GPU state {when}: unavailable ({state.get('error')})"
    return (f"GPU state {when}: SM clock {state['sm_clock_mhz']} of {state['sm_clock_max_mhz']} MHz, "
            f"{state['temperature_c']} C, {state['power_w']} W, "
            f"throttle reasons {state['throttle_reasons'] or 'none'}")


def run(args, argv):
    from hydra.errors import HydraException

    try:
        plugin, kernel_path, overrides = plugins.tool_kernel(args.kernel, args.kernel_path, args.override)
        cfg = plugins.compose(plugin.name, ["pathology=none", *overrides], kernel_path, return_hydra_config=True)
    except plugins.PluginError as e:
        raise SystemExit(f"ablate.tools.benchmark: {e}")
    except HydraException as e:
        raise SystemExit(f"cannot compose the config (check --override): {e}")
    from ablate.pipeline import job_of
    try:
        job = job_of(cfg, cfg.hydra.runtime.choices.shape)
    except ValueError as e:
        raise SystemExit(str(e))
    known = list(getattr(plugin.spec, "PEERS", {}))
    peers = [p for p in args.peers.split(",") if p] if args.peers is not None else known
    unknown = [p for p in peers if p not in known]
    if unknown:
        raise SystemExit(f"unknown peer(s) {unknown} of kernel {plugin.name}; choose from {known}")
    names = [s for s in args.shapes.split(",") if s] if args.shapes else [cfg.hydra.runtime.choices.shape]
    shapes = load_shapes(plugin, names)

    import torch
    if not torch.cuda.is_available():
        raise SystemExit("no CUDA device: the benchmark times kernels on a GPU")
    from ablate.gpu import peaks
    from ablate.gpu.check import check
    from ablate.build.library import load

    kernels = {}  # library -> its loaded kernel: the base is built for each shape (shape_base_job)
    peaks.use_dir(job.peaks_dir)
    before = gpu_state_now()
    ceiling = peaks.peak(plugin.spec.WORK, torch.cuda.current_device())
    header = header_lines(plugin, cfg.bench, before, ceiling)
    rows, notes = [], [state_line("before", before)]
    for name, shape in shapes.items():
        here = shape_base_job(plugin, kernel_path, overrides, name, job)
        lib = build_base(here)
        kernel = kernels.setdefault(str(lib), load(lib, plugin.spec))
        if here.failed:
            raise SystemExit(f"the base cannot run {name}: {here.failed}")
        if here.candidate is not None:  # which of the kernel's configurations this shape's base is
            notes.append(f"{name}: base {here.candidate} ("
                         + (f"the fastest of {len(here.tuned['times_us'])} timed, {here.tuned['seconds']} s)"
                            if here.tuned else "static mode's default)"))
        elif here.base.base_meta:  # a configuration chosen by shape: which one this shape's base is
            notes.append(f"{name}: base META {json.dumps(here.base.base_meta, sort_keys=True)}")
        gate = check(kernel, shape, cfg.bench.tolerance, seed=cfg.bench.seed)
        if not gate["ok"]:
            raise SystemExit(f"the base is incorrect on {name} ({plugin.label(shape)}): "
                             f"{gate['error']}; refusing to report its speed")
        samples, shape_notes = time_shape(kernel, shape, cfg.bench, peers)
        rows += candidate_rows(plugin, name, shape, samples, peers, ceiling[1])
        notes.append(f"{name}: base rel err {gate['rel_err']:.2e}")
        notes += [f"{name}: {n}" for n in shape_notes]
    notes.append(state_line("after", gpu_state_now()))
    header.append(f"- command: `{command_line(argv)}`")
    text = markdown(plugin, rows, shapes, peers, header, notes)
    print(text)
    if args.out:
        out = Path(args.out)
        out.parent.mkdir(parents=True, exist_ok=True)
        separator = "\n" if out.exists() and out.stat().st_size else ""
        with out.open("a") as f:  # append: what an earlier run wrote stays
            f.write(separator + text)
        print(f"appended to {out}")
    return 0


def main(argv=None):
    argv = sys.argv[1:] if argv is None else list(argv)
    p = argparse.ArgumentParser(prog="python -m ablate.tools.benchmark", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    plugins.add_kernel_arguments(p)
    p.add_argument("--shapes", default=None,
                   help="comma-separated names from the kernel's conf/shape (default: its default shape)")
    p.add_argument("--peers", default=None,
                   help="comma-separated peers to time beside the base (default: all of the kernel's)")
    p.add_argument("--out", default=None, help="append the markdown block to this file")
    p.add_argument("--override", action="append", default=[],
                   help="Hydra override of the app's config, e.g. bench.samples=200 (repeatable)")
    return run(p.parse_args(argv), argv)


if __name__ == "__main__":
    sys.exit(main())
