"""The RMSNorm kernel's spec: y = x / sqrt(mean(x^2) + eps) * w over each row of x.

x and y are (rows, hidden) row-major, w is (hidden,), all FP16 or all BF16; the statistics
are FP32. Everything ablate knows of this kernel is here (ablate/job/plugins.py lists what a
spec defines): its shape fields, inputs, float32 reference, C ABI (base/ablate_rmsnorm.h),
work model and peers (torch.nn.functional.rms_norm, eagerly and under torch.compile). torch
is imported inside the functions that need it.
"""
import ctypes
import functools

SOURCE = "base/rmsnorm.cu"
SYMBOL = "ablate_rmsnorm_fwd"
# x, w, y, rows, hidden, dtype, eps, stream
ARGTYPES = [ctypes.c_void_p] * 3 + [ctypes.c_longlong, ctypes.c_int, ctypes.c_int, ctypes.c_float,
                                    ctypes.c_void_p]
OUTPUTS = ("y",)
BOUND = "memory"
DTYPES = {"fp16": 0, "bf16": 1}  # the ABI's dtype codes
MAX_HIDDEN = 16384
MAX_ROWS = 2**31 - 1
FIELDS = ("rows", "hidden", "dtype", "eps")
# ||y - ref|| / ||ref|| against float32: the output's own rounding (unit roundoff 2^-11 for
# FP16, 2^-8 for BF16; the norm-wise error is about half of it) with room for the FP32 sums.
TOLERANCE = {"fp16": 1e-3, "bf16": 5e-3}
# Every launch bucket's edge: the smallest row (one vector), one just past a power of two
# (a partly filled last step), the largest; both dtypes; a few rows.
SANITIZE_SHAPES = [{"rows": 5, "hidden": h, "dtype": d, "eps": 1e-6}
                   for d in DTYPES for h in (8, 2056, MAX_HIDDEN)]


def validate_shape(shape):
    """The shape as a plain dict {rows, hidden, dtype, eps}; ValueError naming the field."""
    missing = [k for k in FIELDS if k not in shape]
    if missing:
        raise ValueError(f"missing {', '.join(missing)} (an rmsnorm shape needs {', '.join(FIELDS)})")
    out = {k: shape[k] for k in FIELDS}
    for key, top in (("rows", MAX_ROWS), ("hidden", MAX_HIDDEN)):
        value = out[key]
        if isinstance(value, bool) or not isinstance(value, int) or not 1 <= value <= top:
            raise ValueError(f"{key} must be an integer from 1 to {top}, got {value!r}")
    if out["hidden"] % 8:
        raise ValueError(f"hidden must be a multiple of 8 (16-byte rows), got {out['hidden']}")
    if out["dtype"] not in DTYPES:
        raise ValueError(f"dtype must be one of {list(DTYPES)}, got {out['dtype']!r}")
    eps = out["eps"]
    if isinstance(eps, bool) or not isinstance(eps, (int, float)) or not 0 <= eps < float("inf"):
        raise ValueError(f"eps must be a finite number >= 0, got {eps!r}")
    out["eps"] = float(eps)
    return out


def label(shape):
    return f"{shape['rows']} x {shape['hidden']} {shape['dtype']}"


def flops(shape):
    """Per element: square and add (the sum), then two multiplies (by 1/rms and by w)."""
    return 4 * shape["rows"] * shape["hidden"]


def bytes_moved(shape):
    """x read and y written once, w read once; 2 bytes an element."""
    return 2 * (2 * shape["rows"] * shape["hidden"] + shape["hidden"])


def _torch_dtype(shape):
    import torch

    return {"fp16": torch.float16, "bf16": torch.bfloat16}[shape["dtype"]]


def make_inputs(shape, generator, device):
    import torch

    dtype, rows, hidden = _torch_dtype(shape), shape["rows"], shape["hidden"]
    return {"x": torch.randn(rows, hidden, generator=generator, device=device, dtype=dtype),
            "w": torch.randn(hidden, generator=generator, device=device, dtype=dtype),
            "y": torch.empty(rows, hidden, device=device, dtype=dtype)}


def arguments(ptrs, shape, stream):
    return (ptrs["x"], ptrs["w"], ptrs["y"], shape["rows"], shape["hidden"], DTYPES[shape["dtype"]],
            shape["eps"], stream)


def tolerance(shape):
    return TOLERANCE[shape["dtype"]]


def reference(inputs, shape):
    import torch

    x = inputs["x"].float()
    rms = torch.rsqrt(x.pow(2).mean(dim=-1, keepdim=True) + shape["eps"])
    return {"y": x * rms * inputs["w"].float()}


# ---- peers: PyTorch's own RMSNorm ----------------------------------------------------------

def _eager(shape):
    import torch.nn.functional as F

    def run(inputs):
        F.rms_norm(inputs["x"], (shape["hidden"],), inputs["w"], shape["eps"])
    return run


@functools.cache
def _compiled(hidden, eps):
    """One torch.compile per (hidden, eps), kept for the process (a GPU child serves a whole
    sweep), so a shape compiles once."""
    import torch
    import torch.nn.functional as F

    return torch.compile(lambda x, w: F.rms_norm(x, (hidden,), w, eps), dynamic=False)


def _compile(shape):
    fn = _compiled(shape["hidden"], shape["eps"])

    def run(inputs):
        fn(inputs["x"], inputs["w"])
    return run


PEERS = {"torch_eager": _eager, "torch_compile": _compile}


# ---- which compiled instance is which --------------------------------------------------------
# The library holds, per dtype and hidden bucket, a many-rows instance (bandwidth) and a
# few-rows one (latency), each described by a config of its variant info whose "kernel" is
# the instance's demangled name up to its parameter list.
SMS, THREADS_PER_SM = 132, 2048  # the H100's: where the base switches from few rows to many


def config_of(kernel_name, configs):
    """The variant-info config of a compiled instance, by its name."""
    signature = kernel_name.split("(", 1)[0]
    found = [c["name"] for c in configs if c.get("kernel") == signature]
    return found[0] if len(found) == 1 else None


def launched(kernel_name, shape, configs):
    """Whether a shape runs this instance: the smallest bucket of its dtype that holds the row,
    the few-rows instance while every row fits in one wave of its blocks (as the base's
    dispatch decides it on an H100)."""
    fits = [c for c in configs if c["dtype"] == shape["dtype"] and c["max_hidden"] >= shape["hidden"]]
    if not fits:
        return False
    bucket = min(c["max_hidden"] for c in fits)
    few = next((c for c in fits if c["max_hidden"] == bucket and c.get("few_rows")), None)
    one_wave = few and SMS * min(32, max(1, THREADS_PER_SM // few["threads"])) * few["rows_per_block"]
    wanted = few if few and shape["rows"] <= one_wave else next(
        (c for c in fits if c["max_hidden"] == bucket and not c.get("few_rows")), None)
    return wanted is not None and config_of(kernel_name, configs) == wanted["name"]
