"""The GEMM bases at shapes drawn at random, against cuBLAS: python tools/gemm_random_check.py OUT.json
[--kernels cutlass_gemm,matmul_triton] [--seed 62] [--count 24]. The draw (stated before it ran,
docs/history/2026-12-02-gemm-tables.md): m, n, k log-uniform in [128, 8192], rounded to multiples of
16 (both kernels take them), half FP16, half BF16. At each shape the base is worked out as a job
is (ablate.pipeline.job_of: its candidates built, checked and timed in the GPU worker; that time
is the tuning time), then timed again beside its cuBLAS peer in one measurement (ablate.gpu.timing:
CUDA graphs, alternated, inputs rotated past L2) and checked against an FP64 product. Prints a line
a shape and a SUMMARY a kernel (geomean and min of cuBLAS time / the base's, wrong results, the
tuning time); OUT.json holds every row."""
import argparse
import json
import math
import time

PEERS = {"cutlass_gemm": "torch_matmul", "matmul_triton": "cublas"}
BENCH = {"warmup": 5, "samples": 30, "min_sample_us": 2000}


def draw(seed=62, count=24):
    """The shapes: m, n, k log-uniform in [128, 8192], multiples of 16; half FP16, half BF16."""
    import numpy as np

    rng = np.random.default_rng(seed)
    dims = np.round(np.exp(rng.uniform(math.log(128), math.log(8192), size=(count, 3))) / 16).astype(int) * 16
    dtypes = rng.permutation(["fp16"] * (count // 2) + ["bf16"] * (count - count // 2))
    return [dict(m=int(m), n=int(n), k=int(k), dtype=str(d)) for (m, n, k), d in zip(dims, dtypes)]


def check(kernel, peer, shape):
    """One row: the candidate picked, cuBLAS time / the base's, the FP64 error, the tuning time."""
    import numpy as np
    import torch

    from ablate.build.compile import build
    from ablate.build.library import load
    from ablate.gpu import timing
    from ablate.job import plugins
    from ablate.paths import ROOT
    from ablate.pipeline import job_of

    start = time.monotonic()
    job = job_of(plugins.compose(kernel, ["pathology=none", "mode=gpu", f"bench.peers=[{peer}]",
                                          *(f"shape.{f}={v}" for f, v in shape.items())]))
    if job.failed:
        return {"shape": shape, "failed": job.failed}
    tune_wall_s, spec, shape = round(time.monotonic() - start, 1), job.plugin.spec, job.shape
    k = load(build([job.base], job.build, job.plugin, ROOT)[job.base.name].lib, spec)
    t = spec.make_inputs(shape, torch.Generator(device="cuda").manual_seed(7), "cuda")
    out = spec.OUTPUTS[0]
    t[out].fill_(float("nan"))
    k(t, shape)
    torch.cuda.synchronize()
    ref = t["a"].double() @ (t["b"].double().t() if kernel == "cutlass_gemm" else t["b"].double())
    err = float((t[out].double() - ref).norm() / ref.norm())
    n_sets = timing.input_set_count("cold", torch.cuda.get_device_properties(0).L2_cache_size, spec.bytes_moved(shape))
    sets = timing.make_inputs(spec, shape, n_sets, 1, "cuda")
    launchers, _, optional = timing.candidates(spec, sets, shape, {"base": (k, 1)}, [peer])
    samples, _, _ = timing.measure(launchers, n_sets, BENCH, optional=optional)
    base_us, peer_us = float(np.median(samples["base"])), float(np.median(samples[peer]))
    del sets, launchers, t
    torch.cuda.empty_cache()
    return {"shape": shape, "pick": job.candidate, "speed": peer_us / base_us, "base_us": base_us, "peer_us": peer_us,
            "rel_err_fp64": err, "correct": err <= spec.tolerance(shape), "tune_s": job.tuned.get("seconds"),
            "tune_wall_s": tune_wall_s, "timed": len(job.tuned.get("times_us", {})),
            # every candidate's median in the tuning, beside the tuning's own cuBLAS time: how near the
            # others came, where the pick misses (the 2026-12-02 run kept only their count)
            "times_us": job.tuned.get("times_us", {}), "tune_peer_us": job.tuned.get("peer_us"),
            "rejected": sorted(job.tuned.get("rejected", {}))}


def summary(kernel, rows) -> str:
    import numpy as np

    ok = [r for r in rows if "speed" in r]
    if not ok:
        return f"SUMMARY {kernel}: nothing measured"
    geo = math.exp(sum(math.log(r["speed"]) for r in ok) / len(ok))
    worst, tune = min(ok, key=lambda r: r["speed"]), [r["tune_s"] or 0 for r in ok]
    return (f"SUMMARY {kernel}: {len(ok)} of {len(rows)} shapes; geomean {geo:.3f} of cuBLAS's speed, min "
            f"{worst['speed']:.3f} at {worst['shape']}; {sum(not r['correct'] for r in ok)} wrong; tuning "
            f"{sum(tune):.0f} s in all (median {np.median(tune):.1f} s a shape)")


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("out", help="the JSON file of every row")
    ap.add_argument("--kernels", default=",".join(PEERS), help=f"comma-separated, of {', '.join(PEERS)}")
    ap.add_argument("--seed", type=int, default=62)
    ap.add_argument("--count", type=int, default=24)
    args = ap.parse_args(argv)
    kernels = args.kernels.split(",")
    if unknown := [k for k in kernels if k not in PEERS]:
        raise SystemExit(f"--kernels: {unknown} not among {', '.join(PEERS)}")
    shapes, rows = draw(args.seed, args.count), {}
    for kernel in kernels:
        rows[kernel] = []
        for s in shapes:
            row = check(kernel, PEERS[kernel], s)
            rows[kernel].append(row)
            label = f"{s['m']}x{s['n']}x{s['k']} {s['dtype']}"
            print(f"{kernel:13s} {label:24s} " + (f"FAILED {row['failed']}" if "failed" in row else
                  f"{row['pick']:14s} speed {row['speed']:.3f}  err {row['rel_err_fp64']:.2e}"
                  f"{'' if row['correct'] else ' WRONG'}  tuned {row['tune_s']} s ({row['timed']} timed)"), flush=True)
            with open(args.out, "w") as f:
                json.dump({"seed": args.seed, "shapes": shapes, "rows": rows}, f, indent=1)
        print(summary(kernel, rows[kernel]), flush=True)


if __name__ == "__main__":
    main()
