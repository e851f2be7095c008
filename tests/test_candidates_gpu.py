"""A kernel's base as the fastest of its declared configurations, on a GPU: two_configs
(tests/fixtures/plugins) builds each of its three candidates by macro; the GPU worker checks them
(wrong_scale, 3 x, fails the gate and is left out, named), times the others alternated beside
nothing else, and the job is built on the faster (wide_grid: a block per 256 elements against
one_block's single block of 32 threads), recorded in the build folder and the job's params; the
next job reads the record and times nothing."""
import json
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")

from ablate.job import plugins  # noqa: E402
from ablate.pipeline import job_of, run_job  # noqa: E402

from conftest import composed_again_untimed, tool  # noqa: E402

FIXTURES = Path(__file__).resolve().parent / "fixtures" / "plugins"
pytestmark = pytest.mark.gpu


def test_the_base_is_the_fastest_candidate_timed_once_and_recorded(tmp_path, monkeypatch):
    cfg = plugins.compose("two_configs", ["pathology=none", "mode=gpu", f"build.dir={tmp_path}"],
                          kernel_path=[FIXTURES])
    job = job_of(cfg)
    assert job.failed is None, job.failed
    assert job.candidate == "wide_grid" and job.base.base_macros == {"SCALE_CONFIG": "2"}
    times = job.tuned["times_us"]
    assert set(times) == {"one_block", "wide_grid"} and times["wide_grid"] < times["one_block"]
    assert "fails the correctness gate" in job.tuned["rejected"]["wrong_scale"]
    assert job.tuned["gpu"] == torch.cuda.get_device_name()
    records = list((tmp_path / "autotune").glob("*.json"))
    assert len(records) == 1 and json.loads(records[0].read_text())["candidate"] == "wide_grid"
    again = composed_again_untimed(cfg, monkeypatch)
    assert again.candidate == "wide_grid"
    r = run_job(again)
    assert r.status == "ok", r.error
    assert r.params["base_candidate"] == "wide_grid" and r.params["base_candidate_from"] == "timed"
    assert r.params["autotune_configs_timed"] == "2"


def test_the_candidates_tool_reads_each_candidates_counters_and_the_peers():
    """tools/gemm_candidates.py --counters on matmul_triton at a small shape: ncu reads one launch
    of each timed candidate, fastest first, and of cuBLAS, each on its own stream, and every side
    has a time and the bytes its SMs received from L2."""
    import shutil

    from ablate.gpu import profile
    from ablate.gpu.autotune import measure_candidates
    from ablate.job.job import make_job

    if shutil.which("ncu") is None:
        pytest.skip("ncu is not on the PATH")
    candidates_tool = tool("gemm_candidates")
    cfg = plugins.compose("matmul_triton", ["pathology=none", "mode=gpu", "shape=sq2k_bf16", "shape.m=256",
                                            "shape.n=384", "shape.k=208"])
    job = make_job(cfg, "small")
    record = measure_candidates(job, ["m64", "square"])
    found = candidates_tool.read_counters(job, record)
    assert not isinstance(found, str), found
    assert list(found) == [*sorted(record["times_us"], key=record["times_us"].get), record["peer"]]
    for name, values in found.items():
        assert values[profile.TIME] > 0 and values[candidates_tool.CROSSBAR["into SMs"]] > 0, (name, values)
