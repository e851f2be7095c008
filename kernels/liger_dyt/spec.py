"""liger_dyt: Liger-Kernel's DyT forward (liger-kernel 0.8.5, the optional extra `[liger]`):
y = tanh(alpha * x) * gamma + beta over each row of x, the Dynamic Tanh that replaces a
normalization layer (Zhu et al., "Transformers without Normalization", 2025).

The plugin holds no copy of the kernel and no launch of its own beyond what
liger_kernel/ops/dyt.py's liger_dyt_fwd passes: TRITON names the library's function under its
own @triton.autotune (18 configs: BLOCK_N 1024/2048/4096 x num_stages 1/2 x num_warps 4/8/16,
keyed on N), and the constexprs come from where the library's launcher takes them:
HAVE_BETA from META (beta is given), N from the shape (the row's length: a constexpr, so each
hidden size is a compiled instance of its own), BLOCK_N, num_warps and num_stages from the
autotuner (its pick for the shape on a GPU, its first config without one).
"""
import functools

TRITON = "liger_kernel.ops.dyt:_dyt_fwd_kernel"
META = {"HAVE_BETA": True}
HIDDEN = (4096,)  # N is a constexpr: one compiled instance per hidden size (INSTANCES)
INSTANCES = {f"{dtype}_h{h}": {"rows": 64, "hidden": h, "dtype": dtype} for h in HIDDEN for dtype in ("bf16", "fp16")}


def _hidden(value):
    if value not in HIDDEN:
        raise ValueError(f"hidden must be one of {list(HIDDEN)} (N is a constexpr of the kernel: each hidden size "
                         f"is a compiled instance of spec.INSTANCES), got {value!r}")
    return value


WORK = "memory"
SHAPE = {"rows": range(1, 2**31), "hidden": _hidden, "dtype": ("bf16", "fp16")}
# alpha is one element: LigerDyT's nn.Parameter(torch.ones(1) * init_alpha), in the model's dtype
TENSORS = {"x": ("in", "rows, hidden", "dtype"), "alpha": ("in", 1, "dtype"), "gamma": ("in", "hidden", "dtype"),
           "beta": ("in", "hidden", "dtype"), "y": ("out", "rows, hidden", "dtype")}
PARAMS = {"X": "x", "Y": "y", "Alpha": "alpha", "Gamma": "gamma", "Beta": "beta", "N": "hidden"}
FLOPS = "4 * rows * hidden"  # alpha * x, tanh (one MUFU.TANH), * gamma, + beta
# ||y - ref|| / ||ref||: FP32 math, the output rounded once to the dtype (2^-9 BF16, 2^-12 FP16), with room
TOLERANCE = {"bf16": 8e-3, "fp16": 1e-3}
SANITIZE_SHAPES = [{"rows": 5, "hidden": 4096, "dtype": "bf16"}, {"rows": 3, "hidden": 4096, "dtype": "fp16"}]


def grid(shape, meta):
    return (-(-shape["hidden"] // meta["BLOCK_N"]), shape["rows"])


def label(shape):
    return f"{shape['rows']} x {shape['hidden']} {shape['dtype']}"


def tolerance(shape):
    return TOLERANCE[shape["dtype"]]


def reference(inputs, shape):
    import torch

    x, alpha = inputs["x"].double(), inputs["alpha"].double()
    return torch.tanh(alpha * x) * inputs["gamma"].double() + inputs["beta"].double()


# ---- peers: what users call otherwise -------------------------------------------------------

def _dyt(x, alpha, gamma, beta):
    """DyT as the paper's reference writes it, in eager PyTorch."""
    import torch

    return torch.tanh(alpha * x) * gamma + beta


def _eager(shape):
    def run(inputs):
        _dyt(inputs["x"], inputs["alpha"], inputs["gamma"], inputs["beta"])
    return run


@functools.cache
def _compiled():
    import torch

    return torch.compile(_dyt, dynamic=False)


def _compile(shape):
    fn = _compiled()

    def run(inputs):
        fn(inputs["x"], inputs["alpha"], inputs["gamma"], inputs["beta"])
    return run


def _liger(shape):
    """The library's own entry: the same kernel, with its allocation, autotuner and launch in Python."""
    from liger_kernel.ops.dyt import liger_dyt_fwd

    def run(inputs):
        liger_dyt_fwd(inputs["x"], inputs["alpha"], inputs["gamma"], inputs["beta"])
    return run


PEERS = {"dyt_eager": _eager, "dyt_compile": _compile, "liger": _liger}
