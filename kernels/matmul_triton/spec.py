"""matmul_triton: C = A @ B, FP16 or BF16, a Triton kernel (base/matmul.py), its optimizations
as meta-parameters that the pathologies override (conf/pathology/*.yaml).

A Triton plugin's spec (docs/design.md, "Triton kernels"): TRITON names the @triton.jit
function, META the base's constexprs and compile options, grid(shape, meta) its launch, and
INSTANCES one shape of each specialization the compiled library holds (fp16, bf16: every
dimension a multiple of 16, as Triton's JIT specializes them). The function's arguments are
bound by name: a, b, c are the tensors, M, N, K and the strides come from PARAMS.
"""
TRITON = "base/matmul.py:matmul_kernel"
META = {"BLOCK_M": 128, "BLOCK_N": 256, "BLOCK_K": 64, "GROUP_M": 8, "USE_TMA": True, "TMA_STORE": True,
        "PERSISTENT": True, "NUM_SMS": 132, "num_warps": 8, "num_stages": 3}
INSTANCES = {"fp16": {"m": 256, "n": 256, "k": 256, "dtype": "fp16"},
             "bf16": {"m": 256, "n": 256, "k": 256, "dtype": "bf16"}}
WORK = "fp16_tensor"  # the H100's BF16 tensor-core rate is the FP16 one
SHAPE = {"m": int, "n": int, "k": int, "dtype": ("fp16", "bf16")}
TENSORS = {"a": ("in", "m, k", "dtype"), "b": ("in", "k, n", "dtype"), "c": ("out", "m, n", "dtype")}
PARAMS = {"M": "m", "N": "n", "K": "k", "stride_am": "k", "stride_ak": 1, "stride_bk": "n", "stride_bn": 1,
          "stride_cm": "n", "stride_cn": 1}
FLOPS = "2 * m * n * k"
# ||C - ref|| / ||ref||: the output's rounding (FP16 2^-11, BF16 2^-8) over FP32 accumulation
TOLERANCE = {"fp16": 1e-3, "bf16": 8e-3}
# small, with partial tiles in N (384 = 256 + 128) and a K tail (208 = 3 * 64 + 16)
SANITIZE_SHAPES = [{"m": 256, "n": 384, "k": 208, "dtype": "fp16"}, {"m": 256, "n": 384, "k": 208, "dtype": "bf16"}]


def grid(shape, meta):
    """One program per output tile; PERSISTENT: NUM_SMS programs (the H100 SXM's 132 SMs, a
    constant so that Triton fuses the kernel's loops; right on any GPU, one wave only where it
    has that many SMs), fewer when there are fewer tiles, each looping over its share."""
    tiles = -(-shape["m"] // meta["BLOCK_M"]) * -(-shape["n"] // meta["BLOCK_N"])
    return (min(tiles, meta["NUM_SMS"]),) if meta["PERSISTENT"] else (tiles,)


def label(shape):
    return f"{shape['m']}x{shape['n']}x{shape['k']} {shape['dtype']}"


def tolerance(shape):
    return TOLERANCE[shape["dtype"]]


def reference(inputs, shape):
    import torch

    # FP32 products and sums, never TF32, whatever the process set
    old = torch.backends.cuda.matmul.allow_tf32
    torch.backends.cuda.matmul.allow_tf32 = False
    try:
        return inputs["a"].float() @ inputs["b"].float()
    finally:
        torch.backends.cuda.matmul.allow_tf32 = old


def _cublas(shape):
    import torch

    def run(inputs):
        torch.matmul(inputs["a"], inputs["b"], out=inputs["c"])
    return run


PEERS = {"cublas": _cublas}
