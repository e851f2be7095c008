"""A run's exit status (ablate/sweep/outcome.py): non-zero with one line when no job produced
a result or the base failed at a shape; 0 when only variants failed. An empty selection is
one line and a non-zero exit; `make rank` of a sweep with no jobs, and the sanitizer, follow
the same rule."""
import os
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace

import pytest

from ablate.sweep import outcome
from conftest import kept_build_dir

ROOT = Path(__file__).resolve().parents[1]


def run_app(tmp_path, *args, build_dir=None, prelude=""):
    """`python -m ablate ARGS` with no GPU visible, its store and Hydra dirs under tmp_path;
    `prelude`: python run before the app is imported (to make its jobs raise, say)."""
    env = {**os.environ, "MLFLOW_TRACKING_URI": f"sqlite:///{tmp_path / 'mlflow.db'}", "CUDA_VISIBLE_DEVICES": ""}
    code = f"{prelude}\nimport ablate.__main__ as app\napp.entry()"
    argv = [*args, f"build.dir={build_dir or kept_build_dir('app')}", f"hydra.run.dir={tmp_path / 'hydra'}",
            f"hydra.sweep.dir={tmp_path / 'multirun'}", f"hydra.searchpath=[file://{ROOT / 'tests' / 'conf'}]"]
    return subprocess.run([sys.executable, "-c", code, *argv], cwd=ROOT, env=env, capture_output=True,
                          text=True, timeout=1200)


def mark(status, *, base=False, error=None, side=None, result=True, shape="s512"):
    return {"status": status, "summary": f"{status} {error or ''}", "shape": shape, "result": result,
            "base_failed": outcome.base_failed(base, status, {"failed_side": side} if side else {})}


def test_only_variants_failing_is_a_result_and_a_failing_base_is_not():
    marks = [mark("static", base=True), mark("crashed", error="CUDA error"),
             mark("incorrect", error="variant failed the correctness gate: rel err 1.0", side="variant"),
             mark("build_failed", error="the variant (p) failed to build: error", side="variant")]
    assert outcome.verdict(marks, len(marks)) is None
    for failed in (mark("crashed", base=True), mark("incorrect", base=True), mark("build_failed", base=True),
                   mark("incorrect", error="base failed the correctness gate: rel err 1.0", side="base"),
                   mark("incorrect", error="both failed", side="base,variant"),
                   mark("build_failed", error="the base (none) failed to build: error", side="base")):
        line = outcome.verdict([*marks, {**failed, "shape": "s4k"}], len(marks) + 1)
        assert line.startswith("the base failed at s4k") and "\n" not in line, line
    assert outcome.verdict([mark("crashed", result=False), {"status": "failed", "summary": "job 1 failed"}], 2) \
        .startswith("no job of 2 produced a result")
    assert outcome.verdict([], 3).startswith("no job of 3 produced a result")


def test_a_failed_base_build_in_a_variants_job_is_said_to_be_the_bases(monkeypatch):
    """run_job names the base when its build failed, even where the variant's did too: the
    rule reads that (the variant's name first would hide a failing base)."""
    from ablate import pipeline
    from ablate.build import compile as compile_mod
    from ablate.job import plugins
    from ablate.job.job import make_job

    job = make_job(plugins.compose("attention", ["pathology=scalar_loads", "shape=s512"]))

    def failed(name):
        return SimpleNamespace(ok=False, variant=name, log="error: no", log_path=Path("/x.failed.log"), arch="sm_90")
    monkeypatch.setattr(compile_mod, "build", lambda *a, **k: {job.base.name: failed("none"),
                                                               job.variant.name: failed("scalar_loads")})
    out = pipeline.run_job(job)
    assert out.status == "build_failed" and out.params["failed_side"] == "base", out.error
    assert outcome.base_failed(False, out.status, out.params) and out.error.startswith("the base (none)")
    monkeypatch.setattr(compile_mod, "build", lambda *a, **k: {job.base.name: SimpleNamespace(ok=True, arch="sm_90"),
                                                               job.variant.name: failed("scalar_loads")})
    out = pipeline.run_job(job)
    assert out.status == "build_failed" and out.params["failed_side"] == "variant", out.error
    assert not outcome.base_failed(False, out.status, out.params)


def test_a_build_that_cannot_start_is_the_bases_failure(monkeypatch):
    from ablate import pipeline
    from ablate.build import compile as compile_mod
    from ablate.job import plugins
    from ablate.job.job import make_job

    job = make_job(plugins.compose("attention", ["pathology=scalar_loads", "shape=s512"]))

    def cannot(*a, **k):
        raise compile_mod.BuildError("nvcc cannot be run")
    monkeypatch.setattr(compile_mod, "build", cannot)
    out = pipeline.run_job(job)
    assert out.status == "build_failed" and outcome.base_failed(False, out.status, out.params), out


@pytest.mark.parametrize("ok, side", [((True, True), None), ((False, True), "base"), ((True, False), "variant"),
                                      ((False, False), "base,variant")])
def test_the_gpu_gate_says_which_side_failed(ok, side):
    """The worker's incorrect result names the sides that failed their gate in the param
    outcome.base_failed reads, and the error names each."""
    from ablate.gpu.measure import gate_failure

    checks = {who: {"ok": good, "error": f"rel err of the {who}"} for who, good in zip(("base", "variant"), ok)}
    failed = gate_failure(checks)
    if side is None:
        assert failed is None
        return
    assert failed[0] == side
    assert failed[1] == "; ".join(f"{who} failed the correctness gate: rel err of the {who}" for who in side.split(","))
    assert outcome.base_failed(False, "incorrect", {"failed_side": failed[0]}) == ("base" in side)


def test_a_sweep_whose_base_fails_exits_non_zero_with_one_line(tmp_path):
    proc = run_app(tmp_path, "-m", "pathology=none,broken_build", "shape=s512", "mode=static",
                   "build.flags=[--no-such-nvcc-flag]", build_dir=tmp_path / "build")
    assert proc.returncode == 1, proc.stdout + proc.stderr
    last = proc.stderr.strip().splitlines()[-1]
    assert last.startswith("ablate: the base failed at s512"), proc.stderr
    assert "Traceback" not in proc.stderr


def test_a_single_job_follows_the_same_rule(tmp_path):
    proc = run_app(tmp_path / "a", "pathology=none", "shape=s512", "mode=static",
                   "build.flags=[--no-such-nvcc-flag]", build_dir=tmp_path / "build")
    assert proc.returncode == 1 and proc.stderr.strip().splitlines()[-1].startswith("ablate: the base failed at s512")
    proc = run_app(tmp_path / "b", "pathology=broken_build", "shape=s512", "mode=static")
    assert proc.returncode == 0, proc.stdout + proc.stderr  # a variant that fails to build is a result


def test_a_sweep_of_failed_variants_exits_0_and_one_of_no_result_exits_1(tmp_path):
    proc = run_app(tmp_path / "a", "-m", "pathology=broken_build,none", "shape=s512", "mode=static")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    boom = ("import ablate.pipeline as p\n"
            "def boom(job): raise AttributeError('no attribute x')\n"
            "p.run_job = boom")
    proc = run_app(tmp_path / "b", "-m", "pathology=broken_build", "shape=s512,s512_causal", "mode=static",
                   prelude=boom)
    assert proc.returncode == 1, proc.stdout + proc.stderr
    assert proc.stderr.strip().splitlines()[-1].startswith("ablate: no job of 2 produced a result"), proc.stderr


@pytest.mark.parametrize("glob, group", [("pathology=glob(zzz*)", "pathology"), ("shape=glob(q*)", "shape")])
def test_an_empty_selection_is_one_line_and_a_non_zero_exit(tmp_path, glob, group):
    proc = run_app(tmp_path, "-m", glob, "mode=static")
    out = proc.stdout + proc.stderr
    assert proc.returncode != 0, out
    assert proc.stderr.strip().splitlines() == [proc.stderr.strip()], out
    line = proc.stderr.strip()
    assert line.startswith(f"ablate: {glob} matches no {group} of kernel attention; it has: "), out
    assert ("none" if group == "pathology" else "s512") in line
    for noise in ("Traceback", "Callback", "IndexError", "Launching", "Warning"):
        assert noise not in out, out


def test_rank_of_a_sweep_with_no_jobs_exits_1(tmp_path, monkeypatch, project_root, empty_store, capsys):
    from omegaconf import OmegaConf

    from ablate.report import rank
    from ablate.sweep import tracking

    monkeypatch.setenv("MLFLOW_TRACKING_URI", empty_store(tmp_path / "mlflow.db"))
    cfg = OmegaConf.create({"mode": "static", "kernel": {"name": "attention", "experiment": "flash_attention_fwd"},
                            "build": {"arch": "sm_90"}, "shape": {"name": "s512"}, "pathology": {"none": None}})
    parent = tracking.start_sweep(cfg, project_root / "runs/hydra/multirun/2025-07-01/10-00-00")
    tracking.end_sweep(parent, "FINISHED")
    assert rank.main(["--out", str(tmp_path)]) == 1
    err = capsys.readouterr().err.strip().splitlines()[-1]
    assert err.startswith("rank: Sweep 2025-07-01/10-00-00") and err.endswith("no jobs logged, nothing to rank")


def test_the_sanitizer_fails_on_the_base_and_not_on_a_variant(capsys):
    from ablate.tools.sanitize import exit_status

    assert exit_status(["none", "no_swizzle"], ["no_swizzle"]) == 0
    assert exit_status(["none", "no_swizzle"], ["none"]) == 1
    assert exit_status([], []) == 1
    assert "the base (none) has errors" in capsys.readouterr().err


def test_a_sweep_whose_set_up_fails_stops_with_one_line_not_a_warning(tmp_path):
    """An exception in the sweep's callback (not bad input: a bug, a missing module) stops the
    sweep; Hydra would only warn, launch every job and exit 0."""
    boom = ("import ablate.sweep.design as d\n"
            "def boom(*a, **k): raise ImportError('cannot import name x')\n"
            "d.jobs_of_sweep = boom")
    proc = run_app(tmp_path, "-m", "pathology=none", "shape=s512", "mode=static", prelude=boom)
    out = proc.stdout + proc.stderr
    assert proc.returncode == 1, out
    assert proc.stderr.strip().splitlines()[-1] == "ablate: the sweep's set-up failed: ImportError: cannot import name x"
    assert "Launching" not in out and "UserWarning" not in out


def test_the_benchmark_says_in_one_line_that_the_base_failed_to_build(tmp_path):
    from ablate.job import plugins
    from ablate.job.job import make_job
    from ablate.tools.benchmark import build_base

    job = make_job(plugins.compose("rmsnorm", ["pathology=none", f"build.dir={tmp_path}",
                                               "build.flags=[--no-such-nvcc-flag]"]))
    with pytest.raises(SystemExit) as e:
        build_base(job)
    assert str(e.value).startswith("the base kernel failed to build: ") and "\n" not in str(e.value), e.value
    assert "failed.log" in str(e.value)


def test_an_interactions_sweep_whose_base_fails_exits_1(tmp_path):
    """The interactions design times the base at each shape: its failure fails the sweep, as
    any sweep's does (a failing pair is a variant's failure: a result)."""
    proc = run_app(tmp_path, "-m", "hydra/sweeper=interactions", "kernel=rmsnorm", "pathology=none,scalar_loads,tiny_blocks",
                   "shape=r16k_h8k", "mode=static", "build.flags=[--no-such-nvcc-flag]", build_dir=tmp_path / "build")
    assert proc.returncode == 1, proc.stdout + proc.stderr
    last = proc.stderr.strip().splitlines()[-1]
    assert last.startswith("ablate: the base failed at r16k_h8k") and "Unknown option" in last, last
