"""The Hopper attention kernel's spec: the attention kernel's (../attention/spec.py), built
from another source for sm_90a.

Both attention plugins compute the same thing through the same C ABI, so everything but
the source and the arch is the attention spec's own names, loaded from the sibling folder:
shape fields, inputs, reference and tolerance, work model, peers, which compiled instance
is which. Its shapes are the attention kernel's too (conf/shape is a link to them).
"""
import importlib.util
from pathlib import Path

_path = Path(__file__).resolve().parent.parent / "attention" / "spec.py"
_loader = importlib.util.spec_from_file_location("ablate_kernel_attention_spec_shared", _path)
_attention = importlib.util.module_from_spec(_loader)
_loader.loader.exec_module(_attention)
globals().update({k: v for k, v in vars(_attention).items() if not k.startswith("__")})

SOURCE = "base/hopper_attention.cu"
ARCH = "sm_90a"  # wgmma and setmaxnreg exist on the H100/H200 chip only

# The attention kernel's small shapes, plus one whose non-causal D = 128 launch splits tiles
# between blocks (the stream-K schedule, base/schedule.cuh): 150 query tiles on fewer SMs
# (132 on the H100), so the hand-over of partial results runs under the sanitizer too.
SANITIZE_SHAPES = _attention.SANITIZE_SHAPES + [
    {"batch": 1, "heads": 50, "seq": 333, "head_dim": 128, "causal": False}]
