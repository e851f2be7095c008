"""Hardware counters (issue 11): ncu's CSV parsed as recorded on the H100, the counter rules on
synthetic values, the skip paths where ncu cannot run, rules naming unknown metrics refused
before anything runs, the rank's verdicts and the roofline."""
import dataclasses
import json
import math
import os
import stat
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from ablate.job import counters, plugins
from ablate.gpu import peaks, profile
from ablate.report import roofline
from ablate.job.job import make_job
from ablate.job.result import Result
from conftest import KERNELS
from ablate.job.variant import VariantError, variant_from_cfg

ROOT = Path(__file__).resolve().parents[1]
FIXTURES = ROOT / "tests" / "fixtures" / "ncu"
BANKS = "l1tex__data_bank_conflicts_pipe_lsu_mem_shared.sum"
TIME = profile.TIME


# ---- ncu's CSV, recorded on the H100 (2026-11-23, ncu 2025.3.1; scratch of the first GPU call)

def test_parse_groups_the_launches_by_stream_base_first():
    text = (FIXTURES / "attention_s512_no_swizzle.csv").read_text()
    found = profile.parse(text)
    base, variant = found["base"], found["variant"]
    assert base[TIME] == 13504 and variant[TIME] == 28064          # ns: "13,504" parsed
    assert base[BANKS] == 0 and variant[BANKS] == 4_243_456        # no_swizzle's conflicts
    assert base["dram__bytes.sum"] == 6_335_232
    assert base["launch__registers_per_thread"] == 255
    assert "launch__func_cache_config" not in base                  # text values are no counters


def test_parse_keeps_only_the_metrics_asked_for():
    text = (FIXTURES / "rmsnorm_r16k_h8k_two_pass.csv").read_text()
    found = profile.parse(text, {TIME, "dram__bytes_read.sum"})
    assert set(found["base"]) == {TIME, "dram__bytes_read.sum"}
    assert found["variant"]["dram__bytes_read.sum"] == 295_734_016


def test_parse_refuses_output_without_a_report_or_two_streams():
    with pytest.raises(ValueError, match="no CSV report"):
        profile.parse("==PROF== Connected to process 1\n==ERROR== something\n")
    text = (FIXTURES / "attention_s512_no_swizzle.csv").read_text().splitlines()
    one_stream = "\n".join(text[:-1])  # the variant's row dropped
    with pytest.raises(ValueError, match="2 streams"):
        profile.parse(one_stream)


def test_parse_names_a_stream_for_each_side_the_driver_ran_in_order():
    """tools/gemm_candidates.py --counters: each candidate and the peer on a stream of its own,
    named in launch order; too few streams for the names is refused, naming them."""
    from ablate.gpu import profile_driver

    lines = (FIXTURES / "attention_s512_no_swizzle.csv").read_text().splitlines()
    third = lines[-1].replace('"1"', '"2"', 1).replace('"17"', '"21"', 1)  # the variant's row, again: ID 2, stream 21
    found = profile.parse("\n".join(lines + [third]), {TIME}, ["large", "skinny", "cublas"])
    assert list(found) == ["large", "skinny", "cublas"]
    assert found["large"][TIME] == 13504 and found["skinny"][TIME] == found["cublas"][TIME] == 28064
    with pytest.raises(ValueError, match=r"expected the launches of 3 streams \(large, skinny, cublas\), found 2"):
        profile.parse("\n".join(lines), None, ["large", "skinny", "cublas"])
    # a job's wire names no sides: its base once, then its variant `launches` times on its share of SMs
    assert profile_driver.sides_of({"base_so": "b.so", "variant_so": "v.so", "launches": 2, "sm_fraction": 0.5}) == [
        {"name": "base", "so": "b.so"}, {"name": "variant", "so": "v.so", "launches": 2, "sm_fraction": 0.5}]
    sides = [{"name": "m64", "so": "m64.so"}, {"name": "cublas", "peer": "cublas"}]
    assert profile_driver.sides_of({"sides": sides, "base_so": "ignored"}) == sides


def test_parse_sums_sum_metrics_over_several_launches_of_one_candidate():
    lines = (FIXTURES / "attention_s512_no_swizzle.csv").read_text().splitlines()
    header = next(i for i, ln in enumerate(lines) if ln.startswith('"ID"'))
    base_row = lines[header + 2]
    # the base launched twice: a second row on its stream (ID 5), after the variant's
    extra = base_row.replace('"0"', '"5"', 1)
    found = profile.parse("\n".join(lines + [extra]))
    assert found["base"][TIME] == 2 * 13504
    assert found["base"]["sm__warps_active.avg.pct_of_peak_sustained_active"] == 6.24  # the longest's


def test_every_fixture_metric_name_is_known_and_mlflow_accepts_it():
    from mlflow.utils.validation import _validate_metric_name

    cfg = plugins.compose("attention", ["pathology=no_cp_async"])
    asked = profile.metric_set(cfg.kernel.counters, {"no_cp_async": dict(cfg.pathology.no_cp_async)})
    names = profile.parse((FIXTURES / "attention_s4k_no_cp_async.csv").read_text(), set(asked))["base"]
    assert sorted(names) == asked  # ncu reported every metric asked, ablate's own included
    for name in names:
        assert counters.is_known(name), name
        _validate_metric_name(f"ncu.variant.{name}")


# ---- the rules, on synthetic values -------------------------------------------------------

@pytest.mark.parametrize("rule, value, base, expected", [
    ({"ratio_at_least": 100}, 4_243_456, 0, True),     # any positive over a zero base: infinite
    ({"ratio_at_least": 100}, 2_000, 23, False),
    ({"ratio_at_most": 0.3}, 3.0, 79.0, True),
    ({"ratio_at_most": 0.3}, 40.0, 79.0, False),
    ({"ratio_at_most": 1.05}, 0, 0, True),             # 0 / 0: no change
    ("zero", 0, 2_129_920, True),
    ("zero", 1, 0, False),
    ("increases", 0.53, 0.11, True),
    ("decreases", 12.2, 12.0, False),
    ("same", 33_554_432, 33_554_432, True),
    ({"at_least": 0.5}, 0.25, 0.12, False),
])
def test_rules_hold_or_not(rule, value, base, expected):
    assert counters.holds(rule, value, base) is expected


def test_verdict_and_the_counters_that_moved_most():
    triples = [("p", BANKS, {"ratio_at_least": 100}), ("p", TIME, "increases")]
    base = {BANKS: 23.0, TIME: 100.0, "lts__t_bytes.sum": 1e9, "smsp__inst_executed.sum": 2e6, "x__y.sum": 0.0}
    variant = {BANKS: 50.0, TIME: 150.0, "lts__t_bytes.sum": 4.5e9, "smsp__inst_executed.sum": 2.1e6, "x__y.sum": 0.0}
    state, checked_rules = counters.verdict(triples, base, variant)
    assert state == "refuted"
    assert [ok for *_, ok in checked_rules] == [False, True]
    moved = counters.moved_most(base, variant, n=2, skip={BANKS})
    assert [m for m, _, _ in moved] == ["lts__t_bytes.sum", "smsp__inst_executed.sum"]  # time left out
    assert counters.verdict(triples, base, {**variant, BANKS: 5000.0})[0] == "confirmed"
    assert counters.verdict(triples, {TIME: 1.0}, variant)[0] == "not measured"


def test_when_picks_the_shapes_a_block_applies_to():
    spec = {"counters": [{"when": {"causal": True}, "a__b.sum": {"ratio_at_least": 1.8}},
                         {"when": {"causal": False}, "a__b.sum": "same"}]}
    assert counters.applied({"p": spec}, {"causal": True})[0] == [("p", "a__b.sum", {"ratio_at_least": 1.8})]
    assert counters.applied({"p": spec}, {"causal": False})[0] == [("p", "a__b.sum", "same")]
    rows = {"counters": {"when": {"rows": {"at_least": 1024}}, "a__b.sum": "increases"}}
    assert counters.applied({"q": rows}, {"rows": 16}) == ([], ["q"])
    assert counters.applies(rows["counters"], {"rows": 16384})


# ---- validation before anything runs ----------------------------------------------------------

def test_an_unknown_metric_in_a_rule_is_reported_by_name_before_anything_runs():
    cfg = plugins.compose("attention", ["pathology=no_swizzle",
                                        "++pathology.no_swizzle.counters={l1tex__bank_conflictz.sum: increases}"])
    with pytest.raises(ValueError, match=r"no_swizzle.*unknown ncu metric 'l1tex__bank_conflictz.sum'"):
        make_job(cfg)


@pytest.mark.parametrize("counters_cfg, message", [
    ({"dram__bytes.sum": "grows"}, "unknown rule 'grows'"),
    ({"dram__bytes.sum": {"ratio_at_least": "ten"}}, "needs a number"),
    ({"dram__bytes": "increases"}, "unknown ncu metric 'dram__bytes'"),   # no rollup
    ({"dram__bytes.sum.ratio": "increases"}, "unknown ncu metric"),      # a counter takes no .ratio
    ([{"dram__bytes.sum": "increases"}, {"when": 3, "dram__bytes.sum": "same"}], r"\[1\]: when"),
    ({}, "must map ncu metric names"),
])
def test_malformed_counter_rules_are_refused(counters_cfg, message):
    with pytest.raises(VariantError, match=message):
        variant_from_cfg({"p": {"macros": {"ABLATE_P": 1}, "counters": counters_cfg}}, plugins.load("attention").dir)


def test_a_when_on_a_field_the_shape_lacks_and_bad_profile_settings_are_refused():
    cfg = plugins.compose("rmsnorm", ["pathology=two_pass",
                                      "++pathology.two_pass.counters=[{when: {seq: 5}, dram__bytes.sum: same}]"])
    with pytest.raises(ValueError, match=r"counters.when names \['seq'\]"):
        make_job(cfg)
    with pytest.raises(ValueError, match="bench.ncu_clock_control"):
        make_job(plugins.compose("rmsnorm", ["bench.ncu_clock_control=locked"]))
    with pytest.raises(ValueError, match=r"kernel.counters: unknown ncu metric 'nope__x.sum'"):
        make_job(plugins.compose("rmsnorm", ["kernel.counters=[nope__x.sum]"]))


@pytest.mark.parametrize("kernel", KERNELS)
def test_every_shipped_pathology_states_its_mechanism_in_counters(kernel):
    plugin = plugins.load(kernel)
    for name in plugin.options("pathology"):
        if name == "none":
            continue
        cfg = plugins.compose(kernel, [f"pathology={name}", "bench.profile=true"])
        variant = make_job(cfg).variant
        if variant.specs[name].get("tuned") and not variant.specs[name].get("counters"):
            continue  # a tunable's generated neighbour (ablate/job/tunables.py) claims no mechanism
        assert counters.blocks(variant.specs[name].get("counters")), f"{kernel}/{name} declares no counters"
        metrics = profile.metric_set(cfg.kernel.counters, {name: variant.specs[name]})
        assert set(profile.OWN) <= set(metrics)


# ---- where ncu cannot run: one line, the timing stands --------------------------------------

def _job_result():
    return Result("ok", metrics={"slowdown": 2.2})


def _job(ncu, **bench):
    """A no_swizzle job of the attention kernel whose rules are NO_SWIZZLE's, profiled by `ncu`."""
    job = make_job(plugins.compose("attention", ["pathology=no_swizzle"]))
    variant = dataclasses.replace(job.variant, specs={"no_swizzle": NO_SWIZZLE})
    return dataclasses.replace(job, variant=variant, shape={}, kernel_counters=(),
                               bench={**job.bench, "seed": 0, "ncu": ncu, **bench})


def _fake_ncu(tmp_path, body):
    path = tmp_path / "ncu"
    path.write_text("#!/bin/sh\n" + body + "\n")
    path.chmod(path.stat().st_mode | stat.S_IEXEC)
    return str(path)


NO_SWIZZLE = {"counters": {BANKS: {"ratio_at_least": 100}}}


@pytest.mark.parametrize("body, reason", [
    (None, "is not on the PATH"),
    ('echo "==ERROR== ERR_NVGPUCTRPERM - The user does not have permission to access NVIDIA GPU '
     'Performance Counters on the target device 0."; exit 1', "ERR_NVGPUCTRPERM"),
    ('echo "==ERROR== No kernels were profiled."; exit 0', "No kernels were profiled"),
    ("sleep 5", "longer than bench.ncu_timeout_s=1"),
])
def test_where_ncu_cannot_run_the_job_says_so_in_one_line_and_keeps_its_timing(tmp_path, caplog, body, reason):
    ncu = str(tmp_path / "no-such-ncu") if body is None else _fake_ncu(tmp_path, body)
    out = profile.add_counters(_job_result(), _job(ncu, ncu_timeout_s=1), {})
    assert out.status == "ok" and out.metrics["slowdown"] == 2.2
    assert out.params["ncu"].startswith("skipped: ") and reason in out.params["ncu"]
    assert "\n" not in out.params["ncu"]
    assert not any(k.startswith("ncu.") for k in out.metrics)
    warnings = [r.getMessage() for r in caplog.records if r.levelname == "WARNING"]
    assert len(warnings) == 1 and reason in warnings[0]


def test_counters_verdict_and_csv_land_in_the_result(tmp_path):
    ncu = _fake_ncu(tmp_path, f"cat '{FIXTURES / 'attention_s512_no_swizzle.csv'}'")
    out = profile.add_counters(_job_result(), _job(ncu), {})
    assert out.params["ncu"].startswith("ok")
    assert out.metrics[f"ncu.variant.{BANKS}"] == 4_243_456
    assert out.metrics["mechanism_confirmed"] == 1
    assert out.params["counters_verdict"] == "confirmed"
    assert json.loads(out.params["counters"]) == [["no_swizzle", BANKS, {"ratio_at_least": 100}]]
    assert out.artifacts["ncu.csv"].count("\n") >= 3


def test_the_ncu_command_flushes_caches_and_keeps_the_gpu_clocks():
    cmd = profile.command("ncu", ["a__b.sum", "c__d.sum"], "spec.json")
    assert cmd[cmd.index("--cache-control") + 1] == "all"
    assert cmd[cmd.index("--clock-control") + 1] == "none"
    assert cmd[cmd.index("--metrics") + 1] == "a__b.sum,c__d.sum"
    assert cmd[-3:] == ["-m", "ablate.gpu.profile_driver", "spec.json"]


def test_counter_metrics_are_logged_to_mlflow(tmp_path, monkeypatch, empty_store):
    from mlflow import MlflowClient

    from ablate.sweep import tracking

    uri = empty_store(tmp_path / "m.db")
    monkeypatch.setenv("MLFLOW_TRACKING_URI", uri)
    ncu = _fake_ncu(tmp_path, f"cat '{FIXTURES / 'attention_s512_no_swizzle.csv'}'")
    job = _job(ncu)
    out = profile.add_counters(_job_result(), job, {})
    run_id = tracking.log_job(job, out)
    run = MlflowClient(tracking_uri=uri).get_run(run_id)   # not the global URI an earlier rank set
    assert run.data.metrics[f"ncu.variant.{BANKS}"] == 4_243_456
    assert run.data.params["counters_verdict"] == "confirmed"
    assert "log_errors" not in run.data.tags


# ---- the rank's views and the roofline ---------------------------------------------------------

def _ranked():
    rows = []
    for name, banks, verdict in (("no_swizzle", 4e6, "confirmed"), ("tiny_blocks", 30.0, "refuted")):
        triples = [[name, BANKS, {"ratio_at_least": 100}]]
        rows.append({"pathology": name, "shape": "s", "counters": json.dumps(triples),
                     "counters_verdict": verdict, "base_us": 10.0, "variant_us": 20.0,
                     "base_tflops": 100.0, "variant_tflops": 50.0, "peak_tflops": 600.0, "peak_gbps": 3000.0,
                     f"ncu.base.{BANKS}": 20.0, f"ncu.variant.{BANKS}": banks,
                     "ncu.base.lts__t_bytes.sum": 1e9, "ncu.variant.lts__t_bytes.sum": 4.5e9,
                     f"ncu.base.{profile.DRAM_BYTES}": 6e6, f"ncu.variant.{profile.DRAM_BYTES}": 6e6,
                     **{f"ncu.{w}.{m}": 50.0 for w in ("base", "variant") for m in profile.SOL.values()}})
    return pd.DataFrame(rows)


def test_mechanism_rows_show_deciding_counters_and_what_moved_instead():
    rows = {r["pathology"]: r for r in counters.mechanism_rows(_ranked())}
    assert rows["no_swizzle"]["mechanism"] == "confirmed"
    assert "20 -> 4 M" in rows["no_swizzle"]["deciding counters (base -> variant)"]
    assert rows["tiny_blocks"]["mechanism"] == "refuted"
    assert rows["tiny_blocks"]["deciding counters (base -> variant)"].startswith("FAILS ")
    assert "lts__t_bytes.sum 1 G -> 4.5 G" in rows["tiny_blocks"]["moved most instead"]


def test_a_refuted_mechanism_whose_time_did_not_move_is_no_effect_not_refuted():
    """Issue 65: no_launch_bounds on the H200 (registers 48 -> 48, 0.993x) failed its rule
    `differs`; a pathology that did not act refutes nothing. Significant, the same counters refute."""
    ranked = _ranked().assign(significant=["yes", "no"], slowdown=[2.0, 1.0], slowdown_lo=[1.9, 0.99],
                              slowdown_hi=[2.1, 1.01])
    rows = {r["pathology"]: r for r in counters.mechanism_rows(ranked)}
    assert rows["no_swizzle"]["mechanism"] == "confirmed" and rows["tiny_blocks"]["mechanism"] == "no effect"
    assert rows["tiny_blocks"]["moved most instead"] == "-"
    assert counters.judged("refuted", "yes") == "refuted" and counters.judged("confirmed", "no") == "confirmed"
    assert counters.judged("refuted", None) == "refuted"  # a record without its significance: as it was
    rows = {r["pathology"]: r for r in counters.mechanism_rows(ranked.assign(significant=["yes", "yes"]))}
    assert rows["tiny_blocks"]["mechanism"] == "refuted"


def test_roofline_figure_and_speed_of_light_table(tmp_path):
    ranked = _ranked()
    pts = roofline.points(ranked, "s")
    assert [p[0] for p in pts] == ["base", "no_swizzle", "tiny_blocks"]
    assert math.isclose(pts[0][1], 100e12 * 10e-6 / 6e6)        # FLOPs per DRAM byte
    assert roofline.figure(ranked, "s", tmp_path / "r.png") and (tmp_path / "r.png").stat().st_size > 0
    sol = roofline.sol_table(ranked)
    assert list(sol["pathology"]) == ["base", "no_swizzle", "tiny_blocks"]
    assert sol.iloc[0]["tensor pipe"] == "50.0%"
    assert not roofline.figure(ranked.drop(columns=["peak_gbps"]), "s", tmp_path / "none.png")


def test_a_memory_bound_kernel_gets_a_bandwidth_chart_and_no_roofline(tmp_path):
    """rmsnorm-like jobs: achieved GB/s per variant against the copy ceiling, from the timing
    alone (no counters); a compute-bound kernel's jobs get none."""
    from ablate.report import rank

    ranked = pd.DataFrame([
        {"pathology": p, "shape": "r", "bound": "memory", "base_gbps": b, "variant_gbps": v, "peak_gbps": 3000.0,
         "slowdown": b / v, "slowdown_lo": b / v, "slowdown_hi": b / v, "significant": "yes", "run_id": p}
        for p, b, v in (("scalar_loads", 2900.0, 1500.0), ("tiny_blocks", 2960.0, 700.0))])
    assert roofline.bandwidth(ranked, "r") == [("base", 2930.0), ("scalar_loads", 1500.0), ("tiny_blocks", 700.0)]
    assert roofline.bandwidth_figure(ranked, "r", tmp_path / "b.png") and (tmp_path / "b.png").stat().st_size > 0
    assert not roofline.bandwidth_figure(ranked.assign(bound="compute"), "r", tmp_path / "none.png")
    assert not roofline.bandwidth_figure(ranked.drop(columns=["peak_gbps"]), "r", tmp_path / "none.png")
    written = rank.write(tmp_path, ranked.assign(sweep="s", status="ok"), ranked.assign(rank=[1, 2]), ["t"], ["m"])
    names = {p.name for p in written}
    assert "bandwidth_r.png" in names and "roofline_r.png" not in names


# ---- the GPU's ceilings, cached per GPU ---------------------------------------------------------

def fake_gpu(tmp_path, monkeypatch):
    """peaks on a made-up GPU: every measurement recorded in the returned list."""
    calls = []
    monkeypatch.setattr(peaks, "_cache_dir", [peaks.CACHE])
    peaks.use_dir(tmp_path)  # the job's peaks_dir, as the worker sets it
    monkeypatch.setattr(peaks, "_uuid", lambda d: ("GPU-1234", "Some GPU"))
    monkeypatch.setattr(peaks, "copy_gbps", lambda d: calls.append("copy") or 3000.0)
    monkeypatch.setattr(peaks, "copies", lambda d: {"kernel": 3000.0})

    def matmul(d, kind="fp16_tensor"):
        calls.append(kind)
        if kind == "fp8_tensor":
            raise RuntimeError("no FP8 tensor cores (compute capability < 8.9)")
        return {"fp16_tensor": 600.0, "bf16_tensor": 610.0, "tf32": 300.0, "fp32_fma": 50.0}[kind]
    monkeypatch.setattr(peaks, "matmul_tflops", matmul)
    monkeypatch.setattr(peaks, "_measured", {})
    pytest.importorskip("torch")
    return calls


def test_peaks_are_measured_once_per_gpu_and_cached_with_their_command(tmp_path, monkeypatch):
    calls = fake_gpu(tmp_path, monkeypatch)
    first = peaks.measured(0)
    peaks._measured.clear()
    again = peaks.measured(0)
    assert calls == ["copy", "fp16_tensor"] and first == again
    saved = json.loads((tmp_path / "GPU-1234.json").read_text())
    assert saved["copy_gbps"] == 3000.0 and saved["matmul_tflops"] == 600.0 and saved["command"] and saved["date"]


def test_each_kind_of_work_has_its_own_ceiling_measured_when_first_needed(tmp_path, monkeypatch):
    calls = fake_gpu(tmp_path, monkeypatch)
    # a cache written before the kinds of work: its two ceilings stand, the others are added
    (tmp_path / "GPU-1234.json").write_text(json.dumps({"gpu": "Some GPU", "copy_gbps": 2900.0,
                                                         "matmul_tflops": 590.0, "date": "then"}))
    assert peaks.peak("memory") == ("peak_gbps", 2900.0, "GB/s")
    assert peaks.peak("compute") == peaks.peak("fp16_tensor") == ("peak_tflops", 590.0, "TFLOP/s")
    assert calls == []
    assert peaks.peak("fp32_fma") == ("peak_tflops", 50.0, "TFLOP/s")
    assert peaks.peak("tf32")[1] == 300.0 and peaks.peak("bf16_tensor")[1] == 610.0
    assert peaks.peak("fp8_tensor") == ("peak_tflops", None, "TFLOP/s")  # this GPU has none
    assert peaks.peak("fp8_tensor")[1] is None and calls == ["fp32_fma", "tf32", "bf16_tensor", "fp8_tensor"]
    saved = json.loads((tmp_path / "GPU-1234.json").read_text())
    assert saved["fp32_fma_tflops"] == 50.0 and saved["copy_gbps"] == 2900.0
    assert saved["fp8_tensor_tflops"] is None and "compute capability" in saved["fp8_tensor_error"]
    assert set(saved["measured"]) == {"fp32_fma_tflops", "tf32_tflops", "bf16_tensor_tflops", "fp8_tensor_tflops"}
    assert peaks.roof_of("memory") == "fp32_fma" and peaks.roof_of("compute") == "fp16_tensor"
    with pytest.raises(ValueError, match="unknown kind of work 'fp64'"):
        peaks.peak("fp64")
    calls.clear()
    peaks.main(["0"])  # measures every kind again
    assert calls == ["copy", "fp32_fma", "tf32", "fp16_tensor", "bf16_tensor", "fp8_tensor"]
    assert json.loads((tmp_path / "GPU-1234.json").read_text())["command"] == "python -m ablate.gpu.peaks 0"


def test_the_kinds_of_work_are_the_thin_specs():
    from ablate.job import thin

    assert peaks.KINDS == thin.WORKS and set(peaks.KEYS) == set(peaks.WHAT) == set(thin.WORKS)


def test_the_roofline_names_its_compute_roof(tmp_path, monkeypatch):
    import matplotlib.axes

    labels, real = [], matplotlib.axes.Axes.plot

    def plot(self, *args, **kwargs):
        labels.append(kwargs.get("label"))
        return real(self, *args, **kwargs)
    monkeypatch.setattr(matplotlib.axes.Axes, "plot", plot)
    assert roofline.figure(_ranked().assign(roof="fp32_fma"), "s", tmp_path / "r.png")
    assert roofline.figure(_ranked(), "s", tmp_path / "old.png")  # jobs logged before: FP16
    assert labels == ["measured ceilings: 3000 GB/s copy, 600 TFLOP/s FP32 matmul, TF32 off (SGEMM)",
                      "measured ceilings: 3000 GB/s copy, 600 TFLOP/s FP16 matmul"]

@pytest.mark.gpu
def test_every_kind_of_work_is_measured_on_the_gpu():
    import torch

    rates = {k: peaks.matmul_tflops(0, k) for k in peaks.KINDS if k not in ("memory", "fp8_tensor")}
    assert 0 < rates["fp32_fma"] < rates["tf32"] < rates["fp16_tensor"], rates
    assert 0.8 < rates["bf16_tensor"] / rates["fp16_tensor"] < 1.25, rates
    if torch.cuda.get_device_capability(0) >= (8, 9):
        assert peaks.matmul_tflops(0, "fp8_tensor") > 1.3 * rates["fp16_tensor"], rates
    else:
        with pytest.raises(RuntimeError, match="no FP8"):
            peaks.matmul_tflops(0, "fp8_tensor")


def test_the_ceilings_are_cached_beside_the_runs_build_dir_not_in_the_checkout(tmp_path):
    """peaks_dir: null puts the cache beside build.dir (runs/peaks for runs/build), so a run
    given other folders writes nothing into the checkout; peaks_dir=... names its own."""
    from ablate.job import plugins
    from ablate.job.job import make_job

    job = make_job(plugins.compose("rmsnorm", ["pathology=none"]))
    assert job.peaks_dir == Path(__file__).resolve().parents[1] / "runs" / "peaks"
    job = make_job(plugins.compose("rmsnorm", ["pathology=none", f"build.dir={tmp_path / 'x' / 'build'}"]))
    assert job.peaks_dir == tmp_path / "x" / "peaks"
    assert job.wire("b.so", "v.so")["peaks_dir"] == str(tmp_path / "x" / "peaks")
    job = make_job(plugins.compose("rmsnorm", ["pathology=none", f"peaks_dir={tmp_path / 'p'}"]))
    assert job.peaks_dir == tmp_path / "p"
