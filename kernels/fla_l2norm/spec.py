"""fla_l2norm: flash-linear-attention's L2 norm forward (fla-core 0.6.0, the optional extra
`[fla]`): y = x / sqrt(sum(x^2) + eps) over each row of x, and rstd = 1 / sqrt(sum(x^2) + eps).
Gated DeltaNet and its relatives normalize their queries and keys with it: rows are tokens x
heads, a row one head's 128 features.

The plugin holds no copy of the kernel and no launch beyond what fla/modules/norm/l2norm.py's
l2norm_fwd passes for a head size of 128 (D <= 512: the tiled kernel): TRITON names the
library's function under fla's own autotuner, `fla_cache_autotune` (CachedAutotuner, a
subclass of Triton's Autotuner: 25 configs, BT 8-128 rows a program x num_warps 1-16, keyed
on D and NB), `do_not_specialize=["T"]`. The constexprs come from where the launcher takes
them: D from the shape, BD (the next power of two of D) and NB (the row count in buckets of
65536, which only keys the autotuner) computed from it as l2norm_fwd computes them, BT,
num_warps and num_stages from the autotuner. D, BD and NB are constexprs, so each (head size,
NB) pair is a compiled instance of its own (INSTANCES).
"""
import functools

TRITON = "fla.modules.norm.l2norm:l2norm_fwd_kernel"
EPS = 1e-6  # l2norm_fwd's default
HEAD_DIM = 128
ROWS_PER_BUCKET = 2048 * 32  # l2norm_fwd: NB = triton.cdiv(T, 2048 * 32)
BUCKETS = (1, 4)  # the NB values INSTANCES compile: rows up to 65536, and 196609-262144
INSTANCES = {f"bf16_nb{nb}": {"rows": 64 if nb == 1 else nb * ROWS_PER_BUCKET, "head_dim": HEAD_DIM, "dtype": "bf16"}
             for nb in BUCKETS}


def _rows(value):
    if not isinstance(value, int) or isinstance(value, bool) or value < 1:
        raise ValueError(f"rows must be an integer >= 1, got {value!r}")
    if -(-value // ROWS_PER_BUCKET) not in BUCKETS:
        raise ValueError(f"rows must give NB = ceil(rows / {ROWS_PER_BUCKET}) of {' or '.join(map(str, BUCKETS))} "
                         f"(NB is a constexpr of fla's launch: each value is a compiled instance of spec.INSTANCES), "
                         f"got {value} (NB {-(-value // ROWS_PER_BUCKET)})")
    return value


def _head_dim(value):
    if value != HEAD_DIM:
        raise ValueError(f"head_dim must be {HEAD_DIM} (D is a constexpr: INSTANCES compile it), got {value!r}")
    return value


WORK = "memory"
SHAPE = {"rows": _rows, "head_dim": _head_dim, "dtype": ("bf16",)}
TENSORS = {"x": ("in", "rows, head_dim", "dtype"), "y": ("out", "rows, head_dim", "dtype"),
           "rstd": ("out", "rows", "fp32")}
PARAMS = {"eps": EPS, "T": "rows", "D": "head_dim", "BD": lambda s: 1 << (s["head_dim"] - 1).bit_length(),
          "NB": lambda s: -(-s["rows"] // ROWS_PER_BUCKET)}
FLOPS = "3 * rows * head_dim"  # x * x, the sum, x * rstd
# ||y - ref|| / ||ref||: FP32 math, y rounded once to BF16 (2^-9), with room; rstd FP32 against FP64
TOLERANCE = 8e-3
SANITIZE_SHAPES = [{"rows": 5, "head_dim": HEAD_DIM, "dtype": "bf16"},
                   {"rows": 37, "head_dim": HEAD_DIM, "dtype": "bf16"}]


def grid(shape, meta):
    return (-(-shape["rows"] // meta["BT"]),)


def label(shape):
    return f"{shape['rows']} x {shape['head_dim']} {shape['dtype']}"


def reference(inputs, shape):
    import torch

    x = inputs["x"].double()
    rstd = torch.rsqrt(x.pow(2).sum(dim=-1) + EPS)
    return {"y": x * rstd[:, None], "rstd": rstd}


# ---- peers: what users call otherwise -------------------------------------------------------

def _l2norm(x):
    """The L2 norm as a model written in PyTorch computes it, statistics in FP32."""
    import torch

    h = x.float()
    return (h * torch.rsqrt(h.pow(2).sum(-1, keepdim=True) + EPS)).to(x.dtype)


def _eager(shape):
    def run(inputs):
        _l2norm(inputs["x"])
    return run


@functools.cache
def _compiled():
    import torch

    return torch.compile(_l2norm, dynamic=False)


def _compile(shape):
    fn = _compiled()

    def run(inputs):
        fn(inputs["x"])
    return run


def _fla(shape):
    """The library's own entry: the same kernel, with its allocations, autotuner and launch in Python."""
    from fla.modules.norm.l2norm import l2norm_fwd

    def run(inputs):
        l2norm_fwd(inputs["x"], EPS)
    return run


PEERS = {"l2norm_eager": _eager, "l2norm_compile": _compile, "fla": _fla}
