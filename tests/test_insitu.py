"""In situ on the CPU (ablate/gpu/insitu.py): the workload named by module path and its bad inputs,
the variant put into the model and taken out again, the op built from a spec's TENSORS. The
step's profile and timing need a GPU: tests/test_insitu_gpu.py."""
import math
import sys
from pathlib import Path
from types import SimpleNamespace

import pytest

torch = pytest.importorskip("torch")

from ablate.gpu import insitu as step, swap
from ablate.job import workload  # noqa: E402
from ablate.job import plugins  # noqa: E402
from ablate.job.job import make_job  # noqa: E402
from ablate.job.thin import tensors_of  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
FIXTURES = ROOT / "tests" / "fixtures"
sys.path.insert(0, str(FIXTURES / "workloads"))


def toy_plugin(name="toy_double"):
    """A plugin as the op route sees it: a name and a spec with TENSORS and a shape."""
    spec = SimpleNamespace(tensors=tensors_of({"x": ("in", "n", "fp32"), "out": ("out", "n", "fp32")}),
                           validate_shape=lambda s: {"n": int(s["n"])})
    return SimpleNamespace(name=name, spec=spec)


class Doubler:
    """A 'library': out = factor * x, as a loaded kernel is called (tensors, shape)."""

    def __init__(self, factor=2.0):
        self.factor, self.seen = factor, 0

    def __call__(self, tensors, shape):
        self.seen += 1
        tensors["out"].copy_(self.factor * tensors["x"])


def cfg(**options):
    return {"workload": "toy:doubled", "options": options, "ref_tolerance": 1e-6}


def test_the_op_is_built_from_the_specs_tensors():
    assert swap.schema(toy_plugin().spec) == "(Tensor x, Tensor(b!) out, str shape) -> ()"
    spec = plugins.load("attention_hopper").spec
    assert swap.schema(spec) == "(Tensor q, Tensor k, Tensor v, Tensor(d!) o, str shape) -> ()"


def test_the_variant_runs_in_the_model_and_the_check_compares_it():
    plugin = toy_plugin()
    swap.register(plugin)
    w = workload.build("toy:doubled", {}, "cpu")
    base, variant = Doubler(2.0), Doubler(2.0 + 1e-3)
    metrics = step.check(w, plugin, base, variant, "toy:doubled", 1e-6)
    assert base.seen == 2 and variant.seen == 1 and metrics["step_calls"] == 1
    assert math.isclose(metrics["step_rel_err"], 5e-4, rel_tol=1e-3) and metrics["step_ref_rel_err"] == 0
    with swap.active(plugin, Doubler(2.0), launches=2) as now:  # the calibrated 2x: twice per call
        w["step"]()
    assert now.kernel.seen == 2 and now.calls == 1
    with pytest.raises(RuntimeError, match="outside an ablate job"):
        w["step"]()


def test_a_workload_that_cannot_be_imported_is_one_line(tmp_path):
    for target, words in (("no_such_module:train", "cannot be imported"), ("toy:no_such", "has no function"),
                          ("not a path", "must be 'package.module:function'")):
        with pytest.raises(ValueError, match=words) as e:
            make_job(plugins.compose("rmsnorm", ["mode=static", f"insitu.workload={target!r}" if " " in target
                                                  else f"insitu.workload={target}"]))
        assert "\n" not in str(e.value)
    with pytest.raises(ValueError, match="insitu.max_rounds must be"):
        make_job(plugins.compose("rmsnorm", ["mode=static", "insitu.workload=toy:doubled", "insitu.max_rounds=1"]))
    with pytest.raises(ValueError, match=r"must return \{'step'"):
        workload.build("toy:not_a_dict", {}, "cpu")


@pytest.mark.parametrize("name,options,words", [
    ("toy_never", {"launch": False}, "never launches kernel toy_never .its share of the step is 0"),
    ("toy_drift", {"drift": True}, "output changes under the base from one run to the next")])
def test_a_workload_that_cannot_measure_the_kernel_is_said_so(name, options, words):
    """A workload that never launches the kernel (share 0: no 1.000x result), and one whose
    output changes under the base (nothing to compare a variant against)."""
    plugin = toy_plugin(name)
    swap.register(plugin)
    w = workload.build("toy:doubled", {"kernel": name, **options}, "cpu")
    with pytest.raises(step.InSituError, match=words):
        step.check(w, plugin, Doubler(), Doubler(), "toy:doubled", 1e-6)


def test_a_workload_that_raises_is_the_jobs_recorded_error():
    """measure.gpu_job's in-situ part: the workload's exception becomes the job's error, its
    kernel figures kept (the child records the job crashed, failed_side insitu)."""
    from ablate.gpu import measure

    plugin = toy_plugin("toy_fail")
    step._built.clear()
    metrics, params = {"slowdown": 1.1}, {}
    spec = {"insitu": {**cfg(kernel="toy_fail", fail=True), "steps_per_round": 1, "min_rounds": 2, "max_rounds": 2,
                       "precision": 0.01, "budget_s": 1, "profile_steps": 1},
            "bench": {"seed": 0, "min_effect": 0.01}}
    error = measure._in_situ(plugin, Doubler(), Doubler(), spec, 1.1, metrics, params, {})
    assert error == "in situ: the workload toy:doubled raised ValueError: the toy model's step broke"
    assert metrics == {"slowdown": 1.1}
    error = measure._in_situ(plugin, Doubler(), Doubler(), {**spec, "sm_fraction": 0.5}, 1.1, metrics, params, {})
    assert error is None and "green context" in params["step_not_measured"]


def test_amdahl_against_the_measured_interval_in_words():
    assert step.versus(1.05, 1.04, 1.06) == "agrees"
    assert step.versus(1.01, 1.04, 1.06).startswith("slower than Amdahl predicts")
    assert step.versus(1.10, 1.04, 1.06).startswith("faster than Amdahl predicts")


def test_a_library_function_is_replaced_wherever_it_is_held_and_restored_after_an_error(tmp_path, monkeypatch,
                                                                                     request):
    """The Triton route: every module holding the library's function gets the stand-in, which
    binds the library's own call (the variant's meta over the caller's, the caller's grid
    evaluated with it); after the `with`, even one that raised, the function is back."""
    pytest.importorskip("triton")
    from test_triton_libraries import FIXTURES as PLUGINS, package_plugin

    folder = package_plugin(tmp_path, "axpy_lib.kernels:axpy_kernel", (PLUGINS / "even_axpy" / "base" / "axpy.py").read_text())
    monkeypatch.syspath_prepend(str(tmp_path / "site"))
    for name in [m for m in sys.modules if m.split(".")[0] == "axpy_lib"]:
        monkeypatch.delitem(sys.modules, name)  # another test's copy of the package
    plugin = plugins.load("lib_axpy", [folder.parent])
    request.addfinalizer(lambda: [sys.modules.pop(m) for m in list(sys.modules) if m.split(".")[0] == "axpy_lib"])
    import axpy_lib.kernels as lib  # ours lies in this tmp_path: taken out again after the test
    original = lib.axpy_kernel
    holder = SimpleNamespace(__name__="holder")
    holder_module = type(sys)("axpy_holder")
    holder_module.kernel = original  # a module that imported it by name
    monkeypatch.setitem(sys.modules, "axpy_holder", holder_module)

    launched = []

    class Variant:
        meta = {"BLOCK": 512, "num_warps": 2}

        def meta_of(self, args):
            return {**self.meta, "EVEN": args["n"] % 512 == 0}

        def launch_grid(self, args, grid, stream, meta=None):
            launched.append((sorted(args), grid))

    assert swap.is_library_triton(plugin)
    with pytest.raises(KeyError), swap.active(plugin, Variant()) as now:
        assert isinstance(lib.axpy_kernel, swap.Standin) and holder_module.kernel is lib.axpy_kernel
        lib.axpy_kernel[lambda meta: (-(-meta["n"] // meta["BLOCK"]),)]("x", "y", "out", 2.0, 4096, BLOCK=1024,
                                                                        num_warps=4)
        raise KeyError("the step broke")
    assert lib.axpy_kernel is original and holder_module.kernel is original and now.calls == 1
    assert launched == [(["alpha", "n", "out", "x", "y"], (8,))]  # BLOCK 512 (the variant's), not the caller's 1024
    del holder


def test_the_ranking_says_what_each_pathology_is_worth_to_the_step(tmp_path, monkeypatch):
    """make rank's columns, the findings' section and the figure from jobs with step metrics."""
    import pandas as pd

    from ablate.report import insitu

    rows = [{"pathology": "none", "shape": "tok16k", "slowdown": 1.0, "slowdown_lo": 0.998, "slowdown_hi": 1.002,
             "step_slowdown": 1.0001, "step_slowdown_lo": 0.9995, "step_slowdown_hi": 1.0007, "step_share": 0.0035,
             "step_amdahl": 1.0, "step_twice": 1.0058, "step_significant": 0, "step_launches": 17.0,
             "workload": "ablate.workloads.llama:train", "step_vs_amdahl": "agrees"},
            {"pathology": "oversized_block", "shape": "tok16k", "slowdown": 1.30, "slowdown_lo": 1.28,
             "slowdown_hi": 1.32, "step_slowdown": 1.0040, "step_slowdown_lo": 1.0021, "step_slowdown_hi": 1.0059,
             "step_share": 0.0035, "step_amdahl": 1.00105, "step_twice": 1.0056, "step_significant": 1,
             "step_launches": 17.0, "workload": "ablate.workloads.llama:train",
             "step_vs_amdahl": "slower than Amdahl predicts: the step lost more"},
            {"pathology": "half_warps", "shape": "tok16k", "slowdown": 1.01, "slowdown_lo": 1.0, "slowdown_hi": 1.02}]
    ranked = pd.DataFrame(rows)
    assert insitu.has_steps(ranked)
    cols = insitu.columns(ranked)
    assert list(cols["share"]) == ["0.35%", "0.35%", "-"] and cols["step [95% CI]"][1] == "1.0040x [1.0021, 1.0059]"
    text = "\n".join(insitu.lines(ranked))
    assert "oversized_block at tok16k in ablate.workloads.llama:train: the kernel 1.300x, the step 1.0040x" in text
    assert "(significant); Amdahl predicts 1.0010x from the kernel's 0.35% of the step: slower than Amdahl predicts" in text
    assert "the kernel twice over costs the step 1.0057x: a kernel 10% faster would buy about 0.06% of the step" in text
    assert "none at" not in text and "the control" not in text  # an A/A check that holds is no finding
    assert insitu.figure(ranked, "tok16k", tmp_path / "step.png") and (tmp_path / "step.png").stat().st_size > 0
    wide = pd.concat([ranked, ranked.iloc[[1]].assign(pathology="no_unroll", slowdown=45.0, slowdown_lo=44.9,
                                                      slowdown_hi=45.1, step_slowdown=2.5, step_slowdown_lo=2.49,
                                                      step_slowdown_hi=2.51)])
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    shown, real = [], plt.subplots
    monkeypatch.setattr(plt, "subplots", lambda *a, **k: shown.append(a) or real(*a, **k))
    assert insitu.figure(wide, "tok16k", tmp_path / "wide.png")  # 45x beside 1.3x: a zoomed second panel
    assert insitu.figure(ranked, "tok16k", tmp_path / "step.png")  # all within 2.5x: one
    assert shown == [(1, 2), (1, 1)]
    assert not insitu.has_steps(ranked.drop(columns=["step_slowdown"]))
    # A control that does not hold is said (a prefill's base against itself read 0.9904x [0.9829, 0.9979],
    # H200 2026-12-02), and a pathology the step did not measure is named with why.
    failed = ranked.copy()
    failed.loc[0, ["step_slowdown", "step_slowdown_lo", "step_slowdown_hi", "step_significant"]] = \
        [0.9904, 0.9829, 0.9979, 1]
    failed["step_not_measured"] = [None, None, "half_sms runs on a green context's own stream"]
    text = "\n".join(insitu.lines(failed))
    assert ("the control (none, the base against itself) at tok16k in ablate.workloads.llama:train: the step "
            "0.9904x [0.9829, 0.9979], its interval clear of 1: this step's candidates differ by about 0.96%") in text
    assert "half_warps at tok16k: the kernel 1.010x; not measured in the step: half_sms runs on" in text
    assert "round's last candidate" not in text  # jobs that recorded no order effect: nothing said of it
    # The order effect: the failed control names its own; a large one (>= 1%) gets a line of the shape
    ordered = failed.assign(step_order_effect=[0.030, 0.028, None])
    text = "\n".join(insitu.lines(ordered))
    assert "read differences of that size here as noise; a round's last candidate ran +3.00% against its first" in text
    assert ("tok16k in ablate.workloads.llama:train: a round's last candidate ran +2.90% against its first (the "
            "median over its jobs)") in text
    assert "(the median" not in "\n".join(insitu.lines(failed.assign(step_order_effect=[0.002, 0.004, None])))
    # The planted 2x against the profiler's share: each job's interval holds 1 + share or not, and which way
    twice = ranked.iloc[:2].assign(step_twice=[1.0058, 1.0020], step_twice_lo=[1.0030, 1.0001],
                                   step_twice_hi=[1.0086, 1.0033], step_amdahl_twice=[1.0035, 1.0035])
    text = "\n".join(insitu.lines(twice))
    assert "; the 2x holds 1 + share (1.0035x) in 1 of 2 jobs' intervals, the median +0.04% from it" in text


def test_a_plugin_op_is_the_models_attention_and_the_reference_is_sdpa():
    """The prefill workload with attention=<plugin>: transformers' AttentionInterface calls
    torch.ops.ablate.<plugin> (built from attention_hopper's TENSORS) with the model's (B, H, S, D)
    query, key and value and the shape's fields; here a CPU stand-in computes causal attention
    for the kernel, so the check against the model's own SDPA holds to rounding."""
    pytest.importorskip("transformers", reason="transformers is not installed (pip install -e '.[insitu]')")
    spec = plugins.load("attention_hopper").spec
    plugin = SimpleNamespace(name="attention_cpu_standin", spec=spec)
    swap.register(plugin)
    seen = []

    class Attention:
        def __call__(self, tensors, shape):
            seen.append(shape)
            q, k, v = (tensors[n].float() for n in "qkv")
            o = torch.nn.functional.scaled_dot_product_attention(q, k, v, is_causal=shape["causal"])
            tensors["o"].copy_(o.to(tensors["o"].dtype))

    tiny = {"layers": 1, "batch": 2, "seq": 16, "hidden_size": 256, "intermediate_size": 512,
            "num_attention_heads": 4, "num_key_value_heads": 4, "vocab_size": 100, "dtype": "bf16"}
    w = workload.build("ablate.workloads.llama:prefill", {**tiny, "attention": "attention_cpu_standin"}, "cpu")
    assert w["graphs"] and w["reference"] is not None
    metrics = step.check(w, plugin, Attention(), Attention(), "prefill", 2e-2)
    assert metrics["step_calls"] == 1 and metrics["step_ref_rel_err"] < 2e-2
    assert seen[0] == {"batch": 2, "heads": 4, "seq": 16, "head_dim": 64, "causal": True, "dtype": "bf16"}
    fp32 = workload.build("ablate.workloads.llama:prefill", {**tiny, "dtype": "fp32", "seed": 1,
                                                               "attention": "attention_cpu_standin"}, "cpu")
    with pytest.raises(ValueError, match="the kernel takes FP16 or BF16, the model is torch.float32"), \
            swap.active(plugin, Attention()):
        fp32["step"]()


def test_the_share_counts_each_range_once_and_times_it_on_the_device():
    """Under CUDA a record_function range is a CPU event and a device annotation of one name: the
    H200 saw 18 ranges in 3 steps of a model that called the kernel 9 times (counted by name)."""
    from types import SimpleNamespace as E

    from torch.autograd import DeviceType

    from ablate.gpu.insitu import range_share

    cpu, dev, name = DeviceType.CPU, DeviceType.CUDA, "ablate::k"
    events = [E(name=name, device_type=cpu, is_user_annotation=True, self_device_time_total=0.0,
                device_time_total=3.0)] * 3 + \
             [E(name=name, device_type=dev, is_user_annotation=True, self_device_time_total=2.0,
                device_time_total=2.0)] * 3 + \
             [E(name="rms", device_type=dev, is_user_annotation=False, self_device_time_total=2.0,
                device_time_total=2.0)] * 3 + \
             [E(name="gemm", device_type=dev, is_user_annotation=False, self_device_time_total=94.0,
                device_time_total=94.0)]
    assert range_share(events, name) == (pytest.approx(6 / 100), 3)
    no_spans = [e for e in events if not (e.device_type == dev and e.is_user_annotation)]
    assert range_share(no_spans, name) == (pytest.approx(9 / 100), 3)


def test_graphs_are_captured_again_before_each_block_in_that_rounds_order(monkeypatch):
    """A graph captured once kept its capture for the whole job, and the difference between two
    captures of one step was the same in every round: the base against itself read 0.9904x
    [0.9829, 0.9979] in a prefill (H200, 2026-12-02). Captured three at a round's start, the block
    after the capture's idle ran fast (a round's last candidate 3.5-8% slower than its first). Each
    candidate is captured anew right before its own block, every round, the one before let go
    first; only the first captures, which check that the step captures at all, are warmed."""
    events = []

    class Graph:
        def __init__(self, name):
            self.name = name

        def replay(self):
            events.append(("replay", self.name))

    def graph(w, plugin, kernel, launches, warm=2):
        events.append(("capture", (kernel, launches), warm))
        return Graph((kernel, launches)), None

    monkeypatch.setattr(step, "_graph", graph)
    monkeypatch.setattr(step, "_timed", lambda run, n: [run() or 1.0 for _ in range(n)])
    # a graph's pool is freed by empty_cache only: before every capture after the first three
    monkeypatch.setattr(step, "_release_graphs", lambda: events.append(("release",)))
    candidates = {"base": ("b", 1), "variant": ("v", 1), "twice": ("b", 2)}
    cfg = {"steps_per_round": 2, "min_rounds": 4, "max_rounds": 4, "precision": 0.0, "budget_s": 60}
    rounds, reason, _, graphs = step.timed_rounds({"graphs": True, "step": None}, None, candidates, cfg, 7,
                                                  lambda r: {"half_width": 1.0})
    assert reason == "max_replicates" and len(rounds) == 4 and graphs.startswith("yes")
    assert [e[2] for e in events[:3]] == [2, 2, 2]
    # then, per block in each round's order: let go, capture (unwarmed), an untimed and 2 timed replays
    blocks = [candidates[n] for r in rounds for n in r]
    expected = [e for c in blocks for e in [("release",), ("capture", c, 0)] + [("replay", c)] * 3]
    assert events[3:] == expected and len(blocks) == 12


def test_the_order_effect_is_the_last_position_against_the_first():
    """Each candidate's round median over its mean, by position: a round's first runs 2% fast, its
    last 1% slow, whatever candidate holds the place."""
    import numpy as np

    speed = {"base": 100.0, "variant": 110.0, "twice": 120.0}
    rounds = []
    for order in [("base", "variant", "twice"), ("twice", "base", "variant"), ("variant", "twice", "base")] * 2:
        rounds.append({n: np.array([speed[n] * f] * 2) for n, f in zip(order, (0.98, 1.0, 1.01))})
    assert step.order_effect(rounds) == pytest.approx(0.03 / (2.99 / 3))  # against the mean, 0.9967 of the plain
    same = [{n: np.array([speed[n]] * 2) for n in order} for order in [("base", "variant", "twice")] * 3]
    assert step.order_effect(same) == pytest.approx(0.0, abs=1e-12)


def test_the_orders_are_counterbalanced_every_candidate_in_every_position_alike(monkeypatch):
    """Drawn at random with one seed for every job, the positions were unequal alike in every job;
    the training step's control read 1.0034x and 1.0033x, each interval just clear of 1 (H200,
    2026-12-02). Every six rounds run each of the six orders once, in a sequence the seed shuffles."""
    monkeypatch.setattr(step, "_graph", lambda w, plugin, kernel, launches, warm=2: (SimpleNamespace(replay=lambda: None), None))
    monkeypatch.setattr(step, "_timed", lambda run, n: [run() or 1.0 for _ in range(n)])
    monkeypatch.setattr(step, "_release_graphs", lambda: None)
    candidates = {"base": ("b", 1), "variant": ("v", 1), "twice": ("b", 2)}

    def orders(seed, n):
        cfg = {"steps_per_round": 1, "min_rounds": n, "max_rounds": n, "precision": 0.0, "budget_s": 60}
        rounds = step.timed_rounds({"graphs": True, "step": None}, None, candidates, cfg, seed,
                                   lambda r: {"half_width": 1.0})[0]
        return [tuple(r) for r in rounds]
    twelve = orders(7, 12)
    assert len(set(twelve[:6])) == 6 and twelve[6:] == twelve[:6]
    for name in candidates:
        assert [sum(o.index(name) == i for o in twelve) for i in range(3)] == [4, 4, 4]
    assert orders(7, 6) == twelve[:6] and orders(8, 6) != twelve[:6]


def test_a_step_that_captures_once_but_not_again_is_one_line(monkeypatch):
    calls = []

    def graph(w, plugin, kernel, launches, warm=2):
        calls.append(warm)
        return (SimpleNamespace(replay=lambda: None), None) if warm else (None, "RuntimeError: capture")

    monkeypatch.setattr(step, "_graph", graph)
    monkeypatch.setattr(step, "_timed", lambda run, n: [1.0] * n)
    cfg = {"steps_per_round": 1, "min_rounds": 3, "max_rounds": 3, "precision": 0.0, "budget_s": 60}
    with pytest.raises(step.InSituError, match="captured in a CUDA graph once but not again in round 1"):
        step.timed_rounds({"graphs": True, "step": None}, None, {"base": ("b", 1), "variant": ("v", 1)}, cfg, 1,
                          lambda r: {"half_width": 1.0})
