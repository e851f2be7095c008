"""Composing the app's config: every kernel, every shape with every pathology, each kernel
seeing its own configs only; and bad input refused with a message that names the problem,
before anything is built or recorded."""
import os
import subprocess
import sys
from pathlib import Path

import pytest
from hydra.core.global_hydra import GlobalHydra
from hydra.errors import MissingConfigException

from ablate.job import plugins
from ablate.job.job import make_job
from ablate.job.bench import validate_bench
from ablate.job.variant import variant_from_cfg

ROOT = Path(__file__).resolve().parents[1]
KERNELS = {name: plugins.load(name) for name in ("attention", "rmsnorm")}


def test_defaults():
    cfg = plugins.compose()
    assert plugins.default_kernel() == "attention" and cfg.kernel.name == "attention"
    assert cfg.kernel.experiment == "flash_attention_fwd"  # where the earlier sweeps are
    assert list(cfg.pathology) == ["none"]
    assert cfg.mode == "gpu"
    assert dict(cfg.shape) == {"batch": 4, "heads": 8, "seq": 512, "head_dim": 64, "causal": False}
    assert cfg.bench.l2 == "cold" and cfg.bench.tolerance is None and cfg.bench.peers is None
    validate_bench(cfg.bench)
    job = make_job(cfg)
    plugin, shape, variant, peers = job.plugin, job.shape, job.variant, list(job.peers)
    assert plugin.name == "attention" and variant.is_base
    assert peers == ["sdpa_flash", "sdpa_cudnn"]
    hydra_cfg = plugins.compose(return_hydra_config=True).hydra
    assert hydra_cfg.callbacks.sweep_setup._target_ == "ablate.sweep.callbacks.SweepSetup"


def test_the_sweeper_leaves_checking_each_jobs_config_to_the_callback():
    """Hydra's basic sweeper composes every job once more only to find one that cannot be;
    ablate's callback composed each into its Job already (test_bad_input_stops_before_any_build)."""
    from hydra_plugins.ablate_interactions import InteractionsSweeper
    from hydra_plugins.ablate_sweeper import AblateSweeper

    assert plugins.compose(return_hydra_config=True).hydra.sweeper._target_ == "hydra_plugins.ablate_sweeper.AblateSweeper"
    # (by name: Hydra's plugin scan executes hydra_plugins' modules again, making new classes)
    assert "AblateSweeper" in [c.__name__ for c in InteractionsSweeper.__mro__]
    assert AblateSweeper.validate_batch_is_legal(None, [["shape=no_such_shape"]]) is None  # composes nothing


def test_rmsnorm_defaults():
    cfg = plugins.compose("rmsnorm", return_hydra_config=True)
    assert cfg.kernel.name == "rmsnorm" and cfg.hydra.runtime.choices.shape == "r16k_h8k"
    job = make_job(cfg)
    plugin, shape, variant, peers = job.plugin, job.shape, job.variant, list(job.peers)
    assert shape == {"rows": 16384, "hidden": 8192, "dtype": "fp16", "eps": 1e-6}
    assert peers == ["torch_eager", "torch_compile"]


@pytest.mark.parametrize("kernel", KERNELS)
def test_every_kernel_has_shapes_and_pathologies(kernel):
    shapes, pathologies = KERNELS[kernel].options("shape"), KERNELS[kernel].options("pathology")
    assert "none" in pathologies and len(pathologies) >= 7 and shapes


# One test per kernel and shape, not per kernel: attention's 18 shapes x 21 pathologies are
# ~380 compositions of Hydra's (96 s on the 2-core machine as one test), which the two test
# processes now share.
@pytest.mark.parametrize("kernel,shape", [(k, s) for k, p in KERNELS.items() for s in p.options("shape")])
def test_every_shape_with_every_pathology(kernel, shape):
    for pathology in KERNELS[kernel].options("pathology"):
        cfg = plugins.compose(kernel, [f"shape={shape}", f"pathology={pathology}"])
        assert make_job(cfg).variant.name == pathology, f"{kernel}: shape={shape} pathology={pathology}"


def test_glob_sees_the_chosen_kernels_configs_and_no_others():
    """What `pathology=glob(*)` and `shape=glob(*)` expand to: the options Hydra's config
    loader lists for the group, with the kernel's conf on the search path."""
    for name, plugin in KERNELS.items():
        plugins.compose(name)  # leaves the kernel shown to Hydra, as the app's start does
        with plugins_initialized():
            loader = GlobalHydra.instance().config_loader()
            assert loader.get_group_options("pathology") == plugin.options("pathology")
            assert loader.get_group_options("shape") == plugin.options("shape")
    assert not set(KERNELS["attention"].options("shape")) & set(KERNELS["rmsnorm"].options("shape"))


def plugins_initialized():
    from hydra import initialize_config_dir

    return initialize_config_dir(config_dir=str(plugins.CONF), version_base=None)


@pytest.mark.parametrize("kernel", KERNELS)
def test_calibrations_compose_for_every_kernel_apart_from_the_pathologies(kernel):
    plugin = KERNELS[kernel]
    assert plugin.options("calibration") == ["no_effect", "twice"]
    assert not set(plugin.options("calibration")) & set(plugin.options("pathology"))
    twice = make_job(plugins.compose(kernel, ["calibration=twice"])).variant
    assert twice.name == "twice" and twice.launches == 2 and twice.specs["twice"]["truth"] == 2.0
    assert twice.headers == ("ablate/include/ablate/calibration_null.cuh",)  # ablate's own header
    null = make_job(plugins.compose(kernel, ["calibration=no_effect"])).variant
    assert null.launches == 1 and null.specs["no_effect"]["truth"] == 1.0
    assert make_job(plugins.compose(kernel)).variant.is_base  # no calibration unless asked for


def test_combined_pathologies_merge():
    cfg = plugins.compose("attention", ["pathology=[no_swizzle,fp32_accum]"])
    assert set(cfg.pathology) == {"fp32_accum", "no_swizzle"}
    assert variant_from_cfg(cfg.pathology, KERNELS["attention"].dir).name == "fp32_accum+no_swizzle"


@pytest.mark.parametrize("group", ["shape", "pathology"])
def test_unknown_choice_names_the_choices(group):
    choices = KERNELS["rmsnorm"].options(group)
    with pytest.raises(MissingConfigException) as err:
        plugins.compose("rmsnorm", [f"{group}=no_such_thing"])
    text = str(err.value)
    assert f"Could not find '{group}/no_such_thing'" in text
    assert all(f"\t{c}\n" in text for c in choices)


def run_app(tmp_path, *args):
    """The app in a child process, with its build dir and MLflow store under tmp_path."""
    env = {**os.environ, "MLFLOW_TRACKING_URI": f"sqlite:///{tmp_path / 'mlflow.db'}"}
    return subprocess.run(
        [sys.executable, "-m", "ablate", *args, f"build.dir={tmp_path / 'build'}",
         f"hydra.run.dir={tmp_path / 'hydra'}", f"hydra.sweep.dir={tmp_path / 'multirun'}"],
        cwd=ROOT, env=env, capture_output=True, text=True, timeout=300)


@pytest.mark.parametrize(
    "args, message",
    [
        (["shape.head_dim=96"], "ablate: shape: head_dim must be one of [64, 128], got 96"),
        (["shape.seq=0"], "ablate: shape: seq must be >= 1"),
        (["shape=s4k", "shape.batch=-2"], "ablate: shape: batch must be >= 1"),
        (["kernel=rmsnorm", "shape.hidden=100"], "ablate: shape: hidden must be an integer from 8 to 16384, a multiple of 8"),
        (["kernel=rmsnorm", "shape.dtype=fp8"], "ablate: shape: dtype must be one of ['fp16', 'bf16']"),
        (["bench.l2=hot"], "ablate: bench.l2 must be cold or warm, got 'hot'"),
        (["bench.peers=[sdpa_flash,fast]"],
         "ablate: bench.peers: unknown ['fast']; the attention kernel's peers are ['sdpa_flash',"),
        (["kernel=rmsnorm", "bench.peers=[sdpa_flash]"],
         "ablate: bench.peers: unknown ['sdpa_flash']; the rmsnorm kernel's peers are ['torch_eager', "),
        (["mode=fast"], "ablate: mode must be one of ['gpu', 'static'], got 'fast'"),
        (["bench.min_effect=2"], "ablate: bench.min_effect must be a number in [0, 1), got 2"),
        (["-m", "pathology=glob(*)", "shape.head_dim=96"], "ablate: shape: head_dim must be one of [64, 128]"),
        (["kernel=nope"], "ablate: unknown kernel 'nope'"),
        (["-m", "kernel=attention,rmsnorm"], "ablate: kernel=attention,rmsnorm: one kernel per run"),
        (["kernel=rmsnorm", "pathology=no_swizzle"],
         "ablate: pathology 'no_swizzle' belongs to kernel 'attention' ("),
        (["-m", "kernel=rmsnorm", "pathology=none,fp32_accum"],
         "ablate: pathology 'fp32_accum' belongs to kernel 'attention' ("),
        (["shape=r16_h4k"], "ablate: shape 'r16_h4k' belongs to kernel 'rmsnorm' ("),
    ],
    ids=["head_dim_96", "seq_0", "batch_negative", "hidden_100", "dtype_fp8", "l2", "peer",
         "peer_of_another_kernel", "mode", "min_effect", "multirun_head_dim", "unknown_kernel",
         "kernel_sweep", "pathology_of_another_kernel", "swept_pathology_of_another_kernel",
         "shape_of_another_kernel"],
)
def test_bad_input_stops_before_any_build(tmp_path, args, message):
    proc = run_app(tmp_path, *args)
    assert proc.returncode != 0
    assert message in proc.stderr, proc.stderr
    assert "Traceback" not in proc.stderr
    assert not (tmp_path / "build").exists(), "something was built despite the bad input"
    assert not (tmp_path / "mlflow.db").exists(), "something was recorded despite the bad input"


def test_another_kernels_pathology_names_both_kernels(tmp_path):
    text = run_app(tmp_path, "kernel=rmsnorm", "pathology=no_swizzle").stderr
    assert "not to 'rmsnorm', the kernel of this run (kernel=rmsnorm)" in text
    assert "rmsnorm's pathology options: " in text and "none" in text


def test_unknown_kernel_lists_the_kernels(tmp_path):
    text = run_app(tmp_path, "kernel=nope").stderr
    assert "Available options in 'kernel':" in text
    assert "\tattention\t(" in text and "\trmsnorm\t(" in text


def test_unknown_shape_from_the_command_line(tmp_path):
    proc = run_app(tmp_path, "shape=s3k")
    assert proc.returncode != 0
    assert "Could not find 'shape/s3k'" in proc.stderr and "s4k_d128_causal" in proc.stderr
    assert not (tmp_path / "build").exists()
