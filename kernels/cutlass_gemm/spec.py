"""The CUTLASS GEMM's spec: d = a b^T on Hopper, built from CUTLASS 3.x's collective builders.

a is (m, k), b is (n, k) (an nn.Linear weight: both operands K-major, the layout Hopper's
TMA and wgmma take without a transpose), d is (m, n); all FP16 or all BF16, FP32
accumulation. A thin spec (ablate/job/plugins.py): the C ABI is base/ablate_gemm.h's
prototype. CUTLASS is the `nvidia-cutlass` package's headers, found where it is installed
(INCLUDE_DIRS). The peer is torch.matmul (cuBLAS/cuBLASLt) on the same tensors.
"""
import importlib.util
import re
from pathlib import Path

SOURCE = "base/cutlass_gemm.cu"
SYMBOL = "ablate_cutlass_gemm"
ARCH = "sm_90a"  # wgmma, TMA multicast and setmaxnreg: the H100/H200 chip only
DTYPES = {"fp16": 0, "bf16": 1}  # the ABI's dtype codes
WORK = "fp16_tensor"
PARAMS = {"dtype": lambda shape: DTYPES[shape["dtype"]]}
ALIGN = 8  # elements per 16 bytes: TMA needs 16-byte aligned row strides (k for a and b, n for d)
SKINNY_MAX_M = 128  # base/cutlass_gemm.cu's kSkinnyMaxM: m up to it runs the skinny configuration

# CUTLASS's headers want these (its own CMake passes them): constexpr host functions called in
# device code, and its debug asserts off.
FLAGS = ["--expt-relaxed-constexpr", "-DNDEBUG"]


def INCLUDE_DIRS():
    """CUTLASS's and CuTe's headers, from the installed nvidia-cutlass wheel (its Python
    package is cutlass_library; the headers lie in its source/include)."""
    found = importlib.util.find_spec("cutlass_library")
    if found is None or not found.submodule_search_locations:
        raise RuntimeError("the nvidia-cutlass package is not installed (pip install nvidia-cutlass): "
                           "the kernel is built from its CUTLASS headers")
    include = Path(next(iter(found.submodule_search_locations))) / "source" / "include"
    if not (include / "cutlass" / "cutlass.h").is_file():
        raise RuntimeError(f"the nvidia-cutlass package has no CUTLASS headers at {include}")
    return [include]


def _multiple_of_align(field):
    def check(value):
        if isinstance(value, bool) or not isinstance(value, int) or not 1 <= value <= 2**31 - 1:
            raise ValueError(f"{field} must be an integer >= 1, got {value!r}")
        if value % ALIGN:
            raise ValueError(f"{field}={value}: must be a multiple of {ALIGN} (TMA needs 16-byte aligned "
                             f"rows of FP16/BF16); the kernel refuses other {field}")
        return value
    return check


SHAPE = {"m": range(1, 2**31), "n": _multiple_of_align("n"), "k": _multiple_of_align("k"),
         "dtype": tuple(DTYPES)}
TENSORS = {"a": ("in", "m, k", "dtype"), "b": ("in", "n, k", "dtype"), "d": ("out", "m, n", "dtype")}
FLOPS = "2 * m * n * k"


def tolerance(shape):
    """||d - ref|| / ||ref|| against an FP64 product: the output's rounding (unit roundoff
    2^-11 for FP16, 2^-8 for BF16; norm-wise about half of it) with room for FP32 sums over k."""
    return 2e-3 if shape["dtype"] == "fp16" else 8e-3


def reference(inputs, shape):
    return inputs["a"].double() @ inputs["b"].double().t()


def label(shape):
    return f"m={shape['m']} n={shape['n']} k={shape['k']} {shape['dtype']}"


# The small shapes compute-sanitizer runs every variant on: each configuration (skinny m <= 128,
# large above) with m, n, k off every tile size (odd m; n, k multiples of 8 only), the skinny
# one's with a long k.
SANITIZE_SHAPES = [{"m": 37, "n": 200, "k": 1032, "dtype": "fp16"},
                   {"m": 331, "n": 264, "k": 328, "dtype": "fp16"},
                   {"m": 331, "n": 264, "k": 328, "dtype": "bf16"}]


def _matmul(shape):
    import torch

    def run(inputs):  # into the kernel's own output tensor: no allocation, as the kernel has none
        torch.matmul(inputs["a"], inputs["b"].t(), out=inputs["d"])
    return run


PEERS = {"torch_matmul": _matmul}


# ---- which compiled instance is which ------------------------------------------------------
# The base's two configurations are instances of cutlass::device_kernel<GemmUniversal<
# ProblemShape, ...>>: large with a rank-3 problem shape (cute::tuple<int, int, int>), skinny
# with rank 4; the element type is in the wgmma atom's name (MMA_..._F32F16F16 or
# _F32BF16BF16). Names come demangled where c++filt is on the PATH, mangled otherwise
# (tupleIJiiiEE / tupleIJiiiiEE): both are read.
_RANK = {"cute::tuple<int, int, int>,": 3, "tupleIJiiiEE": 3, "cute::tuple<int, int, int, int>": 4,
         "tupleIJiiiiEE": 4}
_MMA = re.compile(r"MMA_\d+x\d+x\d+_F32(BF16|F16)")


def _config(kernel_name):
    ranks = {rank for text, rank in _RANK.items() if text in kernel_name}
    dtypes = {{"F16": "fp16", "BF16": "bf16"}[t] for t in _MMA.findall(kernel_name)}
    if len(ranks) != 1 or len(dtypes) != 1:
        return None
    return f"{dtypes.pop()}_{'large' if ranks.pop() == 3 else 'skinny'}"


def config_of(kernel_name, configs):
    name = _config(kernel_name)
    return name if name in {c["name"] for c in configs} else None


def launched(kernel_name, shape, configs):
    want = f"{shape['dtype']}_{'skinny' if shape['m'] <= SKINNY_MAX_M else 'large'}"
    return config_of(kernel_name, configs) == want
