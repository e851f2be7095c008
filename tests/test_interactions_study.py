"""The interactions study on the CPU (docs/design.md "Interactions"): every variant that one
pathology builds, a pair builds too (regs_capped's cap needs the base built alongside); the
pairs that mean something (the kernel's own pathologies with one another and with the generic
ones; generic with generic only when asked); a design that pairs nothing stopped in one line,
never run as an ordinary sweep; pairs with a side not applicable dropped before anything is
timed; the narrowing options and the estimate line."""
import os
import subprocess
import sys
from pathlib import Path

import pytest
from omegaconf import OmegaConf

from ablate.build import compile as compile_mod
from ablate.job import plugins
from ablate.job.job import make_job
from conftest import kept_build_dir

ROOT = Path(__file__).resolve().parents[1]
FIXTURES = ROOT / "tests" / "fixtures" / "kernels"


def plain_cfg(*overrides):
    return plugins.compose("plain_axpy", ["mode=static", "build.jobs=1", f"build.dir={kept_build_dir('plain_axpy')}",
                                          *overrides], kernel_path=[FIXTURES])


# ---- every variant that one pathology builds, a pair builds too ---------------------------

def test_a_capped_variant_builds_the_base_alongside_when_not_asked_for():
    job = make_job(plain_cfg("pathology=regs_capped"))
    results = compile_mod.build([job.variant], job.build, job.plugin, ROOT)
    assert results["regs_capped"].ok and results["none"].ok
    assert results["regs_capped"].ptxas["max_registers"] < results["none"].ptxas["max_registers"]


def test_a_pair_with_regs_capped_builds_and_its_fingerprints_hold():
    """Its rests (each pathology alone) are built without the base in the list: before the
    base was built alongside, the pair crashed with `build the base alongside it`."""
    from ablate.pipeline import run_job

    result = run_job(make_job(plain_cfg("pathology=[no_unroll,regs_capped]")))
    assert result.status == "static", result.error
    assert result.metrics["fingerprint_ok"] == 1, result.error


# ---- the pairs that mean something, and the narrowing options ------------------------------

def plain_design(*overrides, names=("none", "no_unroll", "regs_capped", "no_launch_bounds", "strict_fp"),
                 kernel_path=FIXTURES):
    """The design's jobs and lines of an interactions sweep of plain_axpy over `names` (its
    base and generic pathologies built in the kept build, to know which apply)."""
    from hydra import compose, initialize_config_dir
    from hydra.core.global_hydra import GlobalHydra

    from ablate.sweep.design import interactions_design

    plugins.use(plugins.load("plain_axpy", [kernel_path]))
    task = ["kernel=plain_axpy", f"kernel_path=[{kernel_path}]", f"build.dir={kept_build_dir('plain_axpy')}",
            *overrides]
    with initialize_config_dir(config_dir=str(plugins.CONF), version_base=None):
        cfg = compose("config", overrides=["hydra/sweeper=interactions", *task], return_hydra_config=True)
        jobs, lines = interactions_design(cfg, GlobalHydra.instance().config_loader(),
                                          [[*task, f"pathology={n}", "shape=n1m"] for n in names])
    return [j[-1].split("=", 1)[1] for j in jobs], lines


def test_generic_with_generic_only_when_asked_and_one_mechanism_never(mlflow_store, monkeypatch):
    """A kernel with generic pathologies only (an unchanged foreign kernel): the design pairs
    nothing by default, and says so in one line that names the option, before anything is
    built; with interactions.pairs=all it pairs them, and says so before the first job, with
    the job count."""
    from ablate.sweep import design

    with monkeypatch.context() as m:  # stopped before the generic singles are built to see which apply
        m.setattr(design, "inapplicable", lambda jobs: pytest.fail("built before it stopped"))
        with pytest.raises(SystemExit) as e:
            plain_design("mode=static")
    assert str(e.value) == ("ablate: hydra/sweeper=interactions has nothing to pair: this sweep's pathologies are "
                            "all generic (no_launch_bounds, no_unroll, regs_capped, strict_fp), which pair with one "
                            "another only with interactions.pairs=all (up to 10 jobs), and the inversion switches "
                            "off the kernel's own seams only")
    got, lines = plain_design("mode=static", "interactions.pairs=all")
    pairs = [g for g in got if "," in g]
    # no_launch_bounds and regs_capped both redefine __launch_bounds__: one seam, generic.registers
    assert "[no_launch_bounds,regs_capped]" not in pairs and len(pairs) == 6 - 1
    assert "[no_unroll,regs_capped]" in pairs and "[no_launch_bounds,strict_fp]" in pairs
    assert lines == ["interactions: 5 of the 10 jobs pair generic pathologies with one another (interactions.pairs=all)",
                     "interactions: no inversion: it switches off two or more seams of the kernel's own, and this "
                     "sweep's pathologies are on 0 (none: all generic)",
                     "interactions: 10 jobs (static: none timed)"]
    from ablate.job.variant import VariantError

    with pytest.raises(VariantError, match="generic.registers"):
        make_job(plain_cfg("pathology=[no_launch_bounds,regs_capped]"))
    assert make_job(plain_cfg("pathology=regs_capped")).variant.seam_of("regs_capped") == "generic.registers"


def test_only_a_named_list_and_bad_values_name_the_field(mlflow_store):
    got, _ = plain_design("mode=static", "interactions.pairs=all", "interactions.only=[no_unroll,strict_fp]")
    assert got == ["none", "no_unroll", "strict_fp", "[no_unroll,strict_fp]"]
    for override, field in [("interactions.only=[no_unroll,no_such]", "interactions.only: no_such"),
                            ("interactions.only=most", "interactions.only must be"),
                            ("interactions.pairs=some", "interactions.pairs must be"),
                            ("interactions.only=significant", "interactions.only=significant: no timed")]:
        with pytest.raises(SystemExit, match=field) as e:
            plain_design("mode=static", override)
        assert "\n" not in str(e.value)


@pytest.mark.parametrize("overrides, why", [
    (["interactions.only=[no_unroll]"], "the sweep has one pathology (no_unroll): name two or more"),
    (["interactions.pairs=all", "interactions.only=[no_launch_bounds,regs_capped]"],
     "no two of this sweep's pathologies are on different seams, and two changes of one seam cannot be combined "
     "(generic.registers: no_launch_bounds, regs_capped)"),
    (["interactions.pairs=all", "hydra.sweeper.pairs=false"],
     "hydra.sweeper.pairs=false leaves the inversion, which needs two seams of the kernel's own; this sweep's "
     "pathologies are on 0 (none: all generic)"),
])
def test_a_design_that_pairs_nothing_stops_saying_why(mlflow_store, overrides, why):
    with pytest.raises(SystemExit) as e:
        plain_design("mode=static", *overrides)
    assert str(e.value).startswith("ablate: hydra/sweeper=interactions has nothing to pair: " + why)
    assert "\n" not in str(e.value)


def test_the_command_line_stops_before_the_first_job(tmp_path):
    """`python -m ablate -m hydra/sweeper=interactions` on the generic-only fixture, as a user
    types it: exit 1 with the line, and no job run."""
    env = {**os.environ, "MLFLOW_TRACKING_URI": f"sqlite:///{tmp_path / 'mlflow.db'}"}
    proc = subprocess.run(
        [sys.executable, "-m", "ablate", "-m", "hydra/sweeper=interactions", "kernel=plain_axpy",
         f"kernel_path=[{FIXTURES}]", "pathology=none,no_unroll,strict_fp", "shape=n1m", "mode=static",
         f"build.dir={tmp_path / 'build'}", f"hydra.sweep.dir={tmp_path / 'multirun'}"],
        cwd=ROOT, env=env, capture_output=True, text=True, timeout=600)
    assert proc.returncode == 1, proc.stdout + proc.stderr
    assert proc.stderr.strip().splitlines()[-1] == (
        "ablate: hydra/sweeper=interactions has nothing to pair: this sweep's pathologies are all generic "
        "(no_unroll, strict_fp), which pair with one another only with interactions.pairs=all (up to 4 jobs), and "
        "the inversion switches off the kernel's own seams only")
    assert not (tmp_path / "build").exists() and not list((tmp_path / "multirun").rglob("*.log"))


def fake_sweep(uri, kernel, jobs, sweep_id="2026-11-26/09-00-00", shape="n1m", at=1_700_000_000):
    """A sweep of `kernel` in the store at `uri`: its parent run and a job run per (pathology,
    status, significant, seconds after the sweep's start), each created at that time."""
    from mlflow import MlflowClient

    client = MlflowClient(uri)
    exp = client.get_experiment_by_name(kernel)
    exp = exp.experiment_id if exp else client.create_experiment(kernel)
    parent = client.create_run(exp, start_time=at * 1000, tags={"kind": "sweep", "kernel": kernel, "sweep_id": sweep_id})
    for name, status, sig, seconds in jobs:
        run = client.create_run(exp, start_time=(at + seconds) * 1000, tags={
            "kind": "job", "status": status, "mlflow.parentRunId": parent.info.run_id})
        client.log_param(run.info.run_id, "pathology", name)
        client.log_param(run.info.run_id, "pathologies", name.replace("+", ","))
        client.log_param(run.info.run_id, "shape", shape)
        if sig is not None:
            client.log_metric(run.info.run_id, "significant", sig)
    return parent.info.run_id


def test_only_significant_reads_the_kernels_latest_timed_sweep_and_the_estimate_its_pace(mlflow_store):
    # An older sweep where strict_fp was significant; the latest single-pathology one where it
    # is not; an interactions sweep after both (pairs), which is not a ranking of single ones.
    fake_sweep(mlflow_store, "plain_axpy", [("none", "ok", 0, 10), ("strict_fp", "ok", 1, 40)],
               sweep_id="old", at=1_700_000_000)
    fake_sweep(mlflow_store, "plain_axpy", [("none", "ok", 0, 100), ("no_unroll", "ok", 1, 130),
                                            ("strict_fp", "ok", 0, 160), ("no_l1", "not_applicable", None, 161),
                                            ("regs_capped", "ok", 1, 191)], sweep_id="latest", at=1_700_001_000)
    fake_sweep(mlflow_store, "plain_axpy", [("none", "ok", 0, 10), ("no_unroll+strict_fp", "ok", 1, 40)],
               sweep_id="pairs", at=1_700_002_000)
    got, lines = plain_design("interactions.pairs=all", "interactions.only=significant")
    assert got == ["none", "no_unroll", "regs_capped", "[no_unroll,regs_capped]"]
    # the latest single sweep's timed jobs took 30 s each (the gap before each: 130-100, 160-130, 191-161)
    assert lines[-1] == "interactions: 4 jobs, 4 of them timed; about 2 min at the pace of sweep latest (30.0 s a timed job)"
    # its shapes are not this sweep's: said, naming the field
    fake_sweep(mlflow_store, "plain_axpy", [("none", "ok", 0, 10), ("no_unroll", "ok", 1, 40)],
               sweep_id="other_shape", shape="n4m", at=1_700_003_000)
    with pytest.raises(SystemExit, match="interactions.only=significant: .*other_shape.*n4m"):
        plain_design("interactions.only=significant")
    # static: nothing timed, nothing to estimate
    assert plain_design("mode=static", "interactions.pairs=all")[1][-1] == "interactions: 10 jobs (static: none timed)"


def test_the_estimate_without_a_timed_sweep_says_so(mlflow_store):
    _, lines = plain_design("interactions.pairs=all")
    assert lines[-1].startswith("interactions: 10 jobs, 10 of them timed; no estimate of how long")


# ---- the issue's own sweep, narrowed: every job a result, none failed ----------------------

def test_a_static_interactions_sweep_with_regs_capped_pairs_has_no_failed_job(tmp_path):
    """rmsnorm's interactions, static, narrowed to two of its own pathologies and three generic
    ones: every pair with regs_capped builds (before, each crashed: `build the base alongside
    it`), no_restrict's pairs are left out (its machine code is the base's) in one line, and
    no job fails. Its build kept between sessions (the first compiles ten libraries)."""
    build = [f"build.dir={kept_build_dir('rmsnorm_interactions')}", "build.arch=sm_90"]
    env = {**os.environ, "MLFLOW_TRACKING_URI": f"sqlite:///{tmp_path / 'mlflow.db'}"}
    proc = subprocess.run(
        [sys.executable, "-m", "ablate", "-m", "hydra/sweeper=interactions", "kernel=rmsnorm", "pathology=glob(*)",
         "shape=r16k_h8k", "mode=static", "interactions.only=[scalar_loads,two_pass,regs_capped,no_unroll,no_restrict]",
         *build, f"hydra.sweep.dir={tmp_path / 'multirun'}"],
        cwd=ROOT, env=env, capture_output=True, text=True, timeout=1200)
    out = proc.stdout + proc.stderr
    assert proc.returncode == 0, out
    assert ("interactions: 2 jobs of combinations left out, a side not applicable to the kernel: "
            "no_restrict (equal machine code)") in out
    assert "interactions: 11 jobs (static: none timed)" in out
    from mlflow import MlflowClient

    client = MlflowClient(env["MLFLOW_TRACKING_URI"])
    runs = client.search_runs([client.get_experiment_by_name("rmsnorm_fwd").experiment_id], "tags.kind = 'job'")
    status = {r.data.params["pathology"]: r.data.tags["status"] for r in runs}
    # base, five singles, own x own (the inversion of two seams is that pair), own x generic
    assert sorted(status) == sorted(["none", "no_restrict", "no_unroll", "regs_capped", "scalar_loads", "two_pass",
                                     "scalar_loads+two_pass", "regs_capped+scalar_loads", "no_unroll+scalar_loads",
                                     "regs_capped+two_pass", "no_unroll+two_pass"])
    assert status["no_restrict"] == "not_applicable"
    assert {s for n, s in status.items() if n != "no_restrict"} == {"static"}, status
    fingerprints = {r.data.params["pathology"]: r.data.metrics.get("fingerprint_ok") for r in runs}
    assert fingerprints["regs_capped+scalar_loads"] == fingerprints["regs_capped+two_pass"] == 1, \
        {r.data.params["pathology"]: r.data.tags.get("error") for r in runs}
