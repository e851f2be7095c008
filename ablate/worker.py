"""The GPU half of a job, run in a child process.

A variant that faults (an illegal or misaligned address leaves the CUDA context unusable)
or hangs must not take the sweep down with it, so the parent starts

    python -m ablate.worker SPEC.json RESULT.json

waits up to `bench.timeout_s`, and turns what happened into the job's result dict:
`timeout` (killed), `crashed` (died, or reported a CUDA error), `incorrect` (base or variant
failed the correctness gate; not timed) or `ok` with the timing statistics.

The spec: {"base_so": path, "variant_so": path, "shape": {batch, heads, seq, head_dim,
causal}, "bench": {the bench config}}.
"""
import json
import os
import signal
import subprocess
import sys
import tempfile
import traceback
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def result(status, params=None, metrics=None, artifacts=None, error=None):
    return {"status": status, "params": params or {}, "metrics": metrics or {},
            "artifacts": artifacts or {}, "error": error}


# ---- the parent side --------------------------------------------------------------------

def _describe_exit(code):
    if code < 0:
        try:
            return f"signal {signal.Signals(-code).name}"
        except ValueError:
            return f"signal {-code}"
    return f"exit code {code}"


def run_worker(spec, timeout_s):
    """Run the GPU half of a job in a child process and return its result dict."""
    with tempfile.TemporaryDirectory(prefix="ablate-worker-") as tmp:
        spec_path, result_path, log_path = (Path(tmp) / n for n in ("spec.json", "result.json", "worker.log"))
        spec_path.write_text(json.dumps(spec))
        with open(log_path, "w") as log:
            # Own session: on timeout the whole group is killed, whatever it started.
            proc = subprocess.Popen([sys.executable, "-m", "ablate.worker", str(spec_path), str(result_path)],
                                    cwd=ROOT, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
            try:
                code = proc.wait(timeout=timeout_s)
            except subprocess.TimeoutExpired:
                code = None
            finally:
                if proc.poll() is None:
                    os.killpg(proc.pid, signal.SIGKILL)
                    proc.wait()
        output = log_path.read_text(errors="replace")
        artifacts = {"worker.log": output}
        if code is None:
            return result("timeout", artifacts=artifacts,
                          error=f"GPU worker killed after bench.timeout_s={timeout_s} s")
        if result_path.is_file():
            out = json.loads(result_path.read_text())
            out["artifacts"] = {**out["artifacts"], **artifacts}
            return out
        tail = "\n".join(output.strip().splitlines()[-5:])
        return result("crashed", artifacts=artifacts,
                      error=f"GPU worker died ({_describe_exit(code)}) without a result; last output:\n{tail}")


# ---- the child side ---------------------------------------------------------------------

def _stat_metrics(prefix, samples, shape):
    from ablate.shapes import flops
    from ablate.stats import summary

    s = summary(samples, prefix)
    return {f"{prefix}_us": s["median"], f"{prefix}_us_p10": s["p10"], f"{prefix}_us_p90": s["p90"],
            f"{prefix}_tflops": flops(shape) / s["median"] / 1e6}


def _state_record(when, state):
    """GPU readings as flat metrics and params."""
    if not state.get("available"):
        return {}, {f"gpu_state_{when}": f"unavailable: {state.get('error')}"}
    metrics = {f"{key}_{when}": state[key] for key in
               ("sm_clock_mhz", "mem_clock_mhz", "temperature_c", "power_w") if state.get(key) is not None}
    reasons = state.get("throttle_reasons")
    params = {f"throttle_{when}": "unknown" if reasons is None else ",".join(reasons) or "none"}
    return metrics, params


def gpu_job(spec):
    """Check base and variant, then time base, variant and SDPA side by side."""
    import numpy as np
    import torch

    from ablate import gpu_state, timing
    from ablate.check import check
    from ablate.kernel import Kernel
    from ablate.shapes import bytes_moved
    from ablate.stats import slowdown

    if not torch.cuda.is_available():
        raise RuntimeError("no CUDA device visible to the GPU worker")
    shape, bench = spec["shape"], spec["bench"]
    device = torch.device("cuda", torch.cuda.current_device())
    props = torch.cuda.get_device_properties(device)
    uuid = str(getattr(props, "uuid", "") or "") or None
    before = gpu_state.read(uuid, device.index)
    base, variant = Kernel(spec["base_so"]), Kernel(spec["variant_so"])
    params = {"gpu": props.name, "torch": torch.__version__, "cuda": torch.version.cuda,
              "driver": before.get("driver", "unavailable")}
    artifacts = {}

    # The gate: both must be right before either is timed (the base too: a slowdown against
    # a wrong base means nothing).
    checks = {who: check(k, shape, bench["tolerance"], seed=bench["seed"])
              for who, k in (("base", base), ("variant", variant))}
    metrics = {"rel_err": checks["variant"]["rel_err"], "base_rel_err": checks["base"]["rel_err"]}
    failed = [f"{who} failed the correctness gate: {c['error']}" for who, c in checks.items() if not c["ok"]]
    if failed:
        return result("incorrect", params, metrics, artifacts, "; ".join(failed))

    n_sets = timing.input_set_count(bench["l2"], props.L2_cache_size, bytes_moved(shape))
    sets = timing.make_inputs(shape, n_sets, bench["seed"] + 1, device)
    causal = shape["causal"]
    candidates = {"base": timing.kernel_launcher(base, sets, causal),
                  "variant": timing.kernel_launcher(variant, sets, causal)}
    sdpa, skipped = timing.sdpa_launchers(sets, causal, bench["sdpa_backends"])
    candidates.update({f"sdpa_{name}": launch for name, launch in sdpa.items()})
    samples, launches, dropped = timing.measure(candidates, n_sets, bench,
                                                optional=[f"sdpa_{name}" for name in sdpa])
    skipped.update({name.removeprefix("sdpa_"): why for name, why in dropped.items()})
    after = gpu_state.read(uuid, device.index)

    for name, times in samples.items():
        metrics.update(_stat_metrics(name, times, shape))
    # sdpa_us: the first backend of bench.sdpa_backends that ran, the reference of record.
    ran = [b for b in bench["sdpa_backends"] if f"sdpa_{b}" in samples]
    if ran:
        ref = _stat_metrics("sdpa", samples[f"sdpa_{ran[0]}"], shape)
        metrics.update(ref)
        params["sdpa_backend"] = ran[0]
    metrics.update(slowdown(samples["base"], samples["variant"], bench["bootstrap"], bench["seed"]))
    for who in ("base", "variant"):
        metrics[f"{who}_gbps"] = bytes_moved(shape) / metrics[f"{who}_us"] / 1e3
    for when, state in (("before", before), ("after", after)):
        m, p = _state_record(when, state)
        metrics.update(m)
        params.update(p)
    params.update({"input_sets": n_sets, **{f"launches_{n}": c for n, c in launches.items()}})
    params.update({f"sdpa_{b}_skipped": why[:500] for b, why in skipped.items()})
    artifacts["samples.json"] = json.dumps({n: np.round(t, 4).tolist() for n, t in samples.items()})
    artifacts["gpu_state.json"] = json.dumps({"before": before, "after": after}, indent=1)
    return result("ok", params, metrics, artifacts)


def main(argv):
    spec_path, result_path = argv
    spec = json.loads(Path(spec_path).read_text())
    try:
        out = gpu_job(spec)
    except Exception as e:  # a CUDA error, or anything else: the parent records it as crashed
        traceback.print_exc()
        text = str(e).strip()
        out = result("crashed", error=f"{type(e).__name__}: {text.splitlines()[0] if text else ''}".strip())
    # Written whole, then renamed: a child killed mid-write leaves no half result.
    tmp = Path(result_path).with_suffix(".part")
    tmp.write_text(json.dumps(out))
    tmp.replace(result_path)
    return 0 if out["status"] != "crashed" else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
