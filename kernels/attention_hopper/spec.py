"""The Hopper attention kernel's spec: the attention kernel's (../attention/spec.py), built
from another source for sm_90a.

Both attention plugins compute the same thing through the same C ABI
(ablate_attention_fwd_dtype: FP16 or BF16 by the shape's dtype), so everything but the source,
the arch, the sanitizer's shapes and which pathology applies where is the attention spec's own
names, loaded from the sibling folder: shape fields, inputs, reference and tolerance per dtype,
work model, peers, which compiled instance is which. Its shapes are the attention kernel's, FP16
and BF16 (conf/shape links each of them).
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


def not_applicable(pathology, shape):
    """None: each of this kernel's pathologies applies in both dtypes. The BF16 instances are
    the FP16 ones with other MMA types, P and O packed to BF16 and BF16 tensor maps; every
    pathology changes a stage they share (its BF16 code differs from the base's, and its
    fingerprint holds in the BF16 instances alone: tests/test_attention_hopper_bf16.py).
    Unlike attention's fp32_accum there is no FP16-only choice here: wgmma accumulates in
    FP32 in the base for both."""
    return None


# D x causal at a short S that is no tile multiple and wraps the K/V ring, plus one whose
# non-causal D = 128 launch splits tiles between blocks (the stream-K schedule,
# base/schedule.cuh): 150 query tiles on fewer SMs (132 on the H100), so the hand-over of
# partial results runs under the sanitizer too. In FP16 all five; in BF16 each of the four
# BF16 instances (D x causal) once, D = 128 non-causal at the stream-K shape.
_STREAM_K = {"batch": 1, "heads": 50, "seq": 333, "head_dim": 128, "causal": False}
SANITIZE_SHAPES = ([s for s in _attention.SANITIZE_SHAPES if dtype(s) == "fp16"] + [_STREAM_K]
                   + [{"batch": 1, "heads": 2, "seq": 333, "head_dim": d, "causal": c, "dtype": "bf16"}
                      for d, c in ((64, False), (64, True), (128, True))]
                   + [{**_STREAM_K, "dtype": "bf16"}])
