"""The findings `make rank` prints first (ablate/report/findings.py), from a store the test fills
with the mis-tuned fixture's jobs (tests/fixtures/plugins/mistuned: its BLOCK = 32 is beaten
by its neighbour BLOCK = 64), as test_rank.py fills one for attention."""
import pandas as pd
import pytest
from mlflow import MlflowClient
from omegaconf import OmegaConf

from ablate.job import plugins, tunables
from ablate.report import findings, rank
from ablate.sweep import tracking
from conftest import log_cfg
from test_tunables import FIXTURES

SHAPE = "n64m"


def timed(s, half=0.01, overrides="none"):
    lo, hi = s * (1 - half), s * (1 + half)
    return {"status": "ok", "params": {"overrides": overrides}, "artifacts": {}, "error": None,
            "metrics": {"base_us": 100.0, "variant_us": 100.0 * s, "slowdown": s, "slowdown_lo": lo,
                        "slowdown_hi": hi, "significant": int(lo > 1.01 or hi < 0.99)}}


def cfg_of(name, body):
    return OmegaConf.create({"mode": "gpu", "kernel": {"name": "mistuned", "experiment": "mistuned"},
                             "build": {"arch": "sm_90"}, "shape": {"name": SHAPE}, "pathology": {name: body}})


@pytest.fixture(scope="module")
def store(tmp_path_factory, project_root, empty_store):
    folder = tmp_path_factory.mktemp("findings_store")
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("MLFLOW_TRACKING_URI", empty_store(folder / "mlflow.db"))
        mp.setenv(plugins.PATH_ENV, str(FIXTURES))
        plugin = plugins.load("mistuned")
        generated = tunables.pathologies(plugin)
        generic = {n: OmegaConf.to_container(OmegaConf.load(plugin.config_file("pathology", n)))[n]
                   for n in ("half_sms", "no_fp_fusion")}
        generic["half_sms"]["expected"] = "1.5-2x at n64m"  # a stated range the measurement misses below
        jobs = [("none", {"macros": {}, "header": None}, timed(1.0)),
                ("tune_block_64", generated["tune_block_64"], timed(0.53, overrides="BLOCK=64")),
                ("tune_block_16", generated["tune_block_16"], timed(1.9, overrides="BLOCK=16")),
                ("tune_num_warps_2", generated["tune_num_warps_2"], timed(1.002, overrides="num_warps=2")),
                ("half_sms", generic["half_sms"], timed(1.2)),
                ("no_fp_fusion", generic["no_fp_fusion"], timed(1.001))]
        parent = tracking.start_sweep(cfg_of("none", jobs[0][1]), project_root / "runs/hydra/multirun/2025-02-01/10-00-00")
        ids = {}
        for name, body, result in jobs:
            ids[name] = log_cfg(cfg_of(name, body), result, parent)
        log_cfg(cfg_of("tune_num_stages_2", generated["tune_num_stages_2"]),
                {"status": "not_applicable", "params": {}, "metrics": {}, "artifacts": {},
                 "error": "not applicable to this kernel: tune_num_stages_2's machine code equals the base's"}, parent)
        tracking.end_sweep(parent, "FINISHED")
        text = rank.rank(kernel="mistuned", out=folder / "out")
        yield {"folder": folder, "text": text, "parent": parent, "ids": ids,
               "client": MlflowClient(), "uri": empty_store}


def test_the_base_beaten_is_the_first_thing_rank_prints(store):
    text = store["text"]
    head = text.split("Ranking (slowdown")[0]  # the findings come before the tables
    assert "Findings" in head
    line = next(ln for ln in head.splitlines() if "the base is beaten at" in ln)
    assert line.strip() == ("- the base is beaten at n64m: tune_block_64 runs 1.887x faster [1.868, 1.906]; "
                            "adopt BLOCK=64 or explain")
    assert head.index("The base is beaten") < head.index("What carries the speed")


def test_the_other_findings_each_with_its_interval(store):
    head = store["text"].split("Ranking (slowdown")[0]
    carries = head.split("What carries the speed")[1].split("What is free")[0]
    assert "half_sms 1.200x [1.188, 1.212]" in carries
    assert "tune_block_16" not in carries  # a neighbour is no ablation: reported with its tunable
    free = head.split("What is free")[1].split("Predictions")[0]
    assert "no_fp_fusion 1.001x" in free and "half_sms" not in free
    missed = head.split("Predictions that missed")[1].split("Mechanisms")[0]
    assert "half_sms at n64m: expected 1.5-2x, measured 1.200x [1.188, 1.212] (below the range)" in missed
    assert "n64m: the base is NOT at a local optimum (BLOCK=64 1.887x faster [1.868, 1.906]) of the 2 tunables timed" in head
    assert "none 1.000x" not in head  # the A/A job is no finding
    assert "tune_num_stages_2 at n64m: not_applicable" in head


def test_the_tunables_table_shows_each_side_and_the_local_optimum(store):
    table = store["text"].split("Tunables: the slowdown on each side")[1]
    block = next(ln for ln in table.splitlines() if " BLOCK " in f" {ln} ")
    assert "16: 1.900x" in block and "64: 0.530x" in block and "NO: BLOCK=64 1.887x" in block
    warps = next(ln for ln in table.splitlines() if "num_warps" in ln)
    assert warps.rstrip().endswith("yes, one side timed")


def test_findings_are_an_artifact_and_tags_in_mlflow(store):
    md = (store["folder"] / "out" / "findings.md").read_text()
    assert "the base is beaten at n64m: tune_block_64 runs 1.887x faster" in md
    assert "| BLOCK |" in md.replace("  ", " ")
    client = store["client"]
    tags = client.get_run(store["ids"]["tune_block_64"]).data.tags
    assert tags["headroom"].startswith("the base is beaten at n64m: tune_block_64")
    assert "headroom" not in client.get_run(store["ids"]["tune_block_16"]).data.tags
    parent = client.get_run(store["parent"])
    assert "the base is beaten at n64m" in parent.data.tags["findings"]
    assert "findings.md" in [a.path for a in client.list_artifacts(store["parent"])]


def test_stated_ranges_are_read_per_shape():
    shapes = ["s512", "s4k", "n64m"]
    text = "1.15-1.35x at s512, 1.1-1.3x at s4k. The copy adds ~616 instructions"
    assert findings.stated_range(text, "s512", shapes)[:2] == (1.15, 1.35)
    assert findings.stated_range(text, "s4k", shapes)[:2] == (1.1, 1.3)
    assert findings.stated_range("~30x at s512 (4 of 132 SMs busy); ~8x at s4k.", "s4k", shapes)[:2] == \
        pytest.approx((8 / 1.1, 8 * 1.1))
    assert findings.stated_range("Large on a loop-bound kernel (1.5x or more)", "s4k", shapes)[:2] == (1.5, float("inf"))
    assert findings.stated_range("Up to 2x where registers bind", "s4k", shapes)[:2] == (0.0, 2.0)
    assert findings.stated_range("it costs something", "s4k", shapes) is None


def test_no_headroom_says_nowhere():
    ranked = pd.DataFrame([{"pathology": "a", "shape": "s", "slowdown": 1.5, "slowdown_lo": 1.4, "slowdown_hi": 1.6,
                            "significant": "yes", "expected": "", "counters_verdict": None, "tuned": "none"}])
    control = {**ranked.iloc[0].to_dict(), "pathology": "none", "slowdown": 0.95, "slowdown_lo": 0.94,
               "slowdown_hi": 0.96}  # the A/A job below 1: an unsteady machine, not a finding about the base
    text = findings.text(findings.of(pd.concat([ranked, pd.DataFrame([control])], ignore_index=True)))
    assert "nowhere: no variant is significantly faster than the base" in text
    assert "s: a 1.500x [1.400, 1.600]" in text


def test_a_sweep_of_neighbours_alone_says_it_ablated_nothing():
    """make tune times only tune_*: "nothing carries the speed" would read as a finding about
    the kernel; the findings say the question was not asked (the neighbour's 9x is in Tunables)."""
    row = {"shape": "s", "slowdown": 9.0, "slowdown_lo": 8.9, "slowdown_hi": 9.1, "significant": "yes",
           "expected": "", "counters_verdict": None}
    ranked = pd.DataFrame([{**row, "pathology": "tune_num_warps_4",
                            "tuned": '{"name": "num_warps", "base": 8, "value": 4}'}])
    text = findings.text(findings.of(ranked))
    assert "nothing: no pathology is a significant slowdown" not in text
    assert text.count("not asked: only the tunables' neighbours were timed") == 2
    own = findings.text(findings.of(pd.DataFrame([{**row, "pathology": "a", "significant": "no", "tuned": "none"}])))
    assert "nothing: no pathology is a significant slowdown" in own and "not asked" not in own
