"""The attention kernel's spec: O = softmax(scale * Q K^T [+ causal mask]) V, FP16 or BF16
(B, H, S, D).

A thin spec (ablate/job/plugins.py lists what a spec defines, ablate/job/thin.py what it may
leave out): the C ABI is base/ablate_attention.h's prototype ablate_attention_fwd_dtype, its
parameters bound by name (B, H, S, D, scale and dtype through PARAMS; ablate_attention_fwd, the
FP16-only form of the same ABI, stays for the header's users); then the float32 reference, the
tolerance per dtype, the work model, the peers (PyTorch SDPA pinned to each backend, in the
shape's dtype), which compiled instance is which, and which pathology has no meaning in BF16. torch is
imported inside the functions that need it, so static mode and the sanitizer's driver run
without it.
"""
import math
import re

SOURCE = "base/attention.cu"
SYMBOL = "ablate_attention_fwd_dtype"
# The ceiling of both dtypes: the H100's dense FP16 and BF16 tensor-core peaks are the same.
WORK = "fp16_tensor"
HEAD_DIMS = (64, 128)  # compiled into every variant (one kernel instance per D, causal flag, dtype)
DTYPES = {"fp16": 0, "bf16": 1}  # the ABI's dtype codes (ABLATE_ATTENTION_FP16, _BF16)
SHAPE = {"batch": int, "heads": int, "seq": int, "head_dim": HEAD_DIMS, "causal": bool,
         "dtype": tuple(DTYPES)}
SHAPE_DEFAULTS = {"dtype": "fp16"}  # a shape that names no dtype is FP16, as before BF16 came


def dtype(shape):
    """A shape's dtype, also of one not validated (a dict written before BF16 came)."""
    return shape.get("dtype", SHAPE_DEFAULTS["dtype"])


DIMS = "batch, heads, seq, head_dim"
TENSORS = {"q": ("in", DIMS, dtype), "k": ("in", DIMS, dtype), "v": ("in", DIMS, dtype),
           "o": ("out", DIMS, dtype)}
# Two matmuls of 2*S*S*D per head; half of the score matrix is skipped when causal.
FLOPS = "4 * batch * heads * seq**2 * head_dim // (1 + causal)"
# ||o - ref|| / ||ref|| against float32. Q, K, V, P and O are rounded to the dtype (unit
# roundoff 2^-11 for FP16, 2^-8 for BF16: eight times coarser), so BF16's bound is 5x FP16's.
TOLERANCE = {"fp16": 2e-3, "bf16": 1e-2}
# D x causal at a short S that is no tile multiple and wraps the K/V ring (3+ key tiles), in
# FP16; and in BF16, each D once, causal at D = 128 (the BF16 instances share every copy and
# loop with the FP16 ones: only the MMAs and the packing of P and O differ).
SANITIZE_SHAPES = ([{"batch": 1, "heads": 2, "seq": 333, "head_dim": d, "causal": c}
                    for d in HEAD_DIMS for c in (False, True)]
                   + [{"batch": 1, "heads": 2, "seq": 333, "head_dim": d, "causal": d == 128, "dtype": "bf16"}
                      for d in HEAD_DIMS])


def label(shape):
    s = shape
    return (f"B={s['batch']} H={s['heads']} S={s['seq']} D={s['head_dim']}" + (" causal" if s["causal"] else "")
            + (f" {dtype(s)}" if dtype(s) != "fp16" else ""))


def tolerance(shape):
    return TOLERANCE[dtype(shape)]


def scale_of(shape):
    return float(shape.get("scale") or 1.0 / math.sqrt(shape["head_dim"]))


PARAMS = {"B": "batch", "H": "heads", "S": "seq", "D": "head_dim", "scale": scale_of,
          "dtype": lambda shape: DTYPES[dtype(shape)]}


def reference(inputs, shape):
    """float32 attention on the inputs' device, a few heads at a time (the S x S scores of
    all heads at once would not fit for long sequences)."""
    import torch

    q, k, v = inputs["q"], inputs["k"], inputs["v"]
    B, H, S, D = q.shape
    scale = scale_of(shape)
    q32, k32, v32 = (t.float().reshape(B * H, S, D) for t in (q, k, v))
    out = torch.empty_like(q32)
    mask = (torch.triu(torch.ones(S, S, dtype=torch.bool, device=q.device), diagonal=1)
            if shape["causal"] else None)
    step = max(1, (1 << 28) // (S * S))  # ~1 GiB of float32 scores per chunk
    precision = torch.get_float32_matmul_precision()
    torch.set_float32_matmul_precision("highest")  # a TF32 reference would not be float32
    try:
        for i in range(0, B * H, step):
            scores = q32[i:i + step] @ k32[i:i + step].transpose(1, 2) * scale
            if mask is not None:
                scores.masked_fill_(mask, float("-inf"))
            out[i:i + step] = torch.softmax(scores, dim=-1) @ v32[i:i + step]
    finally:
        torch.set_float32_matmul_precision(precision)
    return out.reshape(B, H, S, D)


# ---- peers: PyTorch SDPA pinned to one backend each ----------------------------------------

def _sdpa(backend_name):
    def make(shape):
        import torch.nn.functional as F
        from torch.nn.attention import SDPBackend, sdpa_kernel

        backend = getattr(SDPBackend, backend_name)

        def run(inputs):
            with sdpa_kernel(backend):
                F.scaled_dot_product_attention(inputs["q"], inputs["k"], inputs["v"],
                                               is_causal=shape["causal"], scale=scale_of(shape))
        return run
    return make


PEERS = {"sdpa_flash": _sdpa("FLASH_ATTENTION"), "sdpa_cudnn": _sdpa("CUDNN_ATTENTION"),
         "sdpa_efficient": _sdpa("EFFICIENT_ATTENTION"), "sdpa_math": _sdpa("MATH")}
DEFAULT_PEERS = ("sdpa_flash", "sdpa_cudnn")


# ---- which compiled instance is which --------------------------------------------------------

_TEMPLATE_INT = re.compile(r"(?<![\w.])(\d+)(?![\w.])")


def dtype_of(kernel_name):
    """The element type of a demangled kernel name (`attention_fwd_kernel<BaseTile<64>, true,
    Bf16>`): bf16 where its template arguments name Bf16, else fp16."""
    return "bf16" if re.search(r"\bBf16\b", kernel_name.split("(", 1)[0]) else "fp16"


def head_dim_of(kernel_name, head_dims):
    """The head dim among the integer template arguments of a demangled kernel name
    (`attention_fwd_kernel<BaseTile<64>, true>`), or None when there is not exactly one."""
    signature = kernel_name.split("(", 1)[0]
    found = {int(n) for n in _TEMPLATE_INT.findall(signature)} & set(head_dims)
    return found.pop() if len(found) == 1 else None


def config_of(kernel_name, configs):
    """The variant-info config (one per head dim and dtype: d64, d128, d64_bf16, d128_bf16) of a
    kernel instance. A config without a dtype (a library from before BF16) is FP16's."""
    wanted = dtype_of(kernel_name)
    by_dim = {int(c["head_dim"]): c["name"] for c in configs if c.get("dtype", "fp16") == wanted}
    return by_dim.get(head_dim_of(kernel_name, by_dim))


def launched(kernel_name, shape, configs):
    """Whether a shape runs this instance: its head dim, causal flag and dtype are the shape's."""
    flags = re.findall(r"\b(?:true|false)\b", kernel_name.split("(", 1)[0])
    return (head_dim_of(kernel_name, [int(c["head_dim"]) for c in configs]) == shape["head_dim"]
            and flags == ["true" if shape["causal"] else "false"]
            and dtype_of(kernel_name) == dtype(shape))


# ---- pathologies that have no meaning at some shapes ----------------------------------------

# FP16 Q K^T accumulators are the base's choice for FP16 only: BF16's mma.sync accumulates in
# FP32 alone, so the BF16 instances hold FP32 scores in the base already and fp32_accum leaves
# their code as it is (its SASS equals the base's there); timed, it would read 1.00x.
_NOT_IN_BF16 = {"fp32_accum": "BF16's mma.sync has no FP16 accumulator, so the base's BF16 instances "
                              "accumulate Q K^T in FP32 already and fp32_accum leaves them unchanged"}


def not_applicable(pathology, shape):
    """Why `pathology` does not apply at `shape`, or None."""
    return _NOT_IN_BF16.get(pathology) if dtype(shape) == "bf16" else None


# ---- for tests and notebooks: the kernel on torch tensors, checked --------------------------

def forward(kernel, q, k, v, o, causal, scale=None):
    """o = attention(q, k, v) through `kernel` (an ablate.build.library.Kernel of this plugin) on the
    current CUDA stream; all FP16, or all BF16, (B, H, S, D) contiguous CUDA tensors of one shape
    on one device. TypeError or ValueError naming the tensor at fault."""
    import torch

    for name, t in (("q", q), ("k", k), ("v", v), ("o", o)):
        if not isinstance(t, torch.Tensor):
            raise TypeError(f"{name} must be a torch.Tensor, got {type(t).__name__}")
        if t.dtype not in (torch.float16, torch.bfloat16):
            raise TypeError(f"{name} must be float16 or bfloat16, got {t.dtype}")
        if t.dtype != q.dtype:
            raise TypeError(f"{name} is {t.dtype}, q is {q.dtype}: all must be of one dtype")
        if t.dim() != 4:
            raise ValueError(f"{name} must be (B, H, S, D), got shape {tuple(t.shape)}")
        if t.shape != q.shape:
            raise ValueError(f"{name} has shape {tuple(t.shape)}, q has {tuple(q.shape)}")
        if not t.is_contiguous():
            raise ValueError(f"{name} must be contiguous")
        if t.device.type != "cuda" or t.device != q.device:
            raise ValueError(f"{name} is on {t.device}; all must be on one CUDA device, q is on {q.device}")
    B, H, S, D = q.shape
    shape = {"batch": B, "heads": H, "seq": S, "head_dim": D, "causal": bool(causal), "scale": scale,
             "dtype": "bf16" if q.dtype == torch.bfloat16 else "fp16"}
    kernel({"q": q, "k": k, "v": v, "o": o}, shape)
