"""A sweep on two GPUs of one host, on real GPUs: a variant that faults and one that hangs
are recorded as crashed and timeout while the jobs on the other GPU go on, each GPU's child
is replaced after its fault, the jobs spread over both GPUs and record theirs, and the
control is timed on both (its spread recorded). Skips with fewer than two GPUs."""
import time

import pytest

torch = pytest.importorskip("torch")

from test_pipeline_gpu import build_dir, planted_sweep  # noqa: E402,F401 (the session's build of the plants)

pytestmark = [pytest.mark.gpu,
              pytest.mark.skipif(not torch.cuda.is_available() or torch.cuda.device_count() < 2,
                                 reason="needs two GPUs")]
OK = ["none", "no_swizzle", "fp32_accum", "tiny_blocks", "scalar_loads", "no_cp_async", "extra_syncthreads",
      "over_unroll"]
TIMEOUT_S = 60


def test_a_fault_and_a_hang_on_one_gpu_while_the_other_goes_on(tmp_path, build_dir):
    order = ["fault", "hang", "wrong", *OK]
    tic = time.monotonic()
    jobs, _ = planted_sweep(tmp_path, build_dir, order, TIMEOUT_S)  # every visible GPU
    wall = time.monotonic() - tic
    status = {name: run.data.tags["status"] for name, run in jobs.items()}
    assert status["fault"] == "crashed" and status["hang"] == "timeout" and status["wrong"] == "incorrect"
    assert all(status[name] == "ok" for name in OK), {n: jobs[n].data.tags.get("error") for n in OK}
    gpu = {name: run.data.params["gpu_index"] for name, run in jobs.items()}
    assert len(set(gpu.values())) == 2, gpu  # both GPUs timed
    # Each job records its GPU's own UUID, one per GPU. (Not that the OK jobs ran on both:
    # the hang holds its GPU for bench.timeout_s, 60 s, while the other GPU takes every OK job
    # behind it, ~20 s of work: on two H200s all eight ran on GPU 0, as they should.)
    uuid = {gpu[name]: run.data.params["gpu_uuid"] for name, run in jobs.items()}
    assert len(set(uuid.values())) == 2, uuid
    assert all(run.data.params["gpu_uuid"] == uuid[gpu[name]] for name, run in jobs.items())
    # Each GPU's jobs after a fault or a hang there ran in a fresh child of that GPU.
    for bad in ("fault", "hang"):
        after = [n for n in order[order.index(bad) + 1:] if gpu[n] == gpu[bad] and n in OK]
        assert all(jobs[n].data.params["worker_pid"] != jobs[bad].data.params["worker_pid"] for n in after)
    # The hang held its GPU up to bench.timeout_s while the other GPU went on: the sweep did
    # not wait for it on top of everything else (the fault's child restarts once, ~10 s).
    print(f"sweep of {len(order)} jobs on two GPUs: {wall:.1f} s")
    control = jobs["none"].data
    assert control.params["control_gpus"] == ",".join(sorted(set(gpu.values())))
    assert 0 <= control.metrics["gpu_spread"] < 0.2
