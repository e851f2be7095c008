"""MLflow tracking on a temporary store: a sweep's parent and child runs read back with
MlflowClient, failed jobs logged with their status, and a bad value that costs only itself."""
import json
import os
import logging
import shutil
import subprocess
import sys

import pytest

from hydra.core.hydra_config import HydraConfig
from mlflow import MlflowClient
from omegaconf import OmegaConf

from ablate.__main__ import validated
from ablate.job import plugins
from ablate.job.job import Job
from ablate.job.result import Result
from ablate.job.variant import variant_from_cfg
from ablate.sweep import tracking


def job_cfg(names=("none",), shape="s512", mode="gpu"):
    """A job config shaped like the app's (conf/config.yaml), with the shape's name set
    directly since there is no Hydra run to ask."""
    return OmegaConf.create({
        "mode": mode,
        "kernel": {"name": "attention", "experiment": "flash_attention_fwd"},
        "build": {"arch": "auto"},
        "shape": {"name": shape, "batch": 4, "heads": 8, "seq": 512, "head_dim": 64, "causal": False},
        "pathology": {n: {"header": None, "macros": {} if n == "none" else {f"ABLATE_{n.upper()}": 1},
                          "mechanism": f"what {n} defeats", "expected": f"what {n} should cost"}
                      for n in names},
    })


def job_of(names=("none",), shape="s512", mode="gpu"):
    """The Job of job_cfg's config, as make_job would work it out (the config is smaller
    than the app's, so its fields are set here)."""
    cfg = job_cfg(names, shape, mode)
    plugin = plugins.load("attention")
    variant, base = (variant_from_cfg(p, plugin.dir) for p in (cfg.pathology, {"none": None}))
    return Job(plugin=plugin, shape=OmegaConf.to_container(cfg.shape), shape_name=shape, variant=variant, base=base,
               peers=(), bench={"min_effect": 0.01}, mode=mode, kernel_counters=(), cfg=cfg)


def ok_result(slowdown=1.25):
    return Result(
        "ok",
        params={"gpu": "NVIDIA H100 80GB HBM3", "driver": "580.65", "cuda": "13.0", "torch": "2.11.0",
                "nvcc": "13.0.48", "arch": "sm_90"},
        metrics={"base_us": 14.0, "variant_us": 14.0 * slowdown, "slowdown": slowdown,
                 "slowdown_lo": slowdown - 0.02, "slowdown_hi": slowdown + 0.02, "significant": 1,
                 "regs": 128, "smem_bytes": 81920, "spill_bytes": 0},
        artifacts={"ptxas.log": "ptxas info    : Used 128 registers", "variant_info.json": '{"pathologies": []}'},
    )


def artifacts(client, run_id):
    return sorted(a.path for a in client.list_artifacts(run_id))


def text_artifact(client, run_id, name, tmp_path):
    return open(client.download_artifacts(run_id, name, str(tmp_path))).read()


def test_sweep_round_trip(mlflow_store, tmp_path, project_root):
    client = MlflowClient(mlflow_store)
    sweep_dir = project_root / "runs" / "hydra" / "multirun" / "2025-01-31" / "14-05-09"
    parent = tracking.start_sweep(job_cfg(), sweep_dir)
    job = job_of(["fp32_accum"])
    cfg = job.cfg
    child = tracking.log_job(job, ok_result(), parent)
    static = Result("static", params={"arch": "sm_90"}, metrics={"regs": 160, "sass.hmma_f32": 256})
    static_child = tracking.log_job(job_of(["fp32_accum"], mode="static"), static, parent)
    tracking.end_sweep(parent, "FINISHED")

    p = client.get_run(parent)
    assert p.info.status == "FINISHED"
    assert p.data.tags["kind"] == "sweep"
    assert p.data.tags["sweep_id"] == "2025-01-31/14-05-09"
    assert p.data.tags["mode"] == "gpu"
    assert p.data.tags["git_commit"] == tracking.git_commit()
    children = client.search_runs([p.info.experiment_id], f"tags.mlflow.parentRunId = '{parent}'")
    assert sorted(r.info.run_id for r in children) == sorted([child, static_child])

    run = client.get_run(child)
    assert client.get_experiment(run.info.experiment_id).name == "flash_attention_fwd"
    assert run.info.status == "FINISHED"
    assert run.info.run_name == "fp32_accum@s512"
    tags = run.data.tags
    assert tags["status"] == "ok" and tags["variant"] == "fp32_accum" and tags["mode"] == "gpu"
    assert tags["sweep_id"] == "2025-01-31/14-05-09" and tags["mlflow.parentRunId"] == parent
    assert "log_errors" not in tags
    params = run.data.params
    assert params["pathology"] == "fp32_accum"
    assert params["pathologies"] == "fp32_accum"
    assert params["macros"] == "ABLATE_FP32_ACCUM=1"
    assert params["mechanism"] == "what fp32_accum defeats"
    assert params["expected"] == "what fp32_accum should cost"
    assert params["shape"] == "s512"
    assert (params["shape.batch"], params["shape.seq"], params["shape.causal"]) == ("4", "512", "false")
    assert params["gpu"] == "NVIDIA H100 80GB HBM3" and params["driver"] == "580.65"
    assert params["cuda"] == "13.0" and params["torch"] == "2.11.0" and params["nvcc"] == "13.0.48"
    assert params["arch"] == "sm_90"  # the worker's resolved arch wins over the config's `auto`
    assert params["git_commit"] == tracking.git_commit()
    plugin = plugins.load("attention")  # the plugin's own provenance (test_plugin_provenance)
    assert params["plugin_sources"] == plugin.sources_digest() == tags["plugin_sources"]
    assert params["plugin_dir"] == str(plugin.dir) and params["plugin_git_commit"].startswith(
        tracking.git_commit().removesuffix("-dirty"))
    assert run.data.metrics == pytest.approx(ok_result().metrics)
    assert artifacts(client, child) == ["config.yaml", "ptxas.log", "result.json", "variant_info.json"]
    assert OmegaConf.create(text_artifact(client, child, "config.yaml", tmp_path)) == cfg
    assert text_artifact(client, child, "ptxas.log", tmp_path) == "ptxas info    : Used 128 registers"
    assert json.loads(text_artifact(client, child, "result.json", tmp_path)) == ok_result().to_dict()

    s = client.get_run(static_child)
    assert s.data.tags["status"] == "static" and s.data.tags["mode"] == "static"
    assert s.data.metrics == {"regs": 160, "sass.hmma_f32": 256}
    assert s.info.artifact_uri.startswith((tmp_path / "mlartifacts").as_uri())  # beside the store


@pytest.mark.parametrize("status", ["build_failed", "crashed", "timeout", "incorrect"])
def test_failed_job_is_logged_with_its_status(mlflow_store, tmp_path, status):
    error = f"{status}: cudaErrorIllegalAddress at kernel launch\nsecond line"
    result = Result(status, {"arch": "sm_90"}, {"rel_err": 0.5} if status == "incorrect" else {},
                    {"build.log": "error: expected ';'"} if status == "build_failed" else {}, error)
    run_id = tracking.log_job(job_of(["no_swizzle"]), result)  # a run of its own: no sweep
    client = MlflowClient(mlflow_store)
    run = client.get_run(run_id)
    assert run.info.status == "FAILED"
    assert run.data.tags["status"] == status
    assert run.data.tags["error"] == error
    assert "mlflow.parentRunId" not in run.data.tags and "sweep_id" not in run.data.tags
    assert text_artifact(client, run_id, "error.txt", tmp_path) == error
    assert run.data.params["pathology"] == "no_swizzle"
    if status == "build_failed":
        assert text_artifact(client, run_id, "build.log", tmp_path) == "error: expected ';'"
    if status == "incorrect":
        assert run.data.metrics == {"rel_err": 0.5}


def test_real_config_inside_hydra(mlflow_store, project_root):
    """The app's own config, with the shape's name taken from Hydra as in a real job."""
    full = plugins.compose("attention", ["pathology=[no_swizzle,fp32_accum]", "shape=s1k_causal"],
                           return_hydra_config=True)
    cfg = OmegaConf.masked_copy(full, [k for k in full if k != "hydra"])
    HydraConfig.instance().set_config(full)
    try:
        run_id = tracking.log_job(validated(cfg), ok_result())  # the app's own Job of it
    finally:
        HydraConfig.instance().cfg = None
    params = MlflowClient(mlflow_store).get_run(run_id).data.params
    assert params["shape"] == "s1k_causal" and params["shape.causal"] == "true"
    assert params["pathology"] == "fp32_accum+no_swizzle"
    assert params["macros"] == "ABLATE_FP32_ACCUM=1 ABLATE_NO_SWIZZLE=1"
    mechanisms = params["mechanism"].split(" | ")
    assert [m.split(":")[0] for m in mechanisms] == ["fp32_accum", "no_swizzle"]
    assert cfg.pathology.no_swizzle.mechanism.strip()[:40] in params["mechanism"]


def test_bad_values_cost_only_themselves(mlflow_store, tmp_path, caplog):
    result = ok_result()
    result.metrics["gpu_name"] = "H100"  # not a number
    result.params["notes"] = "x" * 10_000  # longer than MLflow allows
    result.artifacts["../../outside.txt"] = "kept"
    with caplog.at_level(logging.ERROR, logger="ablate.sweep.tracking"):
        run_id = tracking.log_job(job_of(["no_swizzle"]), result)
    client = MlflowClient(mlflow_store)
    run = client.get_run(run_id)
    assert run.data.metrics["slowdown"] == 1.25 and "gpu_name" not in run.data.metrics
    assert run.data.params["notes"].startswith("xxx") and len(run.data.params["notes"]) == 6000
    assert "outside.txt" in artifacts(client, run_id)
    assert "metric gpu_name: not a number" in run.data.tags["log_errors"]
    assert "outside.txt" in run.data.tags["log_errors"]
    # Not silent: an error line names the problems, and the whole result is kept on disk.
    assert "gpu_name" in caplog.text
    saved = list((tmp_path / "unlogged").glob("*.json"))
    assert len(saved) == 1 and json.loads(saved[0].read_text())["result"]["metrics"]["gpu_name"] == "H100"


def test_unreadable_store_keeps_the_result(tmp_path, monkeypatch, caplog):
    db = tmp_path / "mlflow.db"
    db.write_bytes(b"this is not a sqlite database" * 100)
    monkeypatch.setenv("MLFLOW_TRACKING_URI", f"sqlite:///{db}")
    with caplog.at_level(logging.ERROR, logger="ablate.sweep.tracking"):
        assert tracking.log_job(job_of(["no_swizzle"]), ok_result()) is None
    assert "could not create the run" in caplog.text
    saved = list((tmp_path / "unlogged").glob("*no_swizzle@s512.json"))
    assert len(saved) == 1
    assert json.loads(saved[0].read_text())["result"] == ok_result().to_dict()
    assert db.read_bytes() == b"this is not a sqlite database" * 100  # never overwritten


def test_a_store_whose_folder_cannot_be_made_keeps_the_result_in_runs_unlogged(tmp_path, monkeypatch, caplog):
    """sqlite:////proc/x/mlflow.db: no run, no unlogged/ beside it either; the result lands in
    the project's runs/unlogged/ (as the README promises), not only in the log."""
    monkeypatch.setenv("MLFLOW_TRACKING_URI", "sqlite:////proc/x/mlflow.db")
    monkeypatch.setattr(tracking, "UNLOGGED", tmp_path / "runs" / "unlogged")
    with caplog.at_level(logging.ERROR, logger="ablate.sweep.tracking"):
        assert tracking.log_job(job_of(["no_swizzle"]), ok_result()) is None
    saved = list((tmp_path / "runs" / "unlogged").glob("*no_swizzle@s512.json"))
    assert len(saved) == 1 and json.loads(saved[0].read_text())["result"] == ok_result().to_dict()
    assert f"the result is saved in {saved[0]}" in caplog.text
    with pytest.raises(tracking.StoreError, match=r"^the MLflow store sqlite:////proc/x/mlflow.db cannot be "
                                                  r"written: No such file or directory: /proc/x$"):
        tracking.check_store()


def test_a_sweep_on_a_store_that_cannot_be_written_stops_before_anything(tmp_path, project_root):
    """Refused up front in one line (it used to warn from inside Hydra's callbacks, then run
    every job); nothing built."""
    from ablate.tools import new_kernel

    new_kernel.write("store_kernel", tmp_path / "kernels")
    env = {**os.environ, "MLFLOW_TRACKING_URI": "sqlite:////proc/x/mlflow.db"}
    for sweep in ([], ["-m", "pathology=glob(*)"]):
        proc = subprocess.run([sys.executable, "-m", "ablate", *sweep, "kernel=store_kernel",
                               f"kernel_path=[{tmp_path / 'kernels'}]", "mode=static",
                               f"build.dir={tmp_path / 'build'}", f"hydra.sweep.dir={tmp_path / 'sweep'}",
                               f"hydra.run.dir={tmp_path / 'run'}"],
                              cwd=project_root, env=env, capture_output=True, text=True, timeout=300)
        assert proc.returncode == 1 and "Traceback" not in proc.stderr and "Warning" not in proc.stderr
        assert proc.stderr.strip().splitlines()[-1] == ("ablate: the MLflow store sqlite:////proc/x/mlflow.db "
                                                        "cannot be written: No such file or directory: /proc/x")
        assert not (tmp_path / "build").exists()


def test_runs_are_added_never_replaced(mlflow_store):
    first = tracking.log_job(job_of(["no_swizzle"]), ok_result(1.2))
    second = tracking.log_job(job_of(["no_swizzle"]), ok_result(1.3))
    client = MlflowClient(mlflow_store)
    assert first != second
    assert client.get_run(first).data.metrics["slowdown"] == 1.2
    assert client.get_run(second).data.metrics["slowdown"] == 1.3


def test_end_sweep_refuses_an_unknown_status(mlflow_store):
    parent = tracking.start_sweep(job_cfg(), "/tmp/some/sweep")
    with pytest.raises(ValueError, match="FINISHED, FAILED or KILLED"):
        tracking.end_sweep(parent, "DONE")
    tracking.end_sweep(parent, "failed")
    assert MlflowClient(mlflow_store).get_run(parent).info.status == "FAILED"


def test_tracking_uri(monkeypatch, project_root):
    monkeypatch.delenv("MLFLOW_TRACKING_URI")
    cfg = OmegaConf.create({"mlflow": {"tracking_uri": "sqlite:///runs/mlflow.db"}})
    assert tracking.tracking_uri(cfg) == f"sqlite:///{project_root / 'runs' / 'mlflow.db'}"
    monkeypatch.setenv("MLFLOW_TRACKING_URI", "http://tracking.example:5000")
    assert tracking.tracking_uri(cfg) == "http://tracking.example:5000"


def test_sweep_id(project_root):
    assert tracking.sweep_id(project_root / "runs/hydra/multirun/2025-01-31/14-05-09") == "2025-01-31/14-05-09"
    assert tracking.sweep_id("/elsewhere/my_sweep") == "my_sweep"


@pytest.mark.skipif(shutil.which("git") is None, reason="git is not installed")
def test_git_commit(tmp_path, monkeypatch):
    monkeypatch.delenv("ABLATE_GIT_COMMIT", raising=False)
    assert tracking.git_commit(tmp_path) == "unknown"  # not a checkout
    monkeypatch.setenv("ABLATE_GIT_COMMIT", "abc123")  # a tree shipped without .git
    assert tracking.git_commit(tmp_path) == "abc123"
    monkeypatch.delenv("ABLATE_GIT_COMMIT")
    git = lambda *a: subprocess.run(["git", "-C", str(tmp_path), *a], check=True, capture_output=True, text=True)  # noqa: E731
    git("init", "-q")
    (tmp_path / "f.txt").write_text("a")
    git("add", "f.txt")
    git("-c", "user.name=t", "-c", "user.email=t@t", "commit", "-qm", "c")
    head = git("rev-parse", "HEAD").stdout.strip()
    assert tracking.git_commit(tmp_path) == head
    (tmp_path / "f.txt").write_text("b")
    assert tracking.git_commit(tmp_path) == head + "-dirty"


@pytest.mark.skipif(shutil.which("git") is None, reason="git is not installed")
def test_plugin_provenance(tmp_path, monkeypatch):
    """A job logs the hash of its plugin's sources (what it builds, its spec, its yamls; no
    cache or editor file) and the commit of the repository its folder lies in, dirty only for
    changes inside that folder."""
    from ablate.tools import new_kernel

    monkeypatch.delenv("ABLATE_GIT_COMMIT", raising=False)
    folder = new_kernel.write("prov_kernel", tmp_path / "repo" / "kernels")
    plugin = plugins.load_dir(folder)
    names = [p.relative_to(folder).as_posix() for p in plugin.sources()]
    assert names == ["base/prov_kernel.cu", "conf/kernel/prov_kernel.yaml", "conf/pathology/scalar_loads.yaml",
                     "conf/shape/n16m.yaml", "patches/scalar_loads.cuh", "spec.py"]
    first = tracking.plugin_provenance(plugin)
    assert first == {"plugin_sources": plugin.sources_digest(), "plugin_git_commit": "none", "plugin_dir": str(folder)}
    (folder / "__pycache__").mkdir()
    (folder / "__pycache__" / "spec.cpython-311.pyc").write_bytes(b"x")
    (folder / ".spec.py.swp").write_text("x")
    (folder / "notes.txt").write_text("x")
    assert plugin.sources_digest() == first["plugin_sources"]
    git = lambda *a: subprocess.run(["git", "-C", str(tmp_path / "repo"), *a], check=True,  # noqa: E731
                                    capture_output=True, text=True)
    git("init", "-q")
    git("add", "kernels/prov_kernel/spec.py", "kernels/prov_kernel/base", "kernels/prov_kernel/conf",
        "kernels/prov_kernel/patches")
    git("-c", "user.name=t", "-c", "user.email=t@t", "commit", "-qm", "c")
    head = git("rev-parse", "HEAD").stdout.strip()
    (folder / "notes.txt").unlink()
    (tmp_path / "repo" / "elsewhere.txt").write_text("not the plugin's")
    assert tracking.plugin_provenance(plugin)["plugin_git_commit"] == head
    patch = folder / "patches" / "scalar_loads.cuh"
    patch.write_text(patch.read_text() + "// changed\n")
    now = tracking.plugin_provenance(plugin)
    assert now["plugin_git_commit"] == head + "-dirty" and now["plugin_sources"] != first["plugin_sources"]


def test_a_relative_sqlite_uri_keeps_its_query(monkeypatch):
    monkeypatch.delenv("MLFLOW_TRACKING_URI", raising=False)
    cfg = OmegaConf.create({"mlflow": {"tracking_uri": "sqlite:///runs/mlflow.db?timeout=30"}})
    uri = tracking.tracking_uri(cfg)
    assert uri == "sqlite:///" + str(tracking.ROOT / "runs" / "mlflow.db") + "?timeout=30"


def test_open_store_makes_the_experiment_ahead_and_leaves_a_failure_to_log_job(tmp_path, monkeypatch, empty_store):
    """What a single timed job opens while the GPU works (__main__.time_ahead): the store and
    its experiment, so that the record only writes; a store it cannot open raises nothing there."""
    uri = empty_store(tmp_path / "mlflow.db")
    monkeypatch.setenv("MLFLOW_TRACKING_URI", uri)
    tracking.open_store(job_cfg(), "ahead_exp")
    assert MlflowClient(uri).get_experiment_by_name("ahead_exp") is not None
    monkeypatch.setenv("MLFLOW_TRACKING_URI", "sqlite:////proc/x/mlflow.db")
    tracking.open_store(job_cfg(), "ahead_exp")  # log_job meets it and keeps the result (test above)
