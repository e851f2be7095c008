"""liger_rmsnorm: Liger-Kernel's RMSNorm forward (liger-kernel 0.8.5, an optional extra:
pip install -e '.[liger]'), y = x / sqrt(mean(x^2) + eps) * w over each row of x, as Llama's
RMSNorm computes it (Liger's casting mode "llama": the statistics in FP32, the product with
w in the input's dtype). The plugin holds no copy of the kernel: TRITON names the library's
@triton.jit function by module path, and the launch below is the one of
liger_kernel/ops/rms_norm.py's rms_norm_forward for a hidden size of 4096 (its row kernel,
one program per row: BLOCK_SIZE > 256 always takes it).

Without the package the plugin does not load, in one line naming the module.
"""
import functools

TRITON = "liger_kernel.ops.rms_norm:_rms_norm_forward_kernel"
HIDDEN = 4096  # Llama 3 8B's
# What rms_norm_forward passes for hidden 4096: liger_kernel.ops.utils.calculate_settings(4096)
# is (BLOCK_SIZE 4096, num_warps 8) (tests/test_triton_libraries.py checks it against the
# installed library); casting_mode 0 is "llama"; W is given.
META = {"casting_mode": 0, "elementwise_affine": True, "BLOCK_SIZE": 4096, "num_warps": 8}
# The tunables' neighbourhood (ablate/job/tunables.py): a program holds its whole row in one
# block, so BLOCK_SIZE below the hidden size leaves the row's tail unwritten (halved, 2048, it
# left 10240 of 20485 outputs NaN under the sanitizer's shapes on the H100, 2026-11-26):
# only the larger side is a neighbour.
TUNABLES = {"BLOCK_SIZE": (4096, 8192)}
EPS = 1e-6
INSTANCES = {"bf16": {"rows": 64, "hidden": HIDDEN, "dtype": "bf16"},
             "fp16": {"rows": 64, "hidden": HIDDEN, "dtype": "fp16"}}


def _hidden(value):
    if value != HIDDEN:
        raise ValueError(f"hidden must be {HIDDEN} (META is Liger's launch for it), got {value!r}")
    return value


WORK = "memory"
SHAPE = {"rows": range(1, 2**31), "hidden": _hidden, "dtype": ("bf16", "fp16")}
TENSORS = {"x": ("in", "rows, hidden", "dtype"), "w": ("in", "hidden", "dtype"),
           "y": ("out", "rows, hidden", "dtype"), "rstd": ("out", "rows", "fp32")}
PARAMS = {"Y_ptr": "y", "X_ptr": "x", "W_ptr": "w", "RSTD_ptr": "rstd", "Y_row_stride": "hidden",
          "X_row_stride": "hidden", "W_row_stride": 1, "RSTD_row_stride": 1, "n_cols": "hidden",
          "eps": EPS, "offset": 0.0}
FLOPS = "4 * rows * hidden"
# ||y - ref|| / ||ref||: x * rstd rounded to the dtype, then the product with w rounded again
# (2^-9 BF16, 2^-12 FP16 unit roundoff each), with room; rstd is FP32 against FP64.
TOLERANCE = {"bf16": 8e-3, "fp16": 1e-3}
SANITIZE_SHAPES = [{"rows": 5, "hidden": HIDDEN, "dtype": "bf16"}, {"rows": 5, "hidden": HIDDEN, "dtype": "fp16"}]


def grid(shape, meta):
    return (shape["rows"],)


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


def _llama(x, w):
    """Llama's RMSNorm as Hugging Face's modeling_llama writes it, in eager PyTorch."""
    import torch

    h = x.float()
    return w * (h * torch.rsqrt(h.pow(2).mean(-1, keepdim=True) + EPS)).to(x.dtype)


def _eager(shape):
    def run(inputs):
        _llama(inputs["x"], inputs["w"])
    return run


@functools.cache
def _compiled():
    import torch

    return torch.compile(_llama, dynamic=False)


def _compile(shape):
    fn = _compiled()

    def run(inputs):
        fn(inputs["x"], inputs["w"])
    return run


def _liger(shape):
    """The library's own entry (the same kernel, with its allocations and launch in Python)."""
    from liger_kernel.ops.rms_norm import rms_norm_forward

    def run(inputs):
        rms_norm_forward(inputs["x"], inputs["w"], EPS, 0.0, "llama", None)
    return run


PEERS = {"torch_rms_norm": _torch, "llama_eager": _eager, "llama_compile": _compile, "liger": _liger}
