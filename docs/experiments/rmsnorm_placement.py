"""Does where the tensors lie move RMSNorm's time at the copy ceiling? The base and
torch.compile each on two sets of inputs allocated apart (a 4 GiB spacer between), all four
alternated in one process under ablate's timing protocol, at 16384 x 8192 FP16.

    python docs/experiments/rmsnorm_placement.py LIB     (on the GPU machine)
"""
import sys

import numpy as np
import torch

from ablate.job import plugins
from ablate.gpu import timing
from ablate.build.library import Kernel

spec = plugins.load("rmsnorm").spec
shape = {"rows": 16384, "hidden": 8192, "dtype": "fp16", "eps": 1e-6}
kernel = Kernel(sys.argv[1], spec)
groups = {"A": timing.make_inputs(spec, shape, 2, 1, "cuda")}
spacer = torch.empty(4 << 30, dtype=torch.uint8, device="cuda")
groups["B"] = timing.make_inputs(spec, shape, 2, 2, "cuda")
candidates = {}
for g, sets in groups.items():
    candidates[f"base@{g}"] = timing.kernel_launcher(kernel, sets, shape)
    peers, _ = timing.peer_launchers(spec, sets, shape, ["torch_compile"])
    candidates[f"torch_compile@{g}"] = peers["torch_compile"]
for repeat in range(2):
    samples, _, _ = timing.measure(candidates, 2, {"samples": 60, "warmup": 5, "min_sample_us": 2000})
    print(f"repeat {repeat}: " + ", ".join(f"{c} {np.median(s):.1f} us" for c, s in samples.items()))
