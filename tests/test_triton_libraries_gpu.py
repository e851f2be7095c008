"""Triton kernels as libraries ship them, on a GPU: an autotuned kernel's base is the config
its own autotuner picks for the shape (tuned once, recorded in the build folder and the job),
and Liger-Kernel's RMSNorm (kernels/liger_rmsnorm), every variant through the gate, its base
bit for bit what Liger's own entry computes (the spec's launch is the library's)."""
from pathlib import Path

import pytest

pytest.importorskip("triton", reason="triton is not installed")
torch = pytest.importorskip("torch")

from ablate.build import triton_autotune, triton_target  # noqa: E402
from ablate.gpu.check import check, poisoned_inputs  # noqa: E402
from ablate.job import plugins  # noqa: E402
from ablate.job.job import make_job  # noqa: E402
from ablate.pipeline import run_job  # noqa: E402

from conftest import loaded_pathologies  # noqa: E402

FIXTURES = Path(__file__).resolve().parent / "fixtures" / "plugins"
pytestmark = pytest.mark.gpu


def test_the_autotuned_base_is_the_autotuners_pick_tuned_once(tmp_path, monkeypatch):
    cfg = plugins.compose("tuned_axpy", ["pathology=small_block", "mode=gpu", f"build.dir={tmp_path}"],
                          kernel_path=[FIXTURES])
    job = make_job(cfg)
    configs = triton_autotune.configs(job.plugin.spec)
    assert job.base.base_meta in configs and job.variant.base_meta == job.base.base_meta
    tuner = triton_target.autotuner(triton_target.load(str(job.plugin.dir), job.plugin.spec.TRITON))
    picked = tuner.best_config
    assert job.base.base_meta == triton_target.config_dict(picked)
    assert len(list((tmp_path / "autotune").glob("*.json"))) == 1
    # the next job of the sweep reads the record: it does not tune again
    monkeypatch.setattr(triton_autotune, "tune", lambda spec, shape: pytest.fail("tuned twice"))
    again = make_job(cfg)
    assert again.base.base_meta == job.base.base_meta
    r = run_job(again)
    assert r.status == "ok", r.error
    assert r.params["base_meta_from"] == "autotuner"


try:
    import liger_kernel  # noqa: F401
    LIGER = plugins.load("liger_rmsnorm")
except ImportError:
    LIGER = None
needs_liger = pytest.mark.skipif(LIGER is None, reason="liger-kernel is not installed (pip install -e '.[liger]')")
PATHOLOGIES = sorted(LIGER.options("pathology"), key=lambda n: n != "none") if LIGER else []
SHAPES = [*LIGER.spec.SANITIZE_SHAPES, {"rows": 16384, "hidden": 4096, "dtype": "bf16"},
          {"rows": 4096, "hidden": 4096, "dtype": "fp16"}] if LIGER else []


@pytest.fixture(scope="module")
def kernels():
    return loaded_pathologies("liger_rmsnorm", PATHOLOGIES)


@needs_liger
@pytest.mark.parametrize("shape", SHAPES, ids=lambda s: LIGER.spec.label(s))
@pytest.mark.parametrize("pathology", PATHOLOGIES)
def test_every_liger_variant_passes_the_gate(kernels, pathology, shape):
    out = check(kernels[pathology], LIGER.spec.validate_shape(shape), seed=3)
    assert out["ok"], f"{pathology} on {LIGER.spec.label(shape)}: {out['error']}"


@needs_liger
@pytest.mark.parametrize("dtype", ["bf16", "fp16"])
def test_the_base_computes_what_ligers_own_entry_does(kernels, dtype):
    from liger_kernel.ops.rms_norm import rms_norm_forward

    shape = LIGER.spec.validate_shape({"rows": 4096, "hidden": 4096, "dtype": dtype})
    tensors = poisoned_inputs(LIGER.spec, shape, 7, "cuda")
    kernels["none"](tensors, shape)
    y, _, rstd, *_ = rms_norm_forward(tensors["x"], tensors["w"], LIGER.spec.EPS, 0.0, "llama", None)
    torch.cuda.synchronize()
    assert torch.equal(tensors["y"], y) and torch.equal(tensors["rstd"], rstd)
