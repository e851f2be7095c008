"""Hardware counters of a job (`bench.profile=true`): Nsight Compute reads one launch of the
base and one of the variant, after the job was checked and timed.

Why a bench switch and not a mode: profiling adds counters to a timed job, it replaces
nothing, so the timing, its interval and the correctness gate stand as they are, and a job
where ncu cannot run is still a timed job (`ncu` says why, in one line).

The GPU child of the sweep holds a CUDA context for all its jobs, so ncu profiles a process
of its own: `python -m ablate.gpu.profile_driver` (same seeded inputs as the timing's first
input set, one untimed launch, then one launch of each inside cudaProfilerStart/Stop, base
and variant on streams of their own). ncu runs it as

    ncu --csv --page raw --print-units base --metrics M --cache-control all
        --clock-control <bench.ncu_clock_control> --profile-from-start off python -m ablate.gpu.profile_driver SPEC

- `--cache-control all`: caches flushed before each profiled launch: the timing rotates its
  inputs past L2, so each timed launch starts with the inputs out of L2 too.
- `--clock-control none` (the default of `bench.ncu_clock_control`): the GPU's own clocks,
  as in the timing. ncu's default (`base`) locks the SM and memory clocks to their base
  values, which changes the ratio of compute to memory speed that the timing saw (the H100
  runs at 1980 MHz in the sweeps; its base clock is lower). Counts of events do not depend on
  the clock; times and % of peak do, and then they match the timing's conditions.

The metric set (`metric_set`): ablate's own (the time, DRAM bytes and the speed-of-light
percentages the roofline and its table need), the kernel's default set (`kernel.counters`
in its conf/kernel/<name>.yaml) and every metric an active pathology's `counters:` names.
Each value is logged as `ncu.base.<metric>` and `ncu.variant.<metric>`, in ncu's base units
(ns, bytes, %); a call that launches several kernels sums the `.sum` metrics over them and
takes the others from its longest launch. The raw CSV is the artifact `ncu.csv`.
"""
import csv
import io
import json
import logging
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from ablate.job import counters
from ablate.paths import ROOT

log = logging.getLogger("ablate")

TIME = "gpu__time_duration.sum"
DRAM_BYTES = "dram__bytes.sum"
# Percent of ncu's peak per unit: the speed-of-light table (ablate/report/roofline.py).
SOL = {
    "tensor pipe": "sm__pipe_tensor_op_hmma_cycles_active.avg.pct_of_peak_sustained_active",
    "DRAM": "dram__throughput.avg.pct_of_peak_sustained_elapsed",
    "L2": "lts__throughput.avg.pct_of_peak_sustained_elapsed",
    "shared memory": "l1tex__data_pipe_lsu_wavefronts_mem_shared.avg.pct_of_peak_sustained_elapsed",
    "issue slots": "sm__inst_issued.avg.pct_of_peak_sustained_active",
}
OWN = (TIME, DRAM_BYTES, *SOL.values())
# Unit scales to ncu's base units, in case a version scales despite --print-units base.
_SCALE = {"ns": 1, "nsecond": 1, "us": 1e3, "usecond": 1e3, "ms": 1e6, "msecond": 1e6,
          "byte": 1, "Kbyte": 1e3, "Mbyte": 1e6, "Gbyte": 1e9}


def metric_set(kernel_counters, pathology_specs):
    """ablate's metrics, the kernel's default set and every metric the pathologies' rules
    name, sorted; ValueError naming an unknown one and where it was named."""
    kernel_counters = list(kernel_counters or [])
    counters.check_names(kernel_counters, "kernel.counters")
    names = set(OWN) | set(kernel_counters)
    for spec in pathology_specs.values():
        for block in counters.blocks((spec or {}).get("counters")):
            names |= set(counters.rules(block))
    return sorted(names)


def command(ncu, metrics, spec_path, clock_control="none"):
    return [ncu, "--csv", "--page", "raw", "--print-units", "base", "--metrics", ",".join(metrics),
            "--cache-control", "all", "--clock-control", clock_control, "--profile-from-start", "off",
            sys.executable, "-m", "ablate.gpu.profile_driver", str(spec_path)]


def _number(text, unit):
    text = text.strip().replace(",", "")
    try:
        value = float(text)
    except ValueError:
        return None
    return value * _SCALE.get(unit.strip(), 1)


def parse(text, metrics=None, names=("base", "variant")):
    """ncu's raw CSV page → {name: {metric: value}} for each of `names`: the rows grouped by
    stream, streams in launch order (the driver runs its sides in the order named: a job's
    base, then its variant). `metrics`: keep only these. ValueError when the text has no
    report or not a stream for each name."""
    lines = text.splitlines()
    start = next((i for i, line in enumerate(lines) if line.startswith('"ID"')), None)
    if start is None:
        raise ValueError("no CSV report in ncu's output")
    rows = list(csv.reader(io.StringIO("\n".join(lines[start:]))))
    header, units, data = rows[0], rows[1], [r for r in rows[2:] if len(r) == len(rows[0])]
    col = {name: i for i, name in enumerate(header)}
    streams = {}
    for row in sorted(data, key=lambda r: int(r[col["ID"]])):
        streams.setdefault(row[col["Stream"]], []).append(row)
    if len(streams) != len(names):
        raise ValueError(f"expected the launches of {len(names)} streams ({', '.join(names)}), found {len(streams)}")
    keep = [n for n in header if "__" in n and (metrics is None or n in metrics)]
    out = {}
    for who, launches in zip(names, streams.values()):
        values = [{n: _number(r[col[n]], units[col[n]]) for n in keep} for r in launches]
        longest = max(values, key=lambda v: v.get(TIME) or 0)
        out[who] = {n: (sum(v[n] for v in values if v[n] is not None) if n.endswith(".sum") else longest[n])
                    for n in keep if longest[n] is not None}
    return out


def skip_reason(returncode, output):
    """One line saying why ncu gave no counters."""
    if "ERR_NVGPUCTRPERM" in output:
        return ("no permission to the GPU's performance counters (ERR_NVGPUCTRPERM): run as root, or "
                "set NVreg_RestrictProfilingToAdminUsers=0")
    errors = [ln.strip() for ln in output.splitlines() if ln.startswith("==ERROR==")]
    if errors:
        return f"ncu failed: {errors[0][len('==ERROR=='):].strip()}"
    return f"ncu exited with code {returncode} and no report"


def run(job, metrics, bench, names=("base", "variant")):
    """(counters {name: {metric: value}} for `names` (the driver's sides: a job's base and
    variant, or the wire's "sides") or None, the CSV text or "", skip reason or None, seconds)."""
    ncu = shutil.which(str(bench.get("ncu", "ncu")))
    if ncu is None:
        return None, "", f"ncu ({bench.get('ncu', 'ncu')}) is not on the PATH", 0.0
    tic = time.perf_counter()
    with tempfile.TemporaryDirectory() as tmp:
        spec_path = Path(tmp) / "spec.json"
        spec_path.write_text(json.dumps(job))
        env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")]))}
        try:
            proc = subprocess.run(command(ncu, metrics, spec_path, bench.get("ncu_clock_control", "none")),
                                  cwd=ROOT, env=env, capture_output=True, text=True,
                                  timeout=bench.get("ncu_timeout_s", 120))
        except subprocess.TimeoutExpired:
            return None, "", f"ncu took longer than bench.ncu_timeout_s={bench.get('ncu_timeout_s', 120)} s", \
                time.perf_counter() - tic
    seconds = time.perf_counter() - tic
    output = proc.stdout + "\n" + proc.stderr
    try:
        return parse(proc.stdout, set(metrics), names), proc.stdout, None, seconds
    except ValueError as e:
        reason = skip_reason(proc.returncode, output) if proc.returncode or "==ERROR==" in output else f"ncu: {e}"
        return None, output[-20000:], reason, seconds


def add_counters(out, job, wire):
    """Profile base and variant of a checked, timed job (`job`, its libraries in `wire`:
    Job.wire) and put the counters, the rules that applied and their verdict into its result
    (`out`, a Result, changed in place and returned). Where ncu cannot run, param `ncu` says
    why and the timing stands."""
    bench, shape = job.bench, job.shape
    pathology_specs = {n: job.variant.specs.get(n) for n in job.variant.pathologies}
    metrics = metric_set(job.kernel_counters, pathology_specs)
    found, text, reason, seconds = run({**wire, "seed": bench["seed"]}, metrics, bench)
    out.metrics["profile_s"] = seconds
    if found is None:
        out.params["ncu"] = f"skipped: {reason}"
        if text:
            out.artifacts["ncu_output.txt"] = text
        log.warning("ncu: %s; counters skipped, the timing stands", reason)
        return out
    out.params["ncu"] = f"ok (clock control {bench.get('ncu_clock_control', 'none')}, caches flushed)"
    out.artifacts["ncu.csv"] = text
    for who, values in found.items():
        out.metrics.update({f"ncu.{who}.{m}": v for m, v in values.items()})
    triples, excluded = counters.applied(pathology_specs, shape)
    if triples:
        state, _ = counters.verdict(triples, found["base"], found["variant"])
        out.metrics["mechanism_confirmed"] = int(state == "confirmed")
    elif excluded:
        state = f"n/a (counters.when excludes this shape: {', '.join(excluded)})"
    else:
        state = "no rules" if pathology_specs else "the base"
    out.params["counters"] = json.dumps(triples)
    out.params["counters_verdict"] = state
    return out
