"""The RMSNorm kernel's spec: y = x / sqrt(mean(x^2) + eps) * w over each row of x.

x and y are (rows, hidden) row-major, w is (hidden,), all FP16 or all BF16; the statistics
are FP32. A thin spec (ablate/job/plugins.py lists what a spec defines, ablate/job/thin.py
what it may leave out): the C ABI is base/ablate_rmsnorm.h's prototype, its parameters
bound by name; the peers are torch.nn.functional.rms_norm, eagerly and under torch.compile.
torch is imported inside the functions that need it.
"""
import functools

SOURCE = "base/rmsnorm.cu"
SYMBOL = "ablate_rmsnorm_fwd"
WORK = "memory"
DTYPES = {"fp16": 0, "bf16": 1}  # the ABI's dtype codes
MAX_HIDDEN = 16384
MAX_ROWS = 2**31 - 1
PARAMS = {"dtype": lambda shape: DTYPES[shape["dtype"]]}
# The launch tables' constants (base/launch.cuh, #ifndef defaults: 4, 256, 1), each with the
# values its neighbours are drawn from (ablate/job/tunables.py: tune_rmsnorm_vecs_2, ...).
TUNABLES = {"RMSNORM_VECS": (1, 2, 4, 8), "RMSNORM_THREADS": (128, 256, 512),
            "RMSNORM_FEW_ROWS_VECS": (1, 2, 4)}


def _eps(eps):
    if isinstance(eps, bool) or not isinstance(eps, (int, float)) or not 0 <= eps < float("inf"):
        raise ValueError(f"eps must be a finite number >= 0, got {eps!r}")
    return float(eps)


SHAPE = {"rows": range(1, MAX_ROWS + 1), "hidden": range(8, MAX_HIDDEN + 1, 8),  # 16-byte rows
         "dtype": tuple(DTYPES), "eps": _eps}
TENSORS = {"x": ("in", "rows, hidden", "dtype"), "w": ("in", "hidden", "dtype"),
           "y": ("out", "rows, hidden", "dtype")}
FLOPS = "4 * rows * hidden"  # per element: square and add (the sum), then two multiplies
# ||y - ref|| / ||ref|| against float32: the output's own rounding (unit roundoff 2^-11 for
# FP16, 2^-8 for BF16; the norm-wise error is about half of it) with room for the FP32 sums.
TOLERANCE = {"fp16": 1e-3, "bf16": 5e-3}
# Every launch bucket's edge: the smallest row (one vector), one just past a power of two
# (a partly filled last step), the largest; both dtypes; a few rows.
SANITIZE_SHAPES = [{"rows": 5, "hidden": h, "dtype": d, "eps": 1e-6}
                   for d in DTYPES for h in (8, 2056, MAX_HIDDEN)]


def label(shape):
    return f"{shape['rows']} x {shape['hidden']} {shape['dtype']}"


def tolerance(shape):
    return TOLERANCE[shape["dtype"]]


def reference(inputs, shape):
    import torch

    x = inputs["x"].float()
    return x * torch.rsqrt(x.pow(2).mean(dim=-1, keepdim=True) + shape["eps"]) * inputs["w"].float()


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
