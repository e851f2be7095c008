"""matmul_triton's configurations by shape on a GPU: every candidate of spec.CANDIDATES (built
ahead of time, loaded through Triton's driver) against the FP32 reference on each kind of
instance (SANITIZE_SHAPES: every dimension a multiple of 16 with partial tiles and a K tail,
m = 1, m, n, k off the grid), outputs poisoned with NaN; and at every shape of the grid, the
base that shape chooses, at full size."""
from pathlib import Path

import pytest
from omegaconf import OmegaConf

pytest.importorskip("triton", reason="triton is not installed")
torch = pytest.importorskip("torch")

from ablate.gpu.check import check  # noqa: E402
from ablate.job import plugins  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
MATMUL = plugins.load("matmul_triton")
SPEC = MATMUL.spec
GRID = [n for n in MATMUL.options("shape") if n.startswith(("decode_m", "odd_", "sq2k_"))]

pytestmark = pytest.mark.gpu


@pytest.fixture(scope="module")
def candidates():
    """name -> TritonKernel of every candidate, built for this GPU into the project's build folder."""
    from ablate.build.compile import build
    from ablate.build.library import load
    from ablate.job.variant import Variant

    variants = [Variant(name=n, pathologies=(), base_meta={**SPEC.META, **c}) for n, c in SPEC.CANDIDATES.items()]
    cfg = OmegaConf.create({"dir": str(ROOT / "runs" / "build"), "arch": "auto", "jobs": 0})
    results = build(variants, cfg, MATMUL, ROOT)
    for name, r in results.items():
        assert r.ok, f"{name} failed to build:\n{r.log}"
    return {name: load(r.lib, SPEC) for name, r in results.items()}


@pytest.mark.parametrize("shape", SPEC.SANITIZE_SHAPES, ids=SPEC.label)
@pytest.mark.parametrize("name", list(SPEC.CANDIDATES))
def test_every_candidate_matches_the_reference_on_each_instance(candidates, name, shape):
    out = check(candidates[name], SPEC.validate_shape(shape), seed=3)
    assert out["ok"], f"{name} on {SPEC.label(shape)}: {out['error']}"


@pytest.mark.parametrize("shape_name", GRID)
def test_the_base_each_grid_shape_chooses_matches_the_reference(candidates, shape_name):
    shape = SPEC.validate_shape(OmegaConf.to_container(OmegaConf.load(MATMUL.conf / "shape" / f"{shape_name}.yaml")))
    out = check(candidates[SPEC.choose(shape)], shape, seed=4)
    assert out["ok"], f"{SPEC.choose(shape)} on {shape_name}: {out['error']}"


def launches_back_to_back(kernel, name, shapes, count=50):
    """`count` launches of `kernel` at each (m, n, k) on one workspace, C poisoned before each:
    each within the tolerance and every counter back at 0 (the programs of a tile running at
    once: what the interpreter's tests cannot show)."""
    from ablate.gpu.check import compare, poisoned_inputs

    for m, n, k in shapes:
        shape = SPEC.validate_shape({"m": m, "n": n, "k": k, "dtype": "bf16"})
        assert name in SPEC.candidates(shape), (name, shape)
        tensors = poisoned_inputs(SPEC, shape, 6, "cuda")
        for i in range(count):
            tensors["c"].fill_(float("nan"))
            kernel(tensors, shape)
            torch.cuda.synchronize()
            out = compare(SPEC, tensors, shape, SPEC.tolerance(shape))
            assert out["ok"], f"{name} on {SPEC.label(shape)}, launch {i}: {out['error']}"
            assert int(tensors["locks"].abs().sum()) == 0, f"{name} on {SPEC.label(shape)}, launch {i}"


@pytest.mark.parametrize("name", [n for n, c in SPEC.CANDIDATES.items() if c.get("SPLIT_K", 1) > 1])
def test_split_k_matches_the_reference_at_the_shapes_it_is_timed_and_leaves_its_counters_at_zero(candidates, name):
    """The split-K candidates at the worst shapes of the H200's random check (2026-12-02), where
    spec.candidates times them."""
    launches_back_to_back(candidates[name], name, ((704, 240, 5472), (784, 288, 2448), (208, 1328, 1712),
                                                   (880, 496, 1664)))


@pytest.mark.parametrize("name", [n for n, c in SPEC.CANDIDATES.items() if c.get("TAIL_SPLIT", 1) > 1])
def test_the_tail_split_matches_the_reference_and_leaves_its_counters_at_zero(candidates, name):
    """The tail-split candidates where their tails are split 2-4 ways (1616 x 2864: 35 tiles of
    128 x 128 past two waves, 3 ways; 3824 x 3568: 48 past six, 2 ways; in 128 x 256 tiles 24 past
    one, 4 ways, and 24 past three) and under a wave (880 x 496: every tile split 4 ways)."""
    launches_back_to_back(candidates[name], name, ((1616, 2864, 3296), (3824, 3568, 3792), (880, 496, 1664)),
                          count=20)
