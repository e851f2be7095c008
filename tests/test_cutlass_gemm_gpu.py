"""The CUTLASS GEMM plugin's correctness on a GPU (an sm_90 one: the kernel is sm_90a code): the
base built on each of its candidate configurations (spec.CANDIDATES: a build compiles one) and
every pathology of its own built on the kernel's default (large) against the spec's reference,
outputs poisoned with NaN before every launch, both dtypes, m, n, k off every tile size (odd m; n
and k multiples of 8, as TMA requires); launches on a side stream and in a CUDA graph; and the
refusals: n or k not a multiple of 8, by the shape's validation (naming the field) and by the ABI
(cudaErrorInvalidValue, nothing written)."""
import zlib

import pytest

torch = pytest.importorskip("torch")

from ablate.job import plugins  # noqa: E402
from ablate.gpu.check import compare, poisoned_inputs  # noqa: E402
from ablate.build.library import KernelError  # noqa: E402

from conftest import loaded_pathologies  # noqa: E402
GEMM = plugins.load("cutlass_gemm")
SPEC = GEMM.spec
# Its own pathologies (the generic ones are tested for every kernel in test_generic_gpu).
PATHOLOGIES = ["none"] + sorted(p for p in GEMM.options("pathology")
                                if (GEMM.dir / "conf" / "pathology" / f"{p}.yaml").exists())
# (m, n, k): every configuration runs every shape, so these cover the edges of each one's tiles:
# m of one row to past a wave, odd; n and k multiples of 8 off 64 and 128, rows off 128-byte lines
# and on them; grids padded by 2x1, 4x1 and 4x2 clusters.
CASES = [(1, 8, 8), (5, 1000, 1000), (16, 4096, 4096), (24, 14336, 1032), (37, 200, 1032), (65, 520, 2056),
         (83, 2072, 328), (100, 8200, 1000), (128, 1024, 328), (133, 4104, 1032), (150, 11968, 1000),
         (200, 2200, 320), (245, 1000, 320), (331, 1416, 1000), (513, 1000, 1088), (777, 5000, 1000),
         (1289, 1416, 328), (1677, 1288, 320), (2049, 4104, 520)]

pytestmark = pytest.mark.gpu


@pytest.fixture(scope="session")
def kernels():
    """name -> Kernel: the base and every pathology on the default configuration, and the base on
    each candidate (`none@<candidate>`), built once, in two ninja runs."""
    from ablate.build.compile import unavailable
    from ablate.build.library import load
    from ablate.tools.sanitize import build_candidates

    if why := unavailable(GEMM):
        pytest.skip(why)
    built = build_candidates(GEMM, list(SPEC.CANDIDATES))
    for name, result in built.items():
        assert result.ok, f"{name} failed to build:\n{result.log}"
    return {**loaded_pathologies("cutlass_gemm", PATHOLOGIES),
            **{name: load(result.lib, SPEC) for name, result in built.items()}}


BUILDS = PATHOLOGIES + [f"none@{c}" for c in SPEC.CANDIDATES]


def seed_of(request):
    return zlib.crc32(request.node.nodeid.encode())


def run_case(kernel, m, n, k, dtype, seed):
    shape = SPEC.validate_shape({"m": m, "n": n, "k": k, "dtype": dtype})
    tensors = poisoned_inputs(SPEC, shape, seed, "cuda")
    kernel(tensors, shape)
    torch.cuda.synchronize()
    return compare(SPEC, tensors, shape, SPEC.tolerance(shape)), tensors


@pytest.mark.parametrize("dtype", ["fp16", "bf16"])
@pytest.mark.parametrize("name", BUILDS)
def test_matches_reference(kernels, request, name, dtype):
    for m, n, k in CASES:
        result, tensors = run_case(kernels[name], m, n, k, dtype, seed_of(request) + m * n + k)
        assert result["ok"], f"{name} {dtype} {m}x{n}x{k}: {result['error']}"
        # Row by row too: one wrong row (a tile edge) is too small a share to move the global error.
        ref = SPEC.reference(tensors, {})["d"]
        row_err = (tensors["d"].double() - ref).norm(dim=-1) / ref.norm(dim=-1)
        assert float(row_err.max()) < 4 * SPEC.tolerance({"dtype": dtype}), \
            f"{name} {dtype} {m}x{n}x{k}: row {int(row_err.argmax())} has rel err {float(row_err.max()):.3g}"


@pytest.mark.parametrize("name", BUILDS)
def test_side_stream_and_graph(kernels, request, name):
    """On a non-default stream, and captured in a CUDA graph after an uncaptured launch of
    the shape (stream-K's workspace is allocated then: allocation is illegal in a capture)."""
    for m, n in ((1, 4096), (83, 2072), (333, 520), (1289, 1416)):
        shape = SPEC.validate_shape({"m": m, "n": n, "k": 1032, "dtype": "fp16"})
        tensors = poisoned_inputs(SPEC, shape, seed_of(request) + m, "cuda")
        side = torch.cuda.Stream()
        side.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(side):
            kernels[name](tensors, shape)
        side.synchronize()
        assert compare(SPEC, tensors, shape, SPEC.tolerance(shape))["ok"], f"{name} m={m} on a side stream"
        tensors["d"].fill_(float("nan"))
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph):
            kernels[name](tensors, shape)
        graph.replay()
        torch.cuda.synchronize()
        assert compare(SPEC, tensors, shape, SPEC.tolerance(shape))["ok"], f"{name} m={m} replayed from a graph"


@pytest.mark.parametrize("field", ["n", "k"])
def test_unaligned_n_or_k_is_refused_naming_the_field(kernels, field):
    shape = {"m": 64, "n": 1000, "k": 1000, "dtype": "fp16"}
    shape[field] = 1001
    with pytest.raises(ValueError, match=rf"^{field}=1001: must be a multiple of 8"):
        SPEC.validate_shape(shape)
    # The ABI refuses it too, writing nothing.
    good = SPEC.validate_shape({"m": 64, "n": 1000, "k": 1000, "dtype": "fp16"})
    tensors = SPEC.make_inputs(good, torch.Generator(device="cuda").manual_seed(0), "cuda")
    tensors["d"].fill_(7)
    with pytest.raises(KernelError, match=r"ablate_cutlass_gemm returned cudaErrorInvalidValue \(1\)"):
        kernels["none"](tensors, shape)
    torch.cuda.synchronize()
    assert bool((tensors["d"] == 7).all())
