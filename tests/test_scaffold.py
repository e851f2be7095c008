"""Bring your own kernel: `python -m ablate.tools.new_kernel NAME DIR` writes a plugin outside the
project that sweeps as it is (static mode here; timed on a GPU), and `make rank` ranks it,
with no file of ablate/ changed."""
import hashlib
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from mlflow import MlflowClient

from ablate.tools import new_kernel
from conftest import kept_build_dir

ROOT = Path(__file__).resolve().parents[1]


def digest(folder):
    """A hash of every file under `folder` (names and contents)."""
    h = hashlib.sha256()
    for path in sorted(p for p in folder.rglob("*") if p.is_file() and "__pycache__" not in p.parts):
        h.update(str(path.relative_to(folder)).encode() + b"\0" + path.read_bytes())
    return h.hexdigest()


def sweep(tmp_path, plugins_dir, *extra, build_dir=None):
    env = {**os.environ, "MLFLOW_TRACKING_URI": f"sqlite:///{tmp_path / 'mlflow.db'}"}
    return subprocess.run(
        [sys.executable, "-m", "ablate", "-m", "kernel=my_axpy", f"kernel_path=[{plugins_dir}]",
         "pathology=glob(*)", *extra, f"build.dir={build_dir or tmp_path / 'build'}",
         f"hydra.sweep.dir={tmp_path / 'multirun'}"],
        cwd=ROOT, env=env, capture_output=True, text=True, timeout=900)


def test_a_scaffolded_plugin_sweeps_and_ranks_without_touching_ablate(tmp_path):
    before = digest(ROOT / "ablate")
    plugins_dir = tmp_path / "my_kernels"
    assert new_kernel.main(["my_axpy", str(plugins_dir)]) == 0
    folder = plugins_dir / "my_axpy"
    assert sorted(str(p.relative_to(folder)) for p in folder.rglob("*") if p.is_file()) == [
        "base/my_axpy.cu", "conf/kernel/my_axpy.yaml", "conf/pathology/scalar_loads.yaml",
        "conf/shape/n16m.yaml", "patches/scalar_loads.cuh", "spec.py"]
    assert "ablate_my_axpy_fwd" in (folder / "base" / "my_axpy.cu").read_text()

    # the scaffold's libraries are the means here: kept between sessions (a copy of a plugin
    # outside the project is named by its content, not its folder: ablate/build/compile.py)
    proc = sweep(tmp_path, plugins_dir, "mode=static", build_dir=kept_build_dir("scaffold_my_axpy"))
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "Traceback" not in proc.stderr
    client = MlflowClient(f"sqlite:///{tmp_path / 'mlflow.db'}")
    exp = client.get_experiment_by_name("my_axpy")  # the kernel's own experiment
    jobs = {r.data.params["pathology"]: r for r in client.search_runs([exp.experiment_id])
            if r.data.tags.get("kind") == "job"}
    generic = sorted(p.stem for p in (ROOT / "conf" / "generic" / "pathology").glob("*.yaml"))
    assert sorted(jobs) == sorted(["none", "scalar_loads", *generic])  # the generic pathologies too
    assert all(r.data.tags["status"] in ("static", "not_applicable") and r.data.params["kernel"] == "my_axpy"
               for r in jobs.values())
    assert jobs["scalar_loads"].data.tags["status"] == "static"
    assert jobs["scalar_loads"].data.metrics["fingerprint_ok"] == 1
    assert jobs["scalar_loads"].data.metrics["sass.ldg_128"] == 0 < jobs["none"].data.metrics["sass.ldg_128"]

    env = {**os.environ, "MLFLOW_TRACKING_URI": f"sqlite:///{tmp_path / 'mlflow.db'}"}
    env.pop("SWEEP", None)
    rank = subprocess.run(["make", "-s", "rank", f"PYTHON={sys.executable}"], cwd=ROOT, env=env,
                          capture_output=True, text=True, timeout=300)
    assert rank.returncode == 0, rank.stderr
    assert "(kernel my_axpy, mode static" in rank.stdout
    table = rank.stdout.split("Static analysis")[1]
    assert "scalar_loads" in table and "pass" in table and "FAIL" not in table
    assert digest(ROOT / "ablate") == before  # nothing of the pipeline was edited


def test_the_scaffold_refuses_to_overwrite_or_shadow(tmp_path, capsys):
    assert new_kernel.main(["my_axpy", str(tmp_path)]) == 0
    spec = (tmp_path / "my_axpy" / "spec.py").read_text()
    assert new_kernel.main(["my_axpy", str(tmp_path)]) == 1
    assert "already exists; nothing was written" in capsys.readouterr().err
    assert (tmp_path / "my_axpy" / "spec.py").read_text() == spec
    assert new_kernel.main(["rmsnorm", str(tmp_path / "elsewhere")]) == 1
    assert "a kernel 'rmsnorm' already exists at" in capsys.readouterr().err
    assert not (tmp_path / "elsewhere" / "rmsnorm").exists()
    assert new_kernel.main(["My-Kernel", str(tmp_path)]) == 1
    assert "must match" in capsys.readouterr().err


@pytest.mark.gpu
def test_a_scaffolded_plugin_sweeps_on_a_gpu(tmp_path):
    plugins_dir = tmp_path / "my_kernels"
    assert new_kernel.main(["my_axpy", str(plugins_dir)]) == 0
    proc = sweep(tmp_path, plugins_dir, "mode=gpu", "bench.samples=20")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    client = MlflowClient(f"sqlite:///{tmp_path / 'mlflow.db'}")
    exp = client.get_experiment_by_name("my_axpy")
    jobs = [r for r in client.search_runs([exp.experiment_id]) if r.data.tags.get("kind") == "job"]
    statuses = {r.data.tags["variant"]: r.data.tags["status"] for r in jobs}
    # its own pathology and the base, timed; the generic pathologies (conf/generic/) timed too,
    # or not applicable to it (their machine code equal to the base's): none failed
    assert statuses["none"] == statuses["scalar_loads"] == "ok", statuses
    assert len(jobs) == 10 and set(statuses.values()) <= {"ok", "not_applicable"}, \
        [(r.data.tags["variant"], r.data.tags["status"], r.data.tags.get("error")) for r in jobs]
    for r in (r for r in jobs if r.data.tags["status"] == "ok"):
        m = r.data.metrics
        assert m["base_gbps"] > 100 and 0 < m["base_peak_fraction"] < 1.2 and m["torch_us"] > 0
    shutil.rmtree(tmp_path / "build")


def test_the_scaffolds_spec_is_thin(tmp_path):
    """About 40 lines and nothing that is not about the kernel: no ctypes list (the ABI is the
    prototype's), no make_inputs, arguments, OUTPUTS or bytes_moved (the tensors' declarations)."""
    import ctypes

    from ablate.job import plugins

    assert new_kernel.main(["my_axpy", str(tmp_path)]) == 0
    text = (tmp_path / "my_axpy" / "spec.py").read_text()
    assert len(text.splitlines()) <= 42
    for written in ("ctypes", "ARGTYPES", "def arguments", "def make_inputs", "OUTPUTS", "def bytes_moved",
                    "def validate_shape", "BOUND"):
        assert written not in text, written
    spec = plugins.load_dir(tmp_path / "my_axpy").spec
    assert spec.ARGTYPES == [ctypes.c_void_p] * 3 + [ctypes.c_longlong, ctypes.c_float, ctypes.c_void_p]
    shape = spec.validate_shape({"n": 1001, "a": 0.5})
    assert spec.arguments({"x": 16, "y": 32, "out": 48}, shape, 5) == (16, 32, 48, 1001, 0.5, 5)
    assert spec.OUTPUTS == ("out",) and spec.bytes_moved(shape) == 3 * 4 * 1001 and spec.flops(shape) == 2002
