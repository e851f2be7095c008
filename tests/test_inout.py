"""inout tensors (spec.INOUTS: y of y = a x + b y, a residual, a cache): the correctness gate's
reference reads the contents the kernel was given, not what it left; every timed launch of
base, variant and peers reads the same contents (a restore after each launch, in the graph);
the sanitizer's check and the profile driver's launches do the same. On the CPU with a fake
kernel where the GPU is not needed; the real path on a GPU (tests/fixtures/plugins/axpby)."""
import json
from pathlib import Path

import pytest

from ablate.job import plugins

torch = pytest.importorskip("torch")

ROOT = Path(__file__).resolve().parents[1]
AXPBY = plugins.load_dir(ROOT / "tests" / "fixtures" / "plugins" / "axpby")
SHAPE = {"n": 1000, "a": 0.5, "b": -2.0}


class FakeKernel:
    """The axpby kernel on CPU tensors, in place as the CUDA one is; it records the y each
    launch found. `wrong`: it leaves y as it was."""

    def __init__(self, wrong=False):
        self.spec, self.seen, self.wrong = AXPBY.spec, [], wrong

    def __call__(self, tensors, shape):
        self.seen.append(tensors["y"].clone())
        if not self.wrong:
            tensors["y"].mul_(shape["b"]).add_(tensors["x"], alpha=shape["a"])


def test_an_inout_spec_says_so():
    assert AXPBY.spec.OUTPUTS == ("y",) and AXPBY.spec.INOUTS == ("y",)
    assert AXPBY.spec.bytes_moved(SHAPE) == 4 * 1000 * 3  # x read, y read and written


def test_the_gate_checks_an_inout_against_its_contents_before_the_launch():
    from ablate.gpu.check import check, poisoned_inputs

    assert torch.isfinite(poisoned_inputs(AXPBY.spec, SHAPE, 0, "cpu")["y"]).all()  # not poisoned: read
    result = check(FakeKernel(), SHAPE, device="cpu")
    assert result["ok"] and result["rel_err"] < 1e-6, result
    wrong = check(FakeKernel(wrong=True), SHAPE, device="cpu")
    assert not wrong["ok"] and "exceeds tolerance" in wrong["error"]


def test_compare_refuses_an_inout_without_its_original():
    from ablate.gpu.check import compare, poisoned_inputs

    with pytest.raises(ValueError, match=r"inout tensors \['y'\] need their contents from before"):
        compare(AXPBY.spec, poisoned_inputs(AXPBY.spec, SHAPE, 0, "cpu"), SHAPE, 1e-6)


def test_every_launch_of_every_candidate_reads_the_inout_as_made(monkeypatch):
    from ablate.gpu import timing

    sets = timing.make_inputs(AXPBY.spec, SHAPE, 3, 1, "cpu")
    made = [s["y"].clone() for s in sets]
    monkeypatch.setattr(torch.cuda, "synchronize", lambda *a: None)
    base, variant, peer_seen = FakeKernel(), FakeKernel(), []

    def peer(shape):
        def run(t):
            peer_seen.append(t["y"].clone())
            t["y"].add_(1.0)
        return run
    monkeypatch.setattr(AXPBY.spec.module, "PEERS", {"torch": peer}, raising=False)
    cands, skipped, optional = timing.candidates(AXPBY.spec, sets, SHAPE, {"base": (base, 1), "variant": (variant, 2)},
                                                 ["torch"])
    assert list(cands) == ["base", "variant", "torch", timing.RESTORE] and not skipped
    assert optional == ["torch", timing.RESTORE]
    for i in range(7):  # as a graph of 7 launches over 3 sets would, twice through the rotation
        for name in ("base", "variant", "torch"):
            cands[name](i % 3)
    assert len(base.seen) == 7 and len(variant.seen) == 14 and len(peer_seen) == 1 + 7
    assert all(torch.equal(y, made[i % 3]) for i, y in enumerate(base.seen))
    assert all(torch.equal(y, made[i % 3]) for i, y in enumerate(variant.seen))  # sets 2i, 2i+1
    assert all(torch.equal(y, made[0 if i == 0 else (i - 1) % 3]) for i, y in enumerate(peer_seen))
    assert all(torch.equal(s["y"], m) for s, m in zip(sets, made))


def test_a_kernel_without_inout_gets_no_restore():
    from ablate.gpu import timing

    spec = plugins.load("rmsnorm").spec
    assert timing.restorer(spec, [{}]) is None
    cands, _, optional = timing.candidates(spec, [{}], {}, {"base": (FakeKernel(), 1)})
    assert list(cands) == ["base"] and optional == []


def test_the_sanitizer_checks_an_inout_against_the_case_as_written(tmp_path):
    from ablate.tools.sanitize import check_case, write_case

    tensors = write_case(AXPBY.spec, SHAPE, 0, tmp_path)
    meta = json.loads((tmp_path / "case.json").read_text())
    assert meta["outputs"] == ["y"]

    def drive(wrong=False):  # what the driver does: run on the saved bytes, write y.out
        got = {n: torch.frombuffer(bytearray((tmp_path / f"{n}.bin").read_bytes()), dtype=torch.float32)
               for n in ("x", "y")}
        FakeKernel(wrong)(got, SHAPE)
        (tmp_path / "y.out").write_bytes(got["y"].numpy().tobytes())

    drive()
    assert check_case(AXPBY.spec, tensors, tmp_path, SHAPE) is None
    assert check_case(AXPBY.spec, tensors, tmp_path, SHAPE) is None  # the originals stay as written
    drive(wrong=True)
    assert "exceeds tolerance" in check_case(AXPBY.spec, tensors, tmp_path, SHAPE)[0]


def test_the_profile_driver_gives_each_launch_its_own_inout():
    from ablate.gpu.check import originals

    inputs = AXPBY.spec.make_inputs(SHAPE, torch.Generator().manual_seed(0), "cpu")
    runs = [{**inputs, **originals(AXPBY.spec, inputs)} for _ in range(3)]
    assert len({id(r["y"]) for r in runs} | {id(inputs["y"])}) == 4
    assert all(r["x"] is inputs["x"] and torch.equal(r["y"], inputs["y"]) for r in runs)
    src = (ROOT / "ablate" / "gpu" / "profile_driver.py").read_text()
    assert "originals(kspec, inputs)" in src and "for run in runs[1:]" in src


# ---- on a GPU: the CUDA kernel, graph replays ------------------------------------------------

@pytest.fixture(scope="module")
def axpby_lib(tmp_path_factory):
    from ablate.build.compile import build
    from ablate.job.variant import variant_from_cfg

    cfg = plugins.compose("axpby", ["pathology=none", f"build.dir={tmp_path_factory.mktemp('build')}"],
                          kernel_path=[AXPBY.dir.parent])
    variant = variant_from_cfg(cfg.pathology, AXPBY.dir)
    result = build([variant], cfg.build, AXPBY, ROOT)[variant.name]
    assert result.status == "built", result.log
    return result.lib


@pytest.mark.gpu
def test_an_inout_kernel_passes_the_gate_and_its_replays_start_alike(axpby_lib):
    from ablate.build.library import Kernel
    from ablate.gpu import timing
    from ablate.gpu.check import check

    kernel = Kernel(axpby_lib, AXPBY.spec)
    shape = {"n": 1 << 20, "a": 0.5, "b": -2.0}
    assert check(kernel, shape)["ok"]
    sets = timing.make_inputs(AXPBY.spec, shape, 2, 1, "cuda")
    made = [s["y"].clone() for s in sets]
    cands, _, optional = timing.candidates(AXPBY.spec, sets, shape, {"base": (kernel, 1), "variant": (kernel, 1)})
    samples, launches, dropped = timing.measure(cands, 2, {"samples": 5, "warmup": 1, "min_sample_us": 200},
                                                optional=optional)
    torch.cuda.synchronize()
    assert set(samples) == {"base", "variant", timing.RESTORE} and not dropped and launches["base"] > 2
    assert all(torch.equal(s["y"], m) for s, m in zip(sets, made))  # every replay restored what it changed
    kernel(sets[0], shape)
    assert not torch.equal(sets[0]["y"], made[0])  # (the kernel does change y)
