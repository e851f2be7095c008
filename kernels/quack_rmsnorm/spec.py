"""quack_rmsnorm: QuACK's RMSNorm forward (quack-kernels 0.6.5, a CuTe DSL kernel; an optional
extra: pip install -e '.[cute]'), y = x / sqrt(mean(x^2) + eps) * w over each row of x, the
statistics and the product in FP32, rounded once to the input's dtype; rstd kept in FP32.
The plugin holds no copy of the kernel: CUTE names QuACK's compile function by module path,
which builds its RMSNorm (rows dynamic, the hidden size compiled in) for a configuration
object, RmsNormFwdConfig, whose fields are META here and a pathology's `meta:` overrides;
the call is the one of quack/rmsnorm.py's `_rmsnorm_fwd` with a weight and rstd, no bias or
residual.

Without the packages the plugin does not load, in one line naming the module.
"""
import functools

CUTE = "quack.rmsnorm:_compile_rmsnorm_fwd"
HIDDEN = 8192
# RmsNormFwdConfig.from_analytical_heuristic(8192, 16, arch_major=9): QuACK's own pick on an
# H100/H200 for a 16-bit hidden 8192 (tests/test_cute.py checks it against the installed
# library): a block of 128 threads per row, each thread 64 values in registers (no reload),
# no cluster, the weight loaded before the row's reduction.
META = {"num_threads": 128, "threads_per_row": 128, "cluster_n": 1, "reload_from": None, "delay_w_load": False}
STATIC = ("hidden",)  # compiled in; rows stay dynamic
# QuACK's own disk cache would hand back a function without its cubin (docs/design.md).
ENV = {"QUACK_CACHE_ENABLED": "0"}
EPS = 1e-6
INSTANCES = {"bf16": {"rows": 64, "hidden": HIDDEN, "dtype": "bf16"},
             "fp16": {"rows": 64, "hidden": HIDDEN, "dtype": "fp16"}}


def _hidden(value):
    if value != HIDDEN:
        raise ValueError(f"hidden must be {HIDDEN} (the instances compile it in), got {value!r}")
    return value


WORK = "memory"
SHAPE = {"rows": range(1, 2**31), "hidden": _hidden, "dtype": ("bf16", "fp16")}
TENSORS = {"x": ("in", "rows, hidden", "dtype"), "w": ("in", "hidden", "dtype"),
           "y": ("out", "rows, hidden", "dtype"), "rstd": ("out", "rows", "fp32")}
FLOPS = "4 * rows * hidden"
# ||y - ref|| / ||ref||: one rounding of x * rstd * w to the dtype (2^-9 BF16, 2^-11 FP16
# relative), with room; rstd is FP32 (rsqrt.approx) against FP64.
TOLERANCE = {"bf16": 8e-3, "fp16": 1e-3}
SANITIZE_SHAPES = [{"rows": 5, "hidden": HIDDEN, "dtype": "bf16"}, {"rows": 5, "hidden": HIDDEN, "dtype": "fp16"}]


def compile_args(shape, meta):
    """_compile_rmsnorm_fwd's arguments: dtypes of x, out, residual, weight, bias, residual_out;
    N; has_rstd, has_mean, is_layernorm, per_head, weight_offset; the configuration."""
    import cutlass
    from quack.rmsnorm_config import RmsNormFwdConfig

    dt = {"bf16": cutlass.BFloat16, "fp16": cutlass.Float16}[shape["dtype"]]
    return (dt, dt, None, dt, None, None, shape["hidden"], True, False, False, False, 0.0), \
        {"config": RmsNormFwdConfig(**meta)}


def call_args(inputs, shape):
    """As _rmsnorm_fwd calls the compiled function: x, weight, bias, residual, out,
    residual_out, rstd, mean, eps."""
    return (inputs["x"], inputs["w"], None, None, inputs["y"], None, inputs["rstd"], None, EPS)


def label(shape):
    return f"{shape['rows']} x {shape['hidden']} {shape['dtype']}"


def tolerance(shape):
    return TOLERANCE[shape["dtype"]]


def reference(inputs, shape):
    import torch

    x = inputs["x"].double()
    rstd = torch.rsqrt(x.pow(2).mean(dim=-1) + EPS)
    return {"y": x * rstd[:, None] * inputs["w"].double(), "rstd": rstd}


# ---- peers: what users call otherwise -------------------------------------------------------

def _torch(shape):
    import torch.nn.functional as F

    def run(inputs):
        F.rms_norm(inputs["x"], (shape["hidden"],), inputs["w"], EPS)
    return run


def _liger(shape):
    """Liger-Kernel's Triton RMSNorm ([liger]), its own entry."""
    from liger_kernel.ops.rms_norm import rms_norm_forward

    def run(inputs):
        rms_norm_forward(inputs["x"], inputs["w"], EPS, 0.0, "llama", None)
    return run


def _quack(shape):
    """QuACK's own entry (the same kernel, with its allocations, cache look-up and dispatch in Python)."""
    from quack.rmsnorm import rmsnorm_fwd

    def run(inputs):
        rmsnorm_fwd(inputs["x"], inputs["w"], eps=EPS, store_rstd=True)
    return run


PEERS = {"torch_rms_norm": _torch, "liger": _liger, "quack": _quack}
