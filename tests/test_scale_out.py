"""Scale-out on the CPU: the launcher presets compose (gpus: joblib, as many jobs at a time as
GPUs; slurm: submitit, one GPU per job), the SLURM preset renders a submission script through
submitit's own code (no cluster), a sweep on SLURM with the sqlite store is refused with a
message, the progress line counts what the jobs leave, and `ablate rank` warns when a sweep
mixes GPU models."""
import os
import pickle
import subprocess
import sys
from pathlib import Path

import pytest
from hydra.utils import instantiate

from ablate.sweep import callbacks, progress
from ablate.job import plugins

ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture
def two_gpus(tmp_path, monkeypatch):
    smi = tmp_path / "bin" / "nvidia-smi"
    smi.parent.mkdir()
    smi.write_text("#!/bin/sh\ncat <<'EOF'\n0, GPU-aaaa, NVIDIA H200\n1, GPU-bbbb, NVIDIA H200\nEOF\n")
    smi.chmod(0o755)
    monkeypatch.setenv("PATH", f"{smi.parent}{os.pathsep}{os.environ['PATH']}")
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)


def launcher_cfg(preset, tmp_path, *overrides):
    cfg = plugins.compose(overrides=[f"hydra/launcher={preset}", f"hydra.sweep.dir={tmp_path / 'sweep'}",
                                     *overrides], return_hydra_config=True)
    return cfg


def test_the_gpus_preset_is_the_basic_launcher_that_uses_every_gpu(two_gpus, tmp_path):
    """`hydra/launcher=gpus` (make sweep GPUS=all) still composes: the basic launcher, whose
    sweep times on every GPU from its own process (ablate/gpu/pool.py), not a second pipeline."""
    cfg = launcher_cfg("gpus", tmp_path)
    assert cfg.hydra.launcher._target_ == callbacks.BASIC_LAUNCHER
    assert callbacks.launcher_of(cfg) == "basic"
    assert callbacks.launcher_of(plugins.compose(return_hydra_config=True)) == "basic"


def test_the_slurm_preset_renders_one_gpu_per_job(tmp_path, monkeypatch):
    """The submitit launcher's own launch(), up to the submission: the script sbatch would get."""
    import submitit

    cfg = launcher_cfg("slurm", tmp_path, "hydra.launcher.partition=gpu")
    assert callbacks.launcher_of(cfg) == "slurm"
    srun = tmp_path / "bin" / "srun"  # submitit looks for it before it agrees to render anything
    srun.parent.mkdir()
    srun.write_text("#!/bin/sh\nexit 1\n")
    srun.chmod(0o755)
    monkeypatch.setenv("PATH", f"{srun.parent}{os.pathsep}{os.environ['PATH']}")
    launcher = instantiate(cfg.hydra.launcher)
    launcher.setup(hydra_context=None, task_function=None, config=cfg)
    executors = []
    monkeypatch.setattr(submitit.AutoExecutor, "map_array",
                        lambda self, fn, *args: executors.append(self) or [])
    launcher.launch([["pathology=none"], ["pathology=no_swizzle"]], initial_job_idx=0)
    (executor,) = executors
    script = executor._executor._make_submission_file_text("python -m submitit.core._submit", "uid")
    lines = set(script.splitlines())
    assert {"#SBATCH --gpus-per-node=1", "#SBATCH --ntasks-per-node=1", "#SBATCH --nodes=1",
            "#SBATCH --partition=gpu", "#SBATCH --cpus-per-task=8"} <= lines, script
    assert any(line.startswith("#SBATCH --output=") and str(tmp_path / "sweep") in line for line in lines)


def test_slurm_jobs_cannot_share_the_sqlite_store(tmp_path, monkeypatch):
    monkeypatch.setenv("MLFLOW_TRACKING_URI", f"sqlite:///{tmp_path / 'mlflow.db'}")
    cfg = launcher_cfg("slurm", tmp_path)
    with pytest.raises(SystemExit, match="MLFLOW_TRACKING_URI at a tracking server"):
        callbacks.SweepSetup()._serve_store(cfg, "slurm")
    monkeypatch.setenv("MLFLOW_TRACKING_URI", "http://mlflow.cluster:5000")  # a server: used as is
    setup = callbacks.SweepSetup()
    setup._serve_store(cfg, "slurm")
    assert setup.server is None and os.environ["MLFLOW_TRACKING_URI"] == "http://mlflow.cluster:5000"


def test_the_callback_travels_to_workers_without_the_launchers_state(tmp_path):
    setup = callbacks.SweepSetup()
    setup.progress = progress.Progress(tmp_path, 3, enabled=False)
    setup.run_id = "abc"
    copy = pickle.loads(pickle.dumps(setup))
    assert copy.progress is None and copy.server is None and copy.run_id is None
    setup.progress.close()


def test_each_job_start_and_end_reads_the_gpus_answers_and_sends_them_more(tmp_path, monkeypatch):
    """The callback drains the GPU children at each job's start and end: a job that is not
    timed (not applicable: ~0.3 s of the parent each, twelve in a row in attention's sweep)
    would otherwise leave them idle (the CPU replay: tools/replay_sweep.py)."""
    from types import SimpleNamespace

    from hydra.core.utils import JobStatus
    from omegaconf import OmegaConf

    from ablate.gpu import worker

    drained = []
    monkeypatch.setattr(worker, "drain", lambda: drained.append(1))
    setup = callbacks.SweepSetup()
    setup.on_job_start(OmegaConf.create({}))
    assert len(drained) == 1
    setup.on_job_end(OmegaConf.create({"hydra": {"runtime": {"output_dir": str(tmp_path)}}}),
                     SimpleNamespace(status=JobStatus.COMPLETED))
    assert len(drained) == 2


def test_the_progress_line_counts_the_jobs_marks(tmp_path, capsys):
    line = progress.Progress(tmp_path, 4, enabled=True, poll_s=3600)
    progress.mark(tmp_path / "0", "ok", "none on s512: ok slowdown 1.000")  # a job of this process: logged here
    subprocess.run([sys.executable, "-c", "import sys; from ablate.sweep import progress; "  # a job elsewhere
                    "progress.mark(sys.argv[1], 'crashed', 'uncoalesced on s512: crashed CUDA error')",
                    str(tmp_path / "1")], check=True, env={**os.environ, "PYTHONPATH": str(ROOT)})
    assert line.poll() == 2 and line.poll() == 0
    progress.mark(tmp_path / "2", "static", "no_swizzle on s512: static fingerprint holds")
    progress.mark(tmp_path / "3", "not_applicable", "no_restrict on s512: not_applicable ...")
    assert line.close() == {"ok": 2, "failed": 1, "not applicable": 1}  # a generic pathology that changes nothing
    out = capsys.readouterr().out
    assert "uncoalesced on s512: crashed CUDA error" in out  # the other process's summary above the line
    assert "none on s512" not in out
    assert "sweep: 4/4 jobs, ok 2, failed 1, not applicable 1" in out and "elapsed" in out
    assert os.environ.get(progress.QUIET_ENV) is None


def test_the_progress_line_shows_each_gpus_share(tmp_path, capsys):
    line = progress.Progress(tmp_path, 5, enabled=True, poll_s=3600)
    for i, gpu in enumerate(["1", "0", "10", "1"]):
        progress.mark(tmp_path / str(i), "ok", f"job {i}", gpu=gpu)
    progress.mark(tmp_path / "4", "build_failed", "never timed")  # no GPU: not in a share
    assert line.close() == {"ok": 4, "failed": 1, "not applicable": 0}
    assert line.gpus == {"0": 1, "1": 2, "10": 1}
    assert "ok 4, failed 1; gpu0 1, gpu1 2, gpu10 1" in capsys.readouterr().out


def test_no_line_when_stdout_is_not_a_terminal(tmp_path, capsys):
    line = progress.Progress(tmp_path, 1)  # capsys' stdout is no terminal
    progress.mark(tmp_path / "0", "ok", "summary")
    assert line.close() == {"ok": 1, "failed": 0, "not applicable": 0}
    assert capsys.readouterr().out == ""


def test_rank_warns_when_a_sweep_mixes_gpu_models():
    import pandas as pd

    from ablate.report import rank

    jobs = pd.DataFrame({"gpu": ["NVIDIA H100 80GB HBM3", "NVIDIA H200", "NVIDIA H200", None]})
    warning = rank.mixed_gpus(jobs)
    assert "mixes GPU models" in warning and "2 jobs on NVIDIA H200" in warning
    assert rank.mixed_gpus(jobs[jobs["gpu"] != "NVIDIA H100 80GB HBM3"]) == ""


def test_ablate_help_works_from_any_directory(tmp_path):
    """The installed command (or python -m ablate where the package is not installed)."""
    import shutil

    command = [shutil.which("ablate")] if shutil.which("ablate") else [sys.executable, "-m", "ablate"]
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    out = subprocess.run([*command, "--help"], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr
    assert "ablate rank" in out.stdout and "CUDA_VISIBLE_DEVICES=0 ablate -m" in out.stdout and "pathology:" in out.stdout
    ranked = subprocess.run([*command, "rank", "--help"], cwd=tmp_path, env=env, capture_output=True,
                            text=True, timeout=300)
    assert ranked.returncode == 0 and "--compare" in ranked.stdout


def test_scale_out_times_one_gpu_then_every_gpu_cold_and_warm(tmp_path):
    """tools/scale-out.sh with ablate stood in for (a python3 that records `-m ablate` command
    lines): one GPU is CUDA_VISIBLE_DEVICES=0, all GPUs is the plain sweep (no launcher of its
    own), each cold (kept children ended first) then warm, and the warm sweeps compared."""
    import shutil

    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    log = tmp_path / "calls"
    (bin_dir / "python3").write_text(
        "#!/bin/sh\n"
        f'if [ "$1" = -m ] && {{ [ "$2" = ablate ] || [ "$2" = ablate.report.rank ]; }}; then\n'
        f'  echo "CUDA_VISIBLE_DEVICES=${{CUDA_VISIBLE_DEVICES-unset}} $*" >> {log}; exit 0\nfi\n'
        f'exec {shutil.which("python3") or sys.executable} "$@"\n')
    (bin_dir / "nvidia-smi").write_text("#!/bin/sh\necho GPU 0\necho GPU 1\n")
    for f in bin_dir.iterdir():
        f.chmod(0o755)
    work = tmp_path / "work"
    (work / "tools").mkdir(parents=True)
    shutil.copy(ROOT / "tools" / "scale-out.sh", work / "tools")
    env = {k: v for k, v in os.environ.items() if k != "CUDA_VISIBLE_DEVICES"}
    env["PATH"] = f"{bin_dir}{os.pathsep}{env['PATH']}"
    proc = subprocess.run(["bash", "tools/scale-out.sh", "one", "all", "compare"], cwd=work, env=env,
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    calls = log.read_text().splitlines()
    sweeps = [c for c in calls if "pathology=glob(*)" in c]
    assert [c.split()[0] for c in sweeps] == ["CUDA_VISIBLE_DEVICES=0"] * 2 + ["CUDA_VISIBLE_DEVICES=unset"] * 2
    assert [c.split()[-1] for c in sweeps] == [f"hydra.sweep.dir=runs/hydra/multirun/scale-out-{n}"
                                               for n in ("one-cold", "one-warm", "all-cold", "all-warm")]
    assert all("shape=s512,s1k,s2k,s4k" in c and "hydra/launcher" not in c for c in sweeps)
    assert [i for i, c in enumerate(calls) if "stop-workers" in c] == [calls.index(sweeps[0]) - 1,
                                                                      calls.index(sweeps[2]) - 1]
    assert any("--compare scale-out-one-warm scale-out-all-warm" in c for c in calls)
    assert "cold: 1 GPU" in proc.stdout and "warm: 1 GPU" in proc.stdout
