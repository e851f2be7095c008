"""matmul_triton on a GPU: the base and every variant (the cubins built ahead of time, loaded
through Triton's driver) against the spec's FP32 reference on fresh inputs, outputs poisoned
with NaN, both dtypes, with partial tiles and a K tail, and at a shipped shape; plus a launch
captured in a CUDA graph and replayed, as the timing does."""

import pytest

pytest.importorskip("triton", reason="triton is not installed")
torch = pytest.importorskip("torch")

from ablate.gpu.check import check, compare, poisoned_inputs  # noqa: E402
from ablate.job import plugins  # noqa: E402

from conftest import built_pathologies  # noqa: E402
MATMUL = plugins.load("matmul_triton")
PATHOLOGIES = sorted(MATMUL.options("pathology"), key=lambda n: n != "none")  # the base first
SHAPES = [*MATMUL.spec.SANITIZE_SHAPES, {"m": 4096, "n": 4096, "k": 4096, "dtype": "bf16"},
          {"m": 1024, "n": 14336, "k": 4096, "dtype": "fp16"}]

pytestmark = pytest.mark.gpu


@pytest.fixture(scope="module")
def built():
    """(name -> TritonKernel of the base and every pathology built for this GPU, {name: why}
    of those no sweep builds: a tunable's neighbour past the arch's limits cannot launch)."""
    return built_pathologies("matmul_triton", PATHOLOGIES)


@pytest.fixture(scope="module")
def kernels(built):
    return built[0]


@pytest.fixture(scope="module")
def not_built(built):
    return built[1]


@pytest.mark.parametrize("shape", SHAPES, ids=MATMUL.spec.label)
@pytest.mark.parametrize("pathology", PATHOLOGIES)
def test_every_variant_matches_the_reference(kernels, not_built, pathology, shape):
    if pathology in not_built:
        pytest.skip(f"{pathology} is not built, as in a sweep: {not_built[pathology]}")
    out = check(kernels[pathology], MATMUL.spec.validate_shape(shape), seed=3)
    assert out["ok"], f"{pathology} on {MATMUL.spec.label(shape)}: {out['error']}"


def test_a_launch_replays_in_a_cuda_graph(kernels):
    shape = MATMUL.spec.validate_shape(SHAPES[0])
    kernel = kernels["none"]
    tensors = poisoned_inputs(MATMUL.spec, shape, 5, "cuda")
    kernel(tensors, shape)  # eager first: loading the module stays out of the capture
    torch.cuda.synchronize()
    tensors["c"].fill_(float("nan"))
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        kernel(tensors, shape)
    assert torch.isnan(tensors["c"]).all()  # captured, not run
    graph.replay()
    torch.cuda.synchronize()
    out = compare(MATMUL.spec, tensors, shape, MATMUL.spec.tolerance(shape))
    assert out["ok"], out["error"]
