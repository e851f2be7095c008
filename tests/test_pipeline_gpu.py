"""The GPU half of the pipeline on a real GPU: the ctypes wrapper, the correctness gate, the
timing protocol, and a sweep in which a faulting variant and a wrong one are recorded as
such while the jobs after them complete, in one fresh GPU child after the fault."""
import json
import math
import os
import subprocess
import sys
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")

from ablate.job import plugins  # noqa: E402
from ablate.gpu.check import check  # noqa: E402
from ablate.build.library import Kernel, KernelError  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
ATTENTION = plugins.load("attention")
SPEC = ATTENTION.spec
forward = SPEC.forward


def reference(q, k, v, causal, scale):
    shape = {"batch": q.shape[0], "heads": q.shape[1], "seq": q.shape[2], "head_dim": q.shape[3],
             "causal": causal, "scale": scale}
    return SPEC.reference({"q": q, "k": k, "v": v}, shape)["o"]
SMALL = {"batch": 2, "heads": 3, "seq": 300, "head_dim": 64, "causal": False}

pytestmark = pytest.mark.gpu


@pytest.fixture(scope="session")
def build_dir(tmp_path_factory):
    return tmp_path_factory.mktemp("gpu_build")


@pytest.fixture(scope="session")
def base(build_dir):
    from ablate.build.compile import build
    from ablate.job.variant import variant_from_cfg

    cfg = plugins.compose("attention", ["pathology=none", f"build.dir={build_dir}"])
    result = build([variant_from_cfg(cfg.pathology, ATTENTION.dir)], cfg.build, ATTENTION, ROOT)["none"]
    assert result.ok, result.log
    return Kernel(result.lib, SPEC)


def tensors(*shape, dtype=torch.float16, device="cuda"):
    return [torch.randn(*shape, dtype=dtype, device=device) for _ in range(4)]


def test_wrapper_refuses_bad_tensors(base):
    q, k, v, o = tensors(1, 2, 64, 64)
    with pytest.raises(TypeError, match="q must be float16"):
        forward(base, q.float(), k, v, o, False)
    with pytest.raises(ValueError, match="k must be contiguous"):
        forward(base, q, k.transpose(2, 3), v, o, False)
    with pytest.raises(ValueError, match=r"v has shape \(1, 2, 32, 64\)"):
        forward(base, q, k, v[:, :, :32].contiguous(), o, False)
    with pytest.raises(ValueError, match="o is on cpu"):
        forward(base, q, k, v, o.cpu(), False)
    with pytest.raises(ValueError, match=r"must be \(B, H, S, D\)"):
        forward(base, q[0], k[0], v[0], o[0], False)


def test_wrapper_names_the_cuda_error(base):
    q, k, v, o = tensors(1, 2, 64, 96)  # D=96 is not compiled in
    with pytest.raises(KernelError, match=r"cudaErrorInvalidValue \(1\)") as err:
        forward(base, q, k, v, o, False)
    assert err.value.code == 1


def test_wrapper_runs_on_the_current_stream(base):
    q, k, v, o = tensors(2, 3, 100, 64)
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        o.fill_(float("nan"))
        forward(base, q, k, v, o, True)
    side.synchronize()
    ref = reference(q, k, v, True, 1 / 8)
    assert float(torch.linalg.vector_norm(o.float() - ref) / torch.linalg.vector_norm(ref)) < 2e-3


class Scaled:
    """A stand-in kernel: the float32 reference times `factor`, with `unwritten` rows left alone."""
    spec = SPEC

    def __init__(self, factor=1.0, unwritten=0):
        self.factor, self.unwritten = factor, unwritten

    def __call__(self, tensors, shape):
        out = SPEC.reference(tensors, shape)["o"] * self.factor
        rows = shape["seq"] - self.unwritten
        tensors["o"][:, :, :rows] = out[:, :, :rows].half()


def test_gate_passes_the_base_and_catches_wrong_outputs(base):
    ok = check(base, SMALL, 2e-3)
    assert ok["ok"] and ok["rel_err"] < 2e-3 and ok["nan"] == 0
    assert check(Scaled(1.0), SMALL, 2e-3)["ok"]  # the control for the two below
    wrong = check(Scaled(1.01), SMALL, 2e-3)
    assert not wrong["ok"] and wrong["rel_err"] == pytest.approx(0.01, rel=0.05)
    assert "exceeds tolerance" in wrong["error"]
    partial = check(Scaled(1.0, unwritten=1), SMALL, 2e-3)
    assert not partial["ok"] and partial["nan"] == 2 * 3 * 64  # one row of every head
    assert "NaN" in partial["error"]


def test_timing_protocol(base):
    from ablate.gpu import timing

    shape = SMALL
    sets = timing.make_inputs(SPEC, shape, 3, 0, "cuda")
    bench = {"samples": 12, "warmup": 2, "min_sample_us": 500}
    candidates = {"base": timing.kernel_launcher(base, sets, shape),
                  "again": timing.kernel_launcher(base, sets, shape)}
    peers, skipped = timing.peer_launchers(SPEC, sets, shape, ["sdpa_flash"])
    candidates.update(peers)
    samples, launches, dropped = timing.measure(candidates, 3, bench, optional=list(peers))
    assert set(samples) == set(candidates) - set(dropped)
    for name, times in samples.items():
        assert times.shape == (12,) and (times > 0).all(), name
        # One replay (launches x per-launch time) lasts at least about min_sample_us.
        assert launches[name] * float(times.mean()) > 0.8 * 500, (name, launches[name], times)
    # The kernel wrote every output of every set it cycled through.
    assert all(not torch.isnan(s["o"]).any() for s in sets)


def planted_sweep(tmp_path, build_dir, order, timeout_s, **env):
    """A small timed sweep of attention's s512 with the test plants (tests/conf) among its
    pathologies, `env` set: its MLflow jobs by pathology (every one logged) and the client."""
    db = tmp_path / "mlflow.db"
    proc = subprocess.run(
        [sys.executable, "-m", "ablate", "-m", f"pathology={','.join(order)}", "shape=s512",
         "mode=gpu", "bench.samples=20", "bench.warmup=3", "bench.replicates=2", "bench.max_replicates=3",
         f"bench.timeout_s={timeout_s}", f"build.dir={build_dir}", f"hydra.sweep.dir={tmp_path / 'multirun'}",
         f"hydra.searchpath=[file://{ROOT / 'tests' / 'conf'}]"],
        cwd=ROOT, env={**os.environ, "MLFLOW_TRACKING_URI": f"sqlite:///{db}", **env}, capture_output=True,
        text=True, timeout=1500)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    from mlflow import MlflowClient

    client = MlflowClient(f"sqlite:///{db}")
    exp = client.get_experiment_by_name("flash_attention_fwd")
    jobs = {r.data.params["pathology"]: r for r in client.search_runs([exp.experiment_id])
            if r.data.tags.get("kind") == "job"}
    assert sorted(jobs) == sorted(order)
    return jobs, client


def test_sweep_with_a_faulting_and_a_wrong_variant(tmp_path, build_dir):
    # One GPU: its one child per sweep (tests/test_every_gpu_gpu.py is the sweep on several).
    first_gpu = os.environ.get("CUDA_VISIBLE_DEVICES", "0").split(",")[0]
    order = ["fault", "wrong", "none", "no_swizzle"]
    jobs, client = planted_sweep(tmp_path, build_dir, order, 240, CUDA_VISIBLE_DEVICES=first_gpu)

    fault = jobs["fault"]
    assert fault.data.tags["status"] == "crashed"
    assert "illegal memory access" in fault.data.tags["error"] or "IllegalAddress" in fault.data.tags["error"]

    wrong = jobs["wrong"]
    assert wrong.data.tags["status"] == "incorrect"
    assert "variant failed the correctness gate" in wrong.data.tags["error"]
    assert wrong.data.params["failed_side"] == "variant"  # what the run's exit status reads (sweep/outcome.py)
    assert wrong.data.metrics["rel_err"] > 2e-3 and wrong.data.metrics["base_rel_err"] < 2e-3
    assert "variant_us" not in wrong.data.metrics  # never timed

    # One child per sweep: the crash ended the first, and the next took every job after it
    # (incorrect and ok keep it).
    pids = {name: int(run.data.params["worker_pid"]) for name, run in jobs.items()}
    assert pids["wrong"] == pids["none"] == pids["no_swizzle"] != pids["fault"]

    for name in ("none", "no_swizzle"):  # after the crash: a fresh process, a working GPU
        run = jobs[name]
        assert run.data.tags["status"] == "ok", run.data.tags.get("error")
        m, p = run.data.metrics, run.data.params
        for who in ("base", "variant", "peer", "sdpa_flash", "sdpa_cudnn"):
            assert 0 < m[f"{who}_us_p10"] <= m[f"{who}_us"] <= m[f"{who}_us_p90"], who
            assert m[f"{who}_tflops"] > 0 and m[f"{who}_gbps"] > 0
        assert m["slowdown_lo"] <= m["slowdown"] <= m["slowdown_hi"]
        assert m["significant"] in (0, 1) and 2 <= m["replicates"] <= 3 and m["timing_s"] > 0
        assert p["stop_reason"] in ("precision", "max_replicates", "budget") and p["replicate_inputs"] == "fresh"
        assert m["rel_err"] < 2e-3 and m["regs"] > 0 and m["smem_bytes"] > 0 and m["variant_gbps"] > 0
        assert p["gpu"] and p["torch"] == torch.__version__ and p["peer"] == "sdpa_flash"
        assert p["kernel"] == "attention" and p["bound"] == "compute" and p["shape_label"] == "B=4 H=8 S=512 D=64"
        # Held to the FP16 matmul rate measured on this GPU: a fraction, and a sane one.
        assert 100 < m["peak_tflops"] < 2000 and 0 < m["base_peak_fraction"] < 1
        assert "throttle_before" in p or "gpu_state_before" in p
        path = client.download_artifacts(run.info.run_id, "samples.json", str(tmp_path / name))
        replicates = json.loads(Path(path).read_text())["replicates"]
        assert len(replicates) == m["replicates"]
        for samples in replicates:  # every replicate: every candidate, 20 samples each
            assert {"base", "variant", "sdpa_flash", "sdpa_cudnn"} <= set(samples)
            assert all(len(s) == 20 for s in samples.values())
            assert all(math.isfinite(x) and x > 0 for s in samples.values() for x in s)


def test_the_next_run_is_served_by_the_kept_gpu_worker(tmp_path, build_dir):
    """keep_worker_s: a run's GPU worker waits for the next run, which times on it (the same
    pid) as a fresh one would; a library it loaded rebuilt in place makes it stale: ended, and
    the next run starts its own."""
    import signal

    db = tmp_path / "mlflow.db"
    env = {**os.environ, "MLFLOW_TRACKING_URI": f"sqlite:///{db}", "ABLATE_KEEP_WORKER_S": "120",
           "ABLATE_TEST_KEY": str(tmp_path)}  # this test's own kept worker

    def one_run():
        proc = subprocess.run(
            [sys.executable, "-m", "ablate", "pathology=no_swizzle", "shape=s512", "bench.replicates=2",
             "bench.max_replicates=3", f"build.dir={build_dir}", f"hydra.run.dir={tmp_path / 'run'}"],
            cwd=ROOT, env=env, capture_output=True, text=True, timeout=600)
        assert proc.returncode == 0, proc.stdout + proc.stderr
        assert "the GPU worker is kept for 120 s" in proc.stdout + proc.stderr
        from mlflow import MlflowClient

        client = MlflowClient(f"sqlite:///{db}")
        exp = client.get_experiment_by_name("flash_attention_fwd")
        run = client.search_runs([exp.experiment_id], order_by=["attributes.start_time DESC"])[0]
        assert run.data.tags["status"] == "ok", run.data.tags.get("error")
        assert run.data.metrics["slowdown_lo"] <= run.data.metrics["slowdown"] <= run.data.metrics["slowdown_hi"]
        return int(run.data.params["worker_pid"])

    first = one_run()
    try:
        second = one_run()
        assert second == first  # the kept one
        for lib in Path(build_dir).rglob("*.so"):
            os.utime(lib)  # rebuilt in place, as far as the kept worker can tell
        third = one_run()
        assert third != first
    finally:
        for pid in {first, locals().get("second", first), locals().get("third", first)}:
            try:
                os.killpg(pid, signal.SIGKILL)
            except OSError:
                pass
