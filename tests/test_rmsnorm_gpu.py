"""The RMSNorm kernel's own correctness on a GPU: the base and every pathology against the
spec's float32 reference on fresh random inputs, outputs poisoned with NaN before every
launch, both dtypes, odd row counts and hidden sizes from 8 to 16384 (every launch bucket,
its edges, and both the few-rows and the many-rows instance); plus bitwise determinism,
launches on a non-default stream and in a CUDA graph, and the ABI's refusals."""
import zlib

import pytest

torch = pytest.importorskip("torch")

from ablate.job import plugins  # noqa: E402
from ablate.gpu.check import compare  # noqa: E402
from ablate.build.library import KernelError  # noqa: E402

from conftest import loaded_pathologies  # noqa: E402
RMSNORM = plugins.load("rmsnorm")
SPEC = RMSNORM.spec
PATHOLOGIES = sorted(RMSNORM.options("pathology"), key=lambda n: n != "none")  # the base first
# (rows, hidden): each bucket's smallest and largest row and one inside, with few rows (the
# few-rows instance: every row in one wave of its blocks) and with many (past that wave on an
# H100: 4224 rows at hidden <= 256, 2112 at <= 1024, 1056 at 2048, 528 at 4096, 264 above).
CASES = [(1, 8), (3, 8), (7, 24), (1, 248), (5, 256), (3, 264), (17, 1000), (1, 1024),
         (33, 1032), (9, 2048), (5, 2056), (2, 4096), (3, 4104), (1, 8192), (3, 8200),
         (1, 16384), (2, 16376), (4225, 8), (4225, 1024), (5000, 264), (8191, 1000),
         (1100, 2048), (600, 4096), (300, 8192), (300, 16384)]

pytestmark = pytest.mark.gpu


@pytest.fixture(scope="session")
def kernels():
    """name -> Kernel: the base and every pathology built once, in one ninja run."""
    return loaded_pathologies("rmsnorm", PATHOLOGIES)


def seed_of(request):
    return zlib.crc32(request.node.nodeid.encode())


def run_case(kernel, rows, hidden, dtype, seed):
    """One launch on fresh seeded inputs with a NaN-poisoned output, compared with the
    reference: the check's verdict, and the tensors."""
    from ablate.gpu.check import poisoned_inputs

    shape = SPEC.validate_shape({"rows": rows, "hidden": hidden, "dtype": dtype, "eps": 1e-6})
    tensors = poisoned_inputs(SPEC, shape, seed, "cuda")
    kernel(tensors, shape)
    torch.cuda.synchronize()
    return compare(SPEC, tensors, shape, SPEC.tolerance(shape)), tensors


@pytest.mark.parametrize("dtype", ["fp16", "bf16"])
@pytest.mark.parametrize("name", PATHOLOGIES)
def test_matches_reference(kernels, request, name, dtype):
    for rows, hidden in CASES:
        result, tensors = run_case(kernels[name], rows, hidden, dtype, seed_of(request) + rows * hidden)
        assert result["ok"], f"{name} {dtype} {rows} x {hidden}: {result['error']}"
        # Row by row too: a wrong row is too small a share of a big tensor to move the global error.
        ref = SPEC.reference(tensors, {"eps": 1e-6})["y"]
        row_err = (tensors["y"].float() - ref).norm(dim=-1) / ref.norm(dim=-1)
        assert float(row_err.max()) < 4 * SPEC.TOLERANCE[dtype], \
            f"{name} {dtype} {rows} x {hidden}: row {int(row_err.argmax())} has rel err {float(row_err.max()):.3g}"


def test_a_scaled_row_is_scaled_and_a_zero_row_is_zero(kernels):
    """RMSNorm is scale-invariant per row (up to eps and the rounding of 1/sqrt, so not
    bitwise); eps keeps an all-zero row finite: exactly zero."""
    shape = SPEC.validate_shape({"rows": 3, "hidden": 4096, "dtype": "fp16", "eps": 1e-6})
    gen = torch.Generator(device="cuda").manual_seed(1)
    x = torch.randn(3, 4096, generator=gen, device="cuda", dtype=torch.float16)
    x[1] = x[0] * 4
    x[2] = 0
    w = torch.randn(4096, generator=gen, device="cuda", dtype=torch.float16)
    y = torch.full_like(x, float("nan"))
    kernels["none"]({"x": x, "w": w, "y": y}, shape)
    torch.cuda.synchronize()
    assert float((y[0].float() - y[1].float()).norm() / y[0].float().norm()) < SPEC.TOLERANCE["fp16"]
    assert torch.equal(y[2], torch.zeros_like(y[2]))


# A float sum in the order atomics arrive rounds differently from run to run: bitwise
# determinism is one of the things that pathology gives up (its yaml says so).
ORDER_DEPENDENT = {"atomic_reduce"}


@pytest.mark.parametrize("name", PATHOLOGIES)
def test_deterministic(kernels, request, name):
    """Same inputs, bitwise the same output, run after run (many rows: blocks overlap); for
    a reduction in arrival order, the same output within the tolerance."""
    from ablate.gpu.check import poisoned_inputs

    shape = SPEC.validate_shape({"rows": 4099, "hidden": 2056, "dtype": "bf16", "eps": 1e-6})
    tensors = poisoned_inputs(SPEC, shape, seed_of(request), "cuda")
    kernels[name](tensors, shape)
    first = tensors["y"].clone()
    for attempt in range(3):
        tensors["y"].fill_(float("nan"))
        kernels[name](tensors, shape)
        if name in ORDER_DEPENDENT:
            drift = float((tensors["y"].float() - first.float()).norm() / first.float().norm())
            assert drift < SPEC.TOLERANCE["bf16"] / 10, f"{name}: run {attempt + 2} drifts by {drift:.3g}"
            continue
        changed = int((tensors["y"].view(torch.int16) != first.view(torch.int16)).sum())
        assert changed == 0, f"{name}: run {attempt + 2} differs from run 1 in {changed} elements"


@pytest.mark.parametrize("name", PATHOLOGIES)
def test_non_default_stream_and_graph(kernels, request, name):
    from ablate.gpu.check import poisoned_inputs

    shape = SPEC.validate_shape({"rows": 513, "hidden": 4104, "dtype": "fp16", "eps": 1e-5})
    side = torch.cuda.Stream()
    with torch.cuda.stream(side):
        tensors = poisoned_inputs(SPEC, shape, seed_of(request), "cuda")
        kernels[name](tensors, shape)
    side.synchronize()
    assert compare(SPEC, tensors, shape, SPEC.tolerance(shape))["ok"], f"{name} on a side stream"
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        kernels[name](tensors, shape)
    tensors["y"].fill_(float("nan"))
    graph.replay()
    torch.cuda.synchronize()
    assert compare(SPEC, tensors, shape, SPEC.tolerance(shape))["ok"], f"{name} replayed from a graph"


def test_the_abi_refuses_bad_arguments_without_writing(kernels):
    from ablate.gpu.check import poisoned_inputs

    good = {"rows": 4, "hidden": 64, "dtype": "fp16", "eps": 1e-6}
    tensors = poisoned_inputs(SPEC, good, 0, "cuda")
    base = kernels["none"]
    for change in ({"hidden": 12}, {"hidden": 16392}, {"hidden": 0}, {"rows": 0}, {"dtype": "fp8"},
                   {"eps": -1.0}, {"eps": float("nan")}, {"rows": 2**31}):
        shape = {**good, **change}
        ptrs = {n: t.data_ptr() for n, t in tensors.items()}
        dtype = {"fp16": 0, "bf16": 1}.get(shape["dtype"], 7)
        rc = base._fn(ptrs["x"], ptrs["w"], ptrs["y"], shape["rows"], shape["hidden"], dtype,
                      shape["eps"], None)
        assert rc == 1, f"{change}: returned {rc}, not cudaErrorInvalidValue"
    misaligned = {n: t.data_ptr() for n, t in tensors.items()}
    misaligned["y"] += 2
    assert base.launch(misaligned, good) == 1
    torch.cuda.synchronize()
    assert torch.isnan(tensors["y"]).all(), "a refused call wrote to the output"
    with pytest.raises(KernelError, match=r"ablate_rmsnorm_fwd returned cudaErrorInvalidValue \(1\)"):
        base(tensors, {**good, "hidden": 12})
