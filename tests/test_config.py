"""Composing the app's config: every shape with every pathology, and bad input refused with
a message that names the problem, before anything is built."""
import os
import subprocess
import sys
from pathlib import Path

import pytest
from hydra import compose, initialize_config_dir
from hydra.errors import MissingConfigException

from ablate.shapes import validate_shape
from ablate.timing import validate_bench
from ablate.variant import variant_from_cfg

ROOT = Path(__file__).resolve().parents[1]
CONF = ROOT / "conf"
SHAPES = sorted(p.stem for p in (CONF / "shape").glob("*.yaml"))
PATHOLOGIES = sorted(p.stem for p in (CONF / "pathology").glob("*.yaml"))


@pytest.fixture(scope="module")
def composer():
    with initialize_config_dir(config_dir=str(CONF), version_base=None):
        yield lambda *overrides, **kw: compose("config", overrides=list(overrides), **kw)


def test_defaults(composer):
    cfg = composer()
    assert list(cfg.pathology) == ["none"]
    assert cfg.mode == "gpu"
    assert dict(cfg.shape) == {"batch": 4, "heads": 8, "seq": 512, "head_dim": 64, "causal": False}
    assert cfg.bench.l2 == "cold" and cfg.bench.tolerance == 2e-3
    assert list(cfg.bench.sdpa_backends) == ["flash", "cudnn"]
    validate_bench(cfg.bench)
    hydra_cfg = composer(return_hydra_config=True).hydra
    assert hydra_cfg.callbacks.sweep_setup._target_ == "ablate.callbacks.SweepSetup"


def test_every_shape_with_every_pathology(composer):
    assert "none" in PATHOLOGIES and len(PATHOLOGIES) >= 2 and len(SHAPES) == 20
    for shape in SHAPES:
        for pathology in PATHOLOGIES:
            cfg = composer(f"shape={shape}", f"pathology={pathology}")
            validate_shape(cfg.shape, cfg.kernel.head_dims)
            variant = variant_from_cfg(cfg.pathology, ROOT)
            assert variant.name == pathology, f"shape={shape} pathology={pathology}"


def test_combined_pathologies_merge(composer):
    a, b = [p for p in PATHOLOGIES if p != "none"][:2]
    cfg = composer(f"pathology=[{b},{a}]")
    assert set(cfg.pathology) == {a, b}
    assert variant_from_cfg(cfg.pathology, ROOT).name == f"{a}+{b}"


@pytest.mark.parametrize("group, choices", [("shape", SHAPES), ("pathology", PATHOLOGIES)])
def test_unknown_choice_names_the_choices(composer, group, choices):
    with pytest.raises(MissingConfigException) as err:
        composer(f"{group}=no_such_thing")
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
        (["shape.head_dim=96"], r"ablate: shape: head_dim=96 is not built; kernel.head_dims is [64, 128]"),
        (["shape.seq=0"], "ablate: shape: seq must be >= 1"),
        (["shape=s4k", "shape.batch=-2"], "ablate: shape: batch must be >= 1"),
        (["bench.l2=hot"], "ablate: bench.l2 must be cold or warm, got 'hot'"),
        (["bench.sdpa_backends=[flash,fast]"], "ablate: bench.sdpa_backends: unknown ['fast']"),
        (["mode=fast"], "ablate: mode must be one of ['gpu', 'static'], got 'fast'"),
        (["bench.min_effect=2"], "ablate: bench.min_effect must be a number in [0, 1), got 2"),
        (["-m", "pathology=glob(*)", "shape.head_dim=96"], "ablate: shape: head_dim=96 is not built"),
    ],
    ids=["head_dim_96", "seq_0", "batch_negative", "l2", "sdpa_backend", "mode", "min_effect",
         "multirun_head_dim"],
)
def test_bad_input_stops_before_any_build(tmp_path, args, message):
    proc = run_app(tmp_path, *args)
    assert proc.returncode != 0
    assert message in proc.stderr, proc.stderr
    assert "Traceback" not in proc.stderr
    assert not (tmp_path / "build").exists(), "something was built despite the bad input"
    assert not (tmp_path / "mlflow.db").exists(), "something was recorded despite the bad input"


def test_unknown_shape_from_the_command_line(tmp_path):
    proc = run_app(tmp_path, "shape=s3k")
    assert proc.returncode != 0
    assert "Could not find 'shape/s3k'" in proc.stderr and "s4k_d128_causal" in proc.stderr
    assert not (tmp_path / "build").exists()
