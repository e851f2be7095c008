"""RMSNorm's many-rows launch shape against torch.compile, under ablate's timing protocol.

    python docs/experiments/rmsnorm_tune.py [VECS:THREADS ...]     (on the GPU machine)

Builds the base with each (vectors per thread, threads per block) of the many-rows table
through docs/experiments/rmsnorm_launch.cuh, times it beside torch.compile's rms_norm on the
large shapes (L2 cold, CUDA graphs, candidates alternated), and prints the medians.
"""
import sys
from pathlib import Path

import numpy as np
import torch

from ablate.job import plugins
from ablate.gpu import timing
from ablate.build.compile import build
from ablate.gpu.check import check
from ablate.build.library import Kernel
from ablate.job.variant import variant_from_cfg

ROOT = Path(__file__).resolve().parents[2]
SHAPES = ["r16k_h8k", "r256k_h1k", "r4k_h16k", "r16k_h8k_bf16"]
BENCH = {"samples": 60, "warmup": 5, "min_sample_us": 2000}

plugin = plugins.load("rmsnorm")
cfg = plugins.compose("rmsnorm")
shapes = [(n, plugin.spec.validate_shape(dict(plugins.compose("rmsnorm", [f"shape={n}"]).shape))) for n in SHAPES]
configs = [tuple(map(int, a.split(":"))) for a in sys.argv[1:]] or [(4, 256), (2, 256), (2, 512), (8, 256), (4, 512), (1, 512)]
variants = {"base": variant_from_cfg({"none": None}, plugin.dir)}
for v, t in configs:
    variants[f"v{v}t{t}"] = variant_from_cfg({f"tune_v{v}_t{t}": {
        "header": "../../docs/experiments/rmsnorm_launch.cuh",
        "macros": {"ABLATE_TUNE_VECS": v, "ABLATE_TUNE_THREADS": t}}}, plugin.dir)
built = build(list(variants.values()), cfg.build, plugin, ROOT)
kernels = {}
for label, variant in variants.items():
    r = built[variant.name]
    if not r.ok:
        print(f"{label}: build failed\n{r.log[-2000:]}")
        continue
    regs = max(k["registers"] for k in r.ptxas["kernels"].values())
    kernels[label] = Kernel(r.lib, plugin.spec)
    print(f"{label}: {regs} registers at most, spills {r.ptxas['spill_bytes']} bytes")

l2 = torch.cuda.get_device_properties(0).L2_cache_size
print("\n| shape | " + " | ".join(list(kernels) + ["torch_compile"]) + " |")
for name, shape in shapes:
    for label, k in kernels.items():
        assert check(k, shape)["ok"], (label, name)
    n_sets = timing.input_set_count("cold", l2, plugin.spec.bytes_moved(shape))
    sets = timing.make_inputs(plugin.spec, shape, n_sets, 1, "cuda")
    cands = {label: timing.kernel_launcher(k, sets, shape) for label, k in kernels.items()}
    peers, _ = timing.peer_launchers(plugin.spec, sets, shape, ["torch_compile"])
    cands.update(peers)
    samples, _, _ = timing.measure(cands, n_sets, BENCH)
    med = {c: float(np.median(s)) for c, s in samples.items()}
    gb = plugin.spec.bytes_moved(shape) / 1e3
    print(f"| {name} | " + " | ".join(f"{med[c]:.1f} us {gb / med[c]:.0f} GB/s" for c in cands) + " |")
    del sets, cands, peers
    torch.cuda.empty_cache()
