"""Drive one RMSNorm library (and, with --peer, torch.compile's kernel) on one shape for ncu.

    ncu --clock-control none -k regex:rmsnorm_fwd --launch-skip 3 --launch-count 1 \\
        --metrics ... python docs/experiments/rmsnorm_ncu.py LIB [rows hidden] [--peer]

Each launch reads a fresh input set (L2 cold for shapes past 2x L2, as in the sweeps).
"""
import sys

import torch

from ablate.job import plugins
from ablate.gpu import timing
from ablate.build.library import Kernel

spec = plugins.load("rmsnorm").spec
args = [a for a in sys.argv[1:] if not a.startswith("--")]
rows, hidden = (int(args[1]), int(args[2])) if len(args) > 2 else (16384, 8192)
shape = {"rows": rows, "hidden": hidden, "dtype": "fp16", "eps": 1e-6}
sets = timing.make_inputs(spec, shape, 4, 0, "cuda")
kernel = Kernel(args[0], spec)
compiled = spec.PEERS["torch_compile"](shape) if "--peer" in sys.argv else None
for tensors in sets:
    kernel(tensors, shape)
    if compiled:
        compiled(tensors)
torch.cuda.synchronize()
