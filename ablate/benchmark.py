"""The base kernel against PyTorch SDPA's backends, under the sweeps' timing protocol.

    python -m ablate.benchmark [--shapes s512,s4k] [--backends flash,cudnn,efficient]
                               [--out FILE] [--override bench.samples=200 ...]

For each shape (conf/shape/<name>.yaml) it first checks the base against the float32
reference (a wrong kernel's speed is not reported), then times the base and each SDPA
backend with ablate.timing (CUDA-graph replay, inputs rotated past L2, candidates
alternated), and prints a markdown block for docs/benchmarks.md: per shape and candidate the
median, p10 and p90 in us per launch, TFLOP/s, and the time ratio to FLASH and to CUDNN
(< 1: faster than that backend), with the date, GPU, torch, CUDA and the command line.
`--out FILE` appends the same block to FILE (never overwrites).
"""
import argparse
import datetime
import shlex
import sys
from pathlib import Path

from omegaconf import OmegaConf

from ablate.shapes import bytes_moved, flops, validate_shape
from ablate.stats import summary

ROOT = Path(__file__).resolve().parents[1]
CONF = ROOT / "conf"
REFERENCES = ("flash", "cudnn")  # the ratio columns


def load_shapes(names, head_dims, conf_dir=CONF):
    """{name: validated shape dict} for `names`; an unknown name is an error listing the choices."""
    choices = sorted(p.stem for p in (conf_dir / "shape").glob("*.yaml"))
    shapes = {}
    for name in names:
        if name not in choices:
            raise SystemExit(f"unknown shape {name!r}; choose from {', '.join(choices)}")
        try:
            shapes[name] = validate_shape(OmegaConf.load(conf_dir / "shape" / f"{name}.yaml"),
                                          head_dims)
        except ValueError as e:
            raise SystemExit(f"conf/shape/{name}.yaml: {e}")
    return shapes


def candidate_rows(shape_name, shape, samples):
    """One row per candidate ({name: samples in us}) with its statistics and its time
    ratio to each reference backend measured in the same run (None when absent)."""
    stats = {name: summary(s, name) for name, s in samples.items()}
    rows = []
    for name, st in stats.items():
        row = {"shape": shape_name, "candidate": name, **st,
               "tflops": flops(shape) / (st["median"] * 1e-6) / 1e12}
        for ref in REFERENCES:
            ref_stats = stats.get(f"sdpa_{ref}")
            row[f"vs_{ref}"] = st["median"] / ref_stats["median"] if ref_stats else None
        rows.append(row)
    return rows


def describe_shape(shape):
    s = shape
    return (f"B={s['batch']} H={s['heads']} S={s['seq']} D={s['head_dim']}"
            + (" causal" if s["causal"] else ""))


def markdown(rows, shapes, header_lines, notes):
    """The block for docs/benchmarks.md: header lines, the table, then notes."""
    def ratio(x):
        return "n/a" if x is None else f"{x:.3f}"

    lines = list(header_lines) + [
        "",
        "| shape | candidate | median us | p10 us | p90 us | TFLOP/s | time / FLASH | time / CUDNN |",
        "| --- | --- | ---: | ---: | ---: | ---: | ---: | ---: |",
    ]
    for r in rows:
        lines.append(
            f"| {r['shape']} ({describe_shape(shapes[r['shape']])}) | {r['candidate']} | "
            f"{r['median']:.2f} | {r['p10']:.2f} | {r['p90']:.2f} | {r['tflops']:.1f} | "
            f"{ratio(r['vs_flash'])} | {ratio(r['vs_cudnn'])} |")
    if notes:
        lines += [""] + [f"- {n}" for n in notes]
    return "\n".join(lines) + "\n"


def command_line(argv):
    return shlex.join(["python", "-m", "ablate.benchmark", *argv])


def build_base(cfg):
    """The base variant's library (cached by ablate.build when unchanged)."""
    from ablate.build import BuildError, build
    from ablate.variant import VariantError, variant_from_cfg

    try:
        variant = variant_from_cfg(cfg.pathology)
        result = build([variant], cfg.build, cfg.kernel, ROOT)[variant.name]
    except (VariantError, BuildError) as e:
        raise SystemExit(f"cannot build the base: {e}")
    if result.status != "built":
        raise SystemExit(f"the base kernel failed to build:\n{result.log}")
    return result.lib


def time_shape(kernel, shape, bench, backends):
    """Samples (us per launch) of the base and each SDPA backend on one shape, plus notes
    on backends that could not run it."""
    import torch
    from ablate import timing

    l2 = torch.cuda.get_device_properties(torch.cuda.current_device()).L2_cache_size
    # As ablate.worker does: one set is q, k, v, o; the check used seed, timing seed + 1.
    n_sets = timing.input_set_count(bench.l2, l2, bytes_moved(shape))
    sets = timing.make_inputs(shape, n_sets, bench.seed + 1, "cuda")
    candidates = {"base": timing.kernel_launcher(kernel, sets, shape["causal"])}
    sdpa, skipped = timing.sdpa_launchers(sets, shape["causal"], backends)
    candidates.update({f"sdpa_{b}": launch for b, launch in sdpa.items()})
    optional = [f"sdpa_{b}" for b in sdpa]
    samples, launches, dropped = timing.measure(candidates, n_sets, bench, optional=optional)
    notes = [f"sdpa {b} skipped: {why}" for b, why in skipped.items()]
    notes += [f"{name} dropped: {why}" for name, why in dropped.items()]
    notes.append(f"{n_sets} input set(s) rotated; launches per sample: "
                 + ", ".join(f"{name} {n}" for name, n in launches.items()))
    del sets
    torch.cuda.empty_cache()
    return samples, notes


def gpu_state_now():
    """NVML readings of the GPU torch is using (clocks, temperature, throttle reasons)."""
    import torch
    from ablate import gpu_state

    props = torch.cuda.get_device_properties(torch.cuda.current_device())
    return gpu_state.read(str(getattr(props, "uuid", "") or "") or None,
                          torch.cuda.current_device())


def header_lines(bench, state):
    import torch

    props = torch.cuda.get_device_properties(torch.cuda.current_device())
    driver = state["driver"] if state.get("available") else "unknown"
    now = datetime.datetime.now(datetime.timezone.utc)
    return [
        f"### Base vs PyTorch SDPA, {now:%Y-%m-%d %H:%M} UTC",
        "",
        f"- GPU: {props.name} ({props.multi_processor_count} SMs, "
        f"{props.L2_cache_size / 2**20:.0f} MiB L2), driver {driver}",
        f"- torch {torch.__version__}, CUDA {torch.version.cuda}, "
        f"cuDNN {torch.backends.cudnn.version()}",
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
    from hydra import compose, initialize_config_dir
    from hydra.errors import HydraException

    try:
        with initialize_config_dir(config_dir=str(CONF), version_base=None):
            cfg = compose("config", overrides=["pathology=none", *args.override])
    except HydraException as e:
        raise SystemExit(f"cannot compose the config (check --override): {e}")
    from ablate.timing import SDPA_BACKENDS, validate_bench
    try:
        validate_bench(cfg.bench)
    except ValueError as e:
        raise SystemExit(str(e))
    backends = [b for b in args.backends.split(",") if b]
    unknown = [b for b in backends if b not in SDPA_BACKENDS]
    if unknown:
        raise SystemExit(f"unknown SDPA backend(s) {unknown}; choose from {list(SDPA_BACKENDS)}")
    shapes = load_shapes([s for s in args.shapes.split(",") if s], cfg.kernel.head_dims)

    import torch
    if not torch.cuda.is_available():
        raise SystemExit("no CUDA device: the benchmark times kernels on a GPU")
    from ablate.check import check
    from ablate.kernel import Kernel

    kernel = Kernel(build_base(cfg))
    before = gpu_state_now()
    header = header_lines(cfg.bench, before)
    rows, notes = [], [state_line("before", before)]
    for name, shape in shapes.items():
        gate = check(kernel, shape, cfg.bench.tolerance, seed=cfg.bench.seed)
        if not gate["ok"]:
            raise SystemExit(f"the base is incorrect on {name} ({describe_shape(shape)}): "
                             f"{gate['error']}; refusing to report its speed")
        samples, shape_notes = time_shape(kernel, shape, cfg.bench, backends)
        rows += candidate_rows(name, shape, samples)
        notes.append(f"{name}: base rel err {gate['rel_err']:.2e}")
        notes += [f"{name}: {n}" for n in shape_notes]
    notes.append(state_line("after", gpu_state_now()))
    header.append(f"- command: `{command_line(argv)}`")
    text = markdown(rows, shapes, header, notes)
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
    p = argparse.ArgumentParser(prog="python -m ablate.benchmark", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--shapes", default="s512,s4k", help="comma-separated names from conf/shape")
    p.add_argument("--backends", default="flash,cudnn,efficient",
                   help="SDPA backends to time beside the base (skipped if unavailable)")
    p.add_argument("--out", default=None, help="append the markdown block to this file")
    p.add_argument("--override", action="append", default=[],
                   help="Hydra override of the app's config, e.g. bench.samples=200 (repeatable)")
    return run(p.parse_args(argv), argv)


if __name__ == "__main__":
    sys.exit(main())
