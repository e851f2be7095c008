"""The Hopper attention kernel's spec: the attention kernel's (../attention/spec.py), built
from another source for sm_90a.

Both attention plugins compute the same thing through the same C ABI, so everything but
the source and the arch is the attention spec's own names, loaded from the sibling folder:
shape fields, inputs, reference and tolerance, work model, peers, which compiled instance
is which. Its shapes are the attention kernel's FP16 ones (conf/shape links each of them).
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

# FP16 only: this base exports the ABI's FP16 form, ablate_attention_fwd, and no BF16 instance;
# a BF16 shape of the shared folder is refused naming the dtype field.
SYMBOL = "ablate_attention_fwd"
SHAPE = {**_attention.SHAPE, "dtype": ("fp16",)}
PARAMS = {k: v for k, v in _attention.PARAMS.items() if k != "dtype"}
_attention_fp16 = [s for s in _attention.SANITIZE_SHAPES if s.get("dtype", "fp16") == "fp16"]


def not_applicable(pathology, shape):
    return None  # every shape it accepts is FP16, where each of its pathologies applies


# The attention kernel's small FP16 shapes, plus one whose non-causal D = 128 launch splits tiles
# between blocks (the stream-K schedule, base/schedule.cuh): 150 query tiles on fewer SMs
# (132 on the H100), so the hand-over of partial results runs under the sanitizer too.
SANITIZE_SHAPES = _attention_fp16 + [
    {"batch": 1, "heads": 50, "seq": 333, "head_dim": 128, "causal": False}]
