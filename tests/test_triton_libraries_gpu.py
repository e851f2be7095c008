"""Triton kernels as libraries ship them, on a GPU: an autotuned kernel's base is the config
its own autotuner picks for the shape (tuned once, recorded in the build folder and the job),
and Liger-Kernel's RMSNorm (kernels/liger_rmsnorm), every variant through the gate, its base
bit for bit what Liger's own entry computes (the spec's launch is the library's)."""
import json
from pathlib import Path

import pytest

pytest.importorskip("triton", reason="triton is not installed")
torch = pytest.importorskip("torch")

from ablate.build import triton_autotune, triton_target  # noqa: E402
from ablate.gpu.check import check, poisoned_inputs  # noqa: E402
from ablate.job import plugins  # noqa: E402
from ablate.pipeline import job_of as make_job  # noqa: E402  (on the autotuner's pick)
from ablate.pipeline import run_job  # noqa: E402

from conftest import composed_again_untimed, loaded_pathologies  # noqa: E402

FIXTURES = Path(__file__).resolve().parent / "fixtures" / "plugins"
pytestmark = pytest.mark.gpu


def test_the_autotuned_base_is_the_autotuners_pick_tuned_once(tmp_path, monkeypatch):
    """Tuned in the GPU child (a spec {"autotune": ...}), recorded, read back by the next job."""
    cfg = plugins.compose("tuned_axpy", ["pathology=small_block", "mode=gpu", f"build.dir={tmp_path}"],
                          kernel_path=[FIXTURES])
    job = make_job(cfg)
    configs = triton_autotune.configs(job.plugin.spec)
    assert job.base.base_meta in configs and job.variant.base_meta == job.base.base_meta
    assert job.tuned["configs_timed"] == 3 and len(job.tuned["timings"]) == 3
    assert json.loads(min(job.tuned["timings"], key=lambda c: job.tuned["timings"][c][0])) == job.base.base_meta
    assert len(list((tmp_path / "autotune").glob("*.json"))) == 1
    # the next job of the sweep reads the record: it does not tune again
    again = composed_again_untimed(cfg, monkeypatch)
    assert again.base.base_meta == job.base.base_meta
    r = run_job(again)
    assert r.status == "ok", r.error
    assert r.params["base_meta_from"] == "autotuner"


def test_fixed_constexprs_beside_tuned_keys_a_constexpr_of_the_shape_and_a_heuristic(tmp_path):
    """shaped_scale, shaped as Liger's DyT: HAVE_BETA from META, N from the shape, BLOCK_N and
    num_warps from the autotuner, EVEN from the heuristic below it, at two widths (two
    instances): each tuned in the child, each job through the gate and timed."""
    for cols in (1000, 1024):
        job = make_job(plugins.compose("shaped_scale", ["pathology=half_warps", "mode=gpu", f"shape.cols={cols}",
                                                        f"build.dir={tmp_path}"], kernel_path=[FIXTURES]))
        assert job.failed is None, job.failed
        assert job.tuned["sources"]["N"] == "shape" and job.tuned["sources"]["HAVE_BETA"] == "spec.META"
        meta = job.base.base_meta
        assert meta["HAVE_BETA"] is True and meta["BLOCK_N"] in (256, 512) and meta["num_warps"] in (2, 4)
        assert job.tuned["configs_timed"] == 4
        r = run_job(job)
        assert r.status == "ok", r.error
        assert r.params["base_meta_sources"] == ("autotuner: BLOCK_N, num_stages, num_warps; spec.META: HAVE_BETA; "
                                                 "shape: N; heuristics: EVEN")


def test_an_autotuner_subclass_with_pruning_hooks_and_a_pinned_key(tmp_path):
    """tuned_subclass: a library's own Autotuner subclass, prune_configs_by, reset_to_zero and
    restore_value naming the call's tensors, a heuristic above it, n not specialized; META pins
    num_warps to 4, so the autotuner times only those 3 of its 6 configs."""
    job = make_job(plugins.compose("tuned_subclass", ["pathology=none", "mode=gpu", f"build.dir={tmp_path}"],
                                   kernel_path=[FIXTURES]))
    assert job.failed is None, job.failed
    assert job.tuned["configs_timed"] == 3 and job.base.base_meta["num_warps"] == 4
    assert {json.loads(c)["num_warps"] for c in job.tuned["timings"]} == {4}
    assert job.tuned["sources"]["num_warps"] == "spec.META" and job.tuned["sources"]["WIDE"] == "heuristics"
    r = run_job(job)
    assert r.status == "ok", r.error


def test_a_config_that_cannot_compile_is_the_jobs_error_naming_it(tmp_path, monkeypatch):
    """FAIL_CONFIG=1 puts a config of BLOCK 3 first (tl.arange wants a power of two): Triton's
    autotuner raises on it; the job is recorded crashed on the base's side, naming the config,
    and the GPU child starts afresh for what comes next."""
    from ablate.gpu.worker import stop_worker

    stop_worker()  # a child started now inherits the environment below
    monkeypatch.setenv("FAIL_CONFIG", "1")
    try:
        job = make_job(plugins.compose("tuned_subclass", ["pathology=none", "mode=gpu", f"build.dir={tmp_path}"],
                                       kernel_path=[FIXTURES]))
    finally:
        stop_worker()
    assert job.failed and "while timing config {'BLOCK': 3" in job.failed, job.failed
    r = run_job(job)
    assert r.status == "crashed" and r.params["failed_side"] == "base" and "'BLOCK': 3" in r.error


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


# ---- the library kernels by module path: DyT (Liger) and the L2 norm (fla) -------------------

def _library(kernel, package):
    try:
        __import__(package)
        return plugins.load(kernel)
    except ImportError:
        return None


DYT, FLA = _library("liger_dyt", "liger_kernel"), _library("fla_l2norm", "fla")


@pytest.mark.skipif(DYT is None, reason="liger-kernel is not installed (pip install -e '.[liger]')")
@pytest.mark.parametrize("dtype", ["bf16", "fp16"])
def test_dyt_by_module_path_computes_what_ligers_own_entry_does(tmp_path, dtype):
    """The base, on the autotuner's pick at the shape, bit for bit what liger_dyt_fwd returns
    (elementwise: no config changes a bit of it)."""
    from ablate.build.library import load
    from ablate.build.compile import build
    from liger_kernel.ops.dyt import liger_dyt_fwd

    from ablate.paths import ROOT

    job = make_job(plugins.compose("liger_dyt", ["pathology=none", "mode=gpu", f"shape.dtype={dtype}",
                                                 f"build.dir={tmp_path}"]))
    assert job.tuned and job.tuned["sources"]["N"] == "shape"
    lib = build([job.base], job.build, job.plugin, ROOT)[job.base.name]
    assert lib.ok, lib.log
    kernel = load(lib.lib, DYT.spec)
    tensors = poisoned_inputs(DYT.spec, job.shape, 7, "cuda")
    kernel(tensors, job.shape)
    y = liger_dyt_fwd(tensors["x"], tensors["alpha"], tensors["gamma"], tensors["beta"])
    torch.cuda.synchronize()
    assert torch.equal(tensors["y"], y)


@pytest.mark.skipif(FLA is None, reason="fla-core is not installed (pip install -e '.[fla]')")
def test_fla_l2norm_by_module_path_computes_what_flas_own_entry_does(tmp_path):
    from ablate.build.library import load
    from ablate.build.compile import build
    from fla.modules.norm.l2norm import l2norm_fwd

    from ablate.paths import ROOT

    job = make_job(plugins.compose("fla_l2norm", ["pathology=none", "mode=gpu", f"build.dir={tmp_path}"]))
    assert job.tuned["sources"]["NB"] == "shape" and job.tuned["sources"]["BT"] == "autotuner"
    lib = build([job.base], job.build, job.plugin, ROOT)[job.base.name]
    assert lib.ok, lib.log
    tensors = poisoned_inputs(FLA.spec, job.shape, 7, "cuda")
    load(lib.lib, FLA.spec)(tensors, job.shape)
    y, rstd = l2norm_fwd(tensors["x"], FLA.spec.EPS)
    torch.cuda.synchronize()
    # the row's sum may be reduced in another order where fla's autotuner picked another config
    torch.testing.assert_close(tensors["y"], y, rtol=8e-3, atol=1e-3)
    torch.testing.assert_close(tensors["rstd"], rstd, rtol=1e-5, atol=0)
