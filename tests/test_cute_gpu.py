"""CuTe DSL kernels on a GPU: every variant of QuACK's RMSNorm (kernels/quack_rmsnorm) and of
the test's own kernel (tests/fixtures/plugins/cute_scale) loaded from its TVM-FFI object
through the gate, the base bit for bit what QuACK's own entry computes, launches captured in
a CUDA graph on torch's current stream (TVM-FFI's environment stream), and a job timed, on
half the SMs too (a green context's stream)."""
from pathlib import Path

import pytest

pytest.importorskip("cutlass", reason="the CuTe DSL is not installed (pip install -e '.[cute]')")
torch = pytest.importorskip("torch")

from ablate.gpu.check import check, poisoned_inputs  # noqa: E402
from ablate.job import plugins  # noqa: E402
from ablate.pipeline import job_of, run_job  # noqa: E402
from conftest import loaded_pathologies  # noqa: E402

FIXTURES = Path(__file__).resolve().parent / "fixtures" / "plugins"
pytestmark = pytest.mark.gpu

try:
    QUACK = plugins.load("quack_rmsnorm")
except plugins.PluginError:
    QUACK = None
needs_quack = pytest.mark.skipif(QUACK is None, reason="quack-kernels is not installed (pip install -e '.[cute]')")
PATHOLOGIES = sorted(p.stem for p in (QUACK.conf / "pathology").glob("*.yaml")) if QUACK else []
SHAPES = [*QUACK.spec.SANITIZE_SHAPES, {"rows": 4096, "hidden": 8192, "dtype": "bf16"},
          {"rows": 1000, "hidden": 8192, "dtype": "fp16"}] if QUACK else []


@pytest.fixture(scope="module")
def kernels():
    return loaded_pathologies("quack_rmsnorm", ["none", *PATHOLOGIES])


@needs_quack
@pytest.mark.parametrize("shape", SHAPES, ids=lambda s: QUACK.spec.label(s))
@pytest.mark.parametrize("pathology", ["none", *PATHOLOGIES])
def test_every_quack_variant_passes_the_gate(kernels, pathology, shape):
    out = check(kernels[pathology], QUACK.spec.validate_shape(shape), seed=3)
    assert out["ok"], f"{pathology} on {QUACK.spec.label(shape)}: {out['error']}"


@needs_quack
@pytest.mark.parametrize("dtype", ["bf16", "fp16"])
def test_the_base_computes_what_quacks_own_entry_does(kernels, dtype):
    from quack.rmsnorm import rmsnorm_fwd

    shape = QUACK.spec.validate_shape({"rows": 4096, "hidden": 8192, "dtype": dtype})
    tensors = poisoned_inputs(QUACK.spec, shape, 7, "cuda")
    kernels["none"](tensors, shape)
    y, _, rstd = rmsnorm_fwd(tensors["x"], tensors["w"], eps=QUACK.spec.EPS, store_rstd=True)
    torch.cuda.synchronize()
    assert torch.equal(tensors["y"], y) and torch.equal(tensors["rstd"], rstd)


@needs_quack
def test_a_graph_captures_the_launch_on_the_capture_stream(kernels):
    """The timing replays graphs: the launch must follow torch's current stream into the
    capture (a cached stream would leave the graph empty and the 'time' a few ns)."""
    shape = QUACK.spec.validate_shape({"rows": 4096, "hidden": 8192, "dtype": "bf16"})
    tensors = poisoned_inputs(QUACK.spec, shape, 5, "cuda")
    kernels["none"](tensors, shape)  # loads the module outside the capture
    torch.cuda.synchronize()
    tensors["y"].fill_(float("nan"))
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        kernels["none"](tensors, shape)
    graph.replay()
    torch.cuda.synchronize()
    assert not torch.isnan(tensors["y"]).any()


@needs_quack
@pytest.mark.parametrize("pathology", ["late_weight", "half_sms"])
def test_a_job_is_timed_against_its_base(tmp_path, pathology):
    job = job_of(plugins.compose("quack_rmsnorm", [f"pathology={pathology}", "mode=gpu", "shape=tok4k_bf16",
                                                   "bench.peers=[torch_rms_norm,liger,quack]"]))
    r = run_job(job)
    assert r.status == "ok", r.error
    assert r.metrics["base_us"] > 0 and r.metrics["variant_us"] > 0
    assert r.params["peer"] == "torch_rms_norm" and r.metrics["peer_us"] > 0
    assert not [k for k in r.params if k.startswith("peer_") and k.endswith("_skipped")], r.params


def test_the_tests_own_kernel_is_checked_and_timed():
    for pathology in ("none", "scalar_loads"):
        job = job_of(plugins.compose("cute_scale", [f"pathology={pathology}", "mode=gpu", "shape.rows=4096"],
                                     kernel_path=[FIXTURES]))
        r = run_job(job)
        assert r.status == "ok", (pathology, r.error)
