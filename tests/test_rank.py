"""`make rank` on a store filled by the tests: a timed sweep over two shapes with failed
jobs, a static sweep at the same commit, and an older sweep to pick by id."""
import os
import shutil
import subprocess
import sys

import pandas as pd
import pytest
from omegaconf import OmegaConf

from ablate.report import rank
from ablate.sweep import tracking
from conftest import log_cfg

# Planted slowdowns at s512; at s1k_causal every pathology costs 1.5x as much again.
PLANTED = {"serial_grid": 8.0, "tiny_blocks": 2.5, "no_swizzle": 1.3, "fp32_accum": 1.02, "none": 1.0}
FAILED = {"uncoalesced": "crashed", "scalar_loads": "incorrect", "extra_syncthreads": "timeout",
          "no_cp_async": "build_failed"}
SHAPES = ["s512", "s1k_causal"]
BASE_STATIC = {"regs": 128, "smem_bytes": 81920, "spill_bytes": 0, "threads_per_block": 128,
               "occupancy_blocks": 2, "occupancy_warps": 8, "sass.hmma_f16": 512, "sass.hmma_f32": 0,
               "sass.ldsm": 96, "sass.bar": 12, "fingerprint_ok": 1}
STATIC_CHANGES = {
    "fp32_accum": {"regs": 160, "sass.hmma_f16": 0, "sass.hmma_f32": 512, "fingerprint_ok": 0},
    "tiny_blocks": {"threads_per_block": 32, "occupancy_warps": 16, "occupancy_blocks": 16},
    "no_swizzle": {"sass.ldsm": 96, "sass.bar": 12},  # nothing changed in these classes
    "serial_grid": {"sass.bar": 14},
}
OLD, TIMED, STATIC = "2025-01-30/09-00-00", "2025-01-31/10-00-00", "2025-01-31/11-00-00"


def job_cfg(name, shape, mode, kernel=("attention", "flash_attention_fwd")):
    return OmegaConf.create({
        "mode": mode, "kernel": {"name": kernel[0], "experiment": kernel[1]}, "build": {"arch": "sm_90"},
        "shape": {"name": shape},
        "pathology": {name: {"header": None, "macros": {} if name == "none" else {f"ABLATE_{name.upper()}": 1},
                             "mechanism": f"{name} defeats something", "expected": f"{name} costs something"}},
    })


def timed(s):
    lo, hi = s * 0.98, s * 1.02
    return {"status": "ok", "params": {}, "artifacts": {}, "error": None,
            "metrics": {"base_us": 20.0, "variant_us": 20.0 * s, "slowdown": s, "slowdown_lo": lo,
                        "slowdown_hi": hi, "significant": int(lo > 1 or hi < 1)}}


def sweep(sweep_id, mode, jobs, root, kernel=("attention", "flash_attention_fwd")):
    parent = tracking.start_sweep(job_cfg("none", "s512", mode, kernel), root / "runs/hydra/multirun" / sweep_id)
    for name, shape, result in jobs:
        log_cfg(job_cfg(name, shape, mode, kernel), result, parent)
    tracking.end_sweep(parent, "FINISHED")
    return parent


@pytest.fixture(scope="module")
def store(tmp_path_factory, project_root, empty_store):
    """The filled store's folder; MLFLOW_TRACKING_URI points at it for the module."""
    folder = tmp_path_factory.mktemp("rank_store")
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("MLFLOW_TRACKING_URI", empty_store(folder / "mlflow.db"))
        old = sweep(OLD, "gpu", [("none", "s512", timed(1.0)), ("no_swizzle", "s512", timed(1.05))], project_root)
        jobs = []
        for i, shape in enumerate(SHAPES):
            jobs += [(n, shape, timed(s if n == "none" else s * 1.5 ** i)) for n, s in PLANTED.items()]
            jobs += [(n, shape, {"status": st, "params": {}, "metrics": {}, "artifacts": {},
                                 "error": f"{n} went {st}\ndetails"}) for n, st in FAILED.items()]
        sweep(TIMED, "gpu", jobs, project_root)
        static = [("none", "s512", {"status": "static", "params": {}, "metrics": BASE_STATIC,
                                    "artifacts": {}, "error": None})]
        for name, change in STATIC_CHANGES.items():
            error = "fp32_accum: fingerprint sass.hmma_f16: zero does not hold" if name == "fp32_accum" else None
            static.append((name, "s512", {"status": "static", "params": {}, "metrics": {**BASE_STATIC, **change},
                                          "artifacts": {}, "error": error}))
        sweep(STATIC, "static", static, project_root)
        yield {"folder": folder, "old_parent": old}


def section(text, title):
    """The lines of one section of the report (sections are separated by blank lines)."""
    blocks = text.split("\n\n")
    i = next(i for i, b in enumerate(blocks) if b.startswith(title))
    return blocks[i + 1].splitlines()


def test_ranking_of_the_latest_sweeps(store, tmp_path):
    text = rank.rank(out=tmp_path)
    assert text.startswith(f"Sweep {STATIC} (kernel attention, mode static")
    assert f"Beside it, sweep {TIMED} (kernel attention, mode gpu" in text
    rows = section(text, "Ranking")[1:]
    order = {shape: [r.split()[1] for r in rows if r.split()[2] == shape] for shape in SHAPES}
    assert order == {shape: list(PLANTED) for shape in SHAPES}  # worst first
    assert [r.split()[0] for r in rows] == ["1", "2", "3", "4", "5"] * 2
    no_swizzle = next(r for r in rows if " no_swizzle " in r and " s1k_causal " in r)
    assert "1.950x [1.911, 1.989]" in no_swizzle and no_swizzle.split()[-1] == "yes"
    assert "20.00" in no_swizzle and "39.00" in no_swizzle
    fp32 = next(r for r in rows if " fp32_accum " in r and " s512 " in r)
    assert "1.020x [1.000, 1.040]" in fp32 and fp32.split()[-1] == "no"
    assert "- no_swizzle: no_swizzle defeats something\n  expected: no_swizzle costs something" in text

    # Jobs that produced no timing are listed below the ranking, never in it.
    unranked = section(text, "Not ranked")[1:]
    assert sorted((r.split()[0], r.split()[1], r.split()[2]) for r in unranked) == sorted(
        (n, shape, st) for n, st in FAILED.items() for shape in SHAPES)
    assert all(n not in "\n".join(rows) for n in FAILED)
    assert "uncoalesced went crashed" in text and "details" not in "\n".join(unranked)

    csv = pd.read_csv(tmp_path / "rank.csv")
    ranked = csv[csv["status"] == "ok"]
    assert len(ranked) == 10 and ranked["rank"].notna().all()
    assert csv.loc[csv["status"].isin(FAILED.values()), "rank"].isna().all()
    assert len(csv[csv["status"].isin(FAILED.values())]) == 8 and len(csv[csv["status"] == "static"]) == 5
    best = ranked[(ranked["rank"] == 1)]
    assert list(best["pathology"]) == ["serial_grid"] * 2 and list(best["slowdown"]) == [8.0, 12.0]

    md = (tmp_path / "rank.md").read_text()
    assert "## Ranking" in md and "## Not ranked" in md and "## Static analysis" in md
    assert "| 1 | serial_grid | s512 | 20.00 | 160.00 | 8.000x [7.840, 8.160] | yes |" in md
    for png in ["slowdown_s512.png", "slowdown_s1k_causal.png", "heatmap.png"]:
        assert (tmp_path / "plots" / png).read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_static_table_beside_the_ranking(store, tmp_path):
    text = rank.rank(out=tmp_path)
    rows = section(text, "Static analysis")
    names = [r.split()[0] for r in rows[1:]]
    assert names == ["none", "serial_grid", "tiny_blocks", "no_swizzle", "fp32_accum"]  # base, then ranking order
    fp32 = rows[1 + names.index("fp32_accum")]
    assert "128 -> 160" in fp32 and fp32.split()[-1] == "FAIL"
    tiny = rows[1 + names.index("tiny_blocks")]
    assert "128 -> 32" in tiny and "8 -> 16" in tiny and tiny.split()[-1] == "pass"
    assert "- fp32_accum: hmma_f16 512 -> 0, hmma_f32 0 -> 512" in text
    assert "- no_swizzle: none" in text and "- serial_grid: bar 12 -> 14" in text
    assert "Fingerprint FAIL, fp32_accum: fp32_accum: fingerprint sass.hmma_f16: zero does not hold" in text


def test_a_static_sweep_of_other_plugin_sources_is_never_shown_beside_a_ranking(tmp_path, monkeypatch, project_root,
                                                                                empty_store):
    """Two sweeps at one ablate commit but of different plugin code (the user's kernel changed
    between them) are not paired: one line says why there is no static table."""
    from ablate.job import plugins

    monkeypatch.setenv("MLFLOW_TRACKING_URI", empty_store(tmp_path / "mlflow.db"))
    static = [("none", "s512", {"status": "static", "params": {}, "metrics": BASE_STATIC, "artifacts": {},
                                "error": None})]
    real = tracking.plugin_provenance
    monkeypatch.setattr(tracking, "plugin_provenance", lambda p: {**real(p), "plugin_sources": "0123456789abcdef"})
    sweep("2025-05-01/10-00-00", "static", static, project_root)
    monkeypatch.setattr(tracking, "plugin_provenance", real)
    sweep("2025-05-01/11-00-00", "gpu", [("none", "s512", timed(1.0)), ("no_swizzle", "s512", timed(1.3))],
          project_root)
    digest = plugins.load("attention").sources_digest()
    text = rank.rank(out=tmp_path)
    assert "Static analysis" not in text
    assert (f"The static sweep 2025-05-01/10-00-00 at this commit ran other sources of the kernel's plugin "
            f"(plugin_sources 0123456789abcdef, this one's {digest}): not shown beside it.") in text
    assert f"plugin sources {digest}," in text.splitlines()[0]
    sweep("2025-05-01/12-00-00", "static", static, project_root)  # the same sources: paired
    text = rank.rank(sweep="2025-05-01/11-00-00", out=tmp_path)
    assert "Beside it, sweep 2025-05-01/12-00-00" in text and "Static analysis" in text
    assert "not shown beside it" not in text


def test_another_sweep_by_id(store, tmp_path):
    rank.rank(out=tmp_path)
    assert (tmp_path / "plots" / "heatmap.png").exists()
    for wanted in (OLD, store["old_parent"]):
        text = rank.rank(sweep=wanted, out=tmp_path)
        assert text.startswith(f"Sweep {OLD} (kernel attention, mode gpu")
        rows = section(text, "Ranking")[1:]
        assert [r.split()[:3] for r in rows] == [["1", "no_swizzle", "s512"], ["2", "none", "s512"]]
        assert "1.050x [1.029, 1.071]" in rows[0]
    # One shape: no heatmap, and the figures of the earlier ranking are gone.
    assert sorted(p.name for p in (tmp_path / "plots").iterdir()) == ["slowdown_s512.png"]


def test_unknown_sweep_is_a_clear_message(store, capsys):
    assert rank.main(["--sweep", "1999-01-01/00-00-00"]) == 1
    err = capsys.readouterr().err
    assert f"rank: unknown sweep '1999-01-01/00-00-00'; the latest sweeps are: {STATIC}, {TIMED}, {OLD}" in err
    assert "Traceback" not in err


def test_the_latest_sweep_of_any_kernel_or_of_the_one_named(tmp_path, monkeypatch, project_root, capsys, empty_store):
    """Each kernel logs to its own experiment: `make rank` takes the latest sweep of any of
    them, `--kernel` (KERNEL=name make rank) the latest of one."""
    monkeypatch.setenv("MLFLOW_TRACKING_URI", empty_store(tmp_path / "mlflow.db"))
    sweep("2025-02-01/10-00-00", "gpu", [("none", "r16_h4k", timed(1.0)), ("scalar_loads", "r16_h4k", timed(1.4))],
          project_root, kernel=("rmsnorm", "rmsnorm_fwd"))
    sweep("2025-02-01/11-00-00", "gpu", [("none", "s512", timed(1.0)), ("no_swizzle", "s512", timed(2.2))],
          project_root)
    latest = rank.rank(out=tmp_path)
    assert latest.startswith("Sweep 2025-02-01/11-00-00 (kernel attention, mode gpu")
    assert "no_swizzle" in latest and "scalar_loads" not in latest
    text = rank.rank(kernel="rmsnorm", out=tmp_path)
    assert text.startswith("Sweep 2025-02-01/10-00-00 (kernel rmsnorm, mode gpu")
    assert "1.400x" in "\n".join(section(text, "Ranking")) and "no_swizzle" not in text
    assert rank.rank(sweep="2025-02-01/10-00-00", out=tmp_path).startswith("Sweep 2025-02-01/10-00-00 (kernel rmsnorm")
    from mlflow import MlflowClient
    names = {e.name for e in MlflowClient(f"sqlite:///{tmp_path / 'mlflow.db'}").search_experiments()}
    assert {"rmsnorm_fwd", "flash_attention_fwd"} <= names


def replicated(s, lo, hi, reps=3, stop="precision"):
    result = timed(s)
    result["metrics"].update(slowdown_lo=lo, slowdown_hi=hi, replicates=reps, significant=int(lo > 1.01 or hi < 0.99))
    result["params"]["stop_reason"] = stop
    return result


def on_gpu(result, uuid, **metrics):
    result["params"]["gpu_uuid"] = uuid
    result["metrics"].update(metrics)
    return result


def test_compare_holds_results_of_different_gpus_to_the_spread_between_them(tmp_path, monkeypatch, project_root,
                                                                          capsys, empty_store):
    """A sweep on two GPUs timed its control on both (base times 1% apart: gpu_spread): the
    report says so, and --compare widens the intervals of a job timed on different GPUs by
    that much, never those of a job timed on the same GPU in both sweeps."""
    monkeypatch.setenv("MLFLOW_TRACKING_URI", empty_store(tmp_path / "mlflow.db"))
    a, b = "GPU-aaaa", "GPU-bbbb"
    sweep("2025-05-01/10-00-00", "gpu", [("none", "s512", on_gpu(replicated(1.0, 0.999, 1.001), a)),
                                         ("no_swizzle", "s512", on_gpu(replicated(2.237, 2.236, 2.239), a)),
                                         ("tiny_blocks", "s512", on_gpu(replicated(2.17, 2.16, 2.18), a))],
          project_root)
    sweep("2025-05-01/11-00-00", "gpu", [
        ("none", "s512", on_gpu(replicated(1.0, 0.998, 1.002), a, gpu_spread=0.01, base_us_gpu0=20.0,
                                base_us_gpu1=20.2)),
        ("no_swizzle", "s512", on_gpu(replicated(2.250, 2.248, 2.251), b)),  # 0.6% off, on the other GPU
        ("tiny_blocks", "s512", on_gpu(replicated(2.205, 2.20, 2.21), a))], project_root)  # 1.6% off, same GPU
    assert rank.main(["--compare", "2025-05-01/10-00-00", "2025-05-01/11-00-00", "--out", str(tmp_path)]) == 0
    out = capsys.readouterr().out
    assert "Between GPUs: 2 GPUs time the base up to 1.00% apart" in out
    assert "2 of 3 jobs in both agree (their intervals overlap, widened by the GPUs' spread 1.00%" in out
    rows = {line.split()[0]: line for line in out.splitlines() if line.split()}
    assert rows["no_swizzle"].rstrip().endswith("agree within the GPUs' spread")
    assert rows["tiny_blocks"].rstrip().endswith("DISAGREE") and rows["none"].rstrip().endswith("agree")
    assert "Between GPUs" not in rank.header({"tags.sweep_id": "x", "status": "FINISHED"},
                                             pd.DataFrame({"status": ["ok"], "gpu_spread": [float("nan")]}))


def test_the_spread_between_gpus_is_read_off_the_jobs_base_times_too():
    """Without a control timed on both GPUs, the jobs' own base times say it: per shape, the
    median on each GPU (a 2% slower GPU at s512; s4k's one GPU says nothing)."""
    from ablate.report import gpu_spread

    jobs = pd.DataFrame({"status": ["ok", "ok", "ok", "ok", "crashed", "ok"],
                         "shape": ["s512", "s512", "s512", "s512", "s512", "s4k"],
                         "gpu_uuid": ["GPU-a", "GPU-a", "GPU-b", "GPU-b", "GPU-b", "GPU-a"],
                         "base_us": [20.0, 20.2, 20.4, 20.6, 40.0, 80.0]})
    spread, n = gpu_spread.of_sweep(jobs)
    assert n == 2 and spread == pytest.approx(20.5 / 20.1 - 1)
    assert gpu_spread.of_sweep(jobs[jobs["gpu_uuid"] == "GPU-a"]) == (None, 0)  # one GPU: no spread
    assert gpu_spread.of_both(jobs, jobs[jobs["gpu_uuid"] == "GPU-a"]) == pytest.approx(spread)


def calibration_cfg(name, shape, truth):
    cfg = job_cfg(name, shape, "gpu", kernel=("rmsnorm", "rmsnorm_fwd"))
    cfg.pathology[name].truth = truth
    return cfg


def test_calibrations_get_a_table_that_says_whether_the_truth_is_covered(tmp_path, monkeypatch, project_root, empty_store):
    monkeypatch.setenv("MLFLOW_TRACKING_URI", empty_store(tmp_path / "mlflow.db"))
    parent = tracking.start_sweep(job_cfg("none", "r16k_h8k", "gpu", ("rmsnorm", "rmsnorm_fwd")),
                                  project_root / "runs/hydra/multirun/2025-03-01/10-00-00")
    log_cfg(job_cfg("none", "r16k_h8k", "gpu", ("rmsnorm", "rmsnorm_fwd")), replicated(1.0, 0.999, 1.001), parent)
    log_cfg(calibration_cfg("twice", "r16k_h8k", 2.0), replicated(1.998, 1.995, 2.004), parent)
    log_cfg(calibration_cfg("no_effect", "r16k_h8k", 1.0), replicated(1.004, 1.002, 1.006, 8, "max_replicates"), parent)
    tracking.end_sweep(parent, "FINISHED")
    text = rank.rank(out=tmp_path)
    table = section(text, "Calibration (true effect known by construction): 1 of 2 intervals cover the truth")
    rows = {line.split()[0]: line for line in table[1:]}
    assert "1.9980x [1.9950, 2.0040]" in rows["twice"] and rows["twice"].rstrip().endswith("yes")
    assert rows["no_effect"].rstrip().endswith("NO")
    ranking = "\n".join(section(text, "Ranking"))
    assert "twice" not in ranking and "no_effect" not in ranking  # calibrations are not ranked
    assert " reps " in ranking and "precision" in ranking  # what the interval stands on


def test_a_calibration_sweep_alone_is_not_an_empty_sweep(tmp_path, monkeypatch, project_root, empty_store):
    """`make calibrate` times only the calibrations: rank shows their table and nothing that
    says the sweep is empty."""
    monkeypatch.setenv("MLFLOW_TRACKING_URI", empty_store(tmp_path / "mlflow.db"))
    parent = tracking.start_sweep(job_cfg("none", "r16k_h8k", "gpu", ("rmsnorm", "rmsnorm_fwd")),
                                  project_root / "runs/hydra/multirun/2025-03-02/10-00-00")
    log_cfg(calibration_cfg("twice", "r16k_h8k", 2.0), replicated(1.998, 1.995, 2.004), parent)
    log_cfg(calibration_cfg("no_effect", "r16k_h8k", 1.0), replicated(1.0, 0.998, 1.002), parent)
    tracking.end_sweep(parent, "FINISHED")
    text = rank.rank(out=tmp_path)
    assert "2 of 2 intervals cover the truth" in text
    assert "no jobs logged" not in text and "Nothing to rank" not in text


def test_a_static_sweep_alone_says_what_to_run_next_and_the_arch_of_its_occupancy(tmp_path, monkeypatch,
                                                                                   project_root, empty_store):
    """`make rank` after `make static` (no GPU, no timed sweep at the commit): the static table
    with the arch its occupancy is for, and one line saying a timed sweep needs a GPU."""
    monkeypatch.setenv("MLFLOW_TRACKING_URI", empty_store(tmp_path / "mlflow.db"))
    sweep("2025-06-01/10-00-00", "static", [
        ("none", "s512", {"status": "static", "params": {}, "metrics": BASE_STATIC, "artifacts": {}, "error": None}),
        ("tiny_blocks", "s512", {"status": "static", "params": {"arch": "sm_90"}, "artifacts": {}, "error": None,
                                 "metrics": {**BASE_STATIC, **STATIC_CHANGES["tiny_blocks"]}}),
        ("no_swizzle", "s512", {"status": "static", "params": {"fingerprint_notes": "no_swizzle: masked in it"},
                                "metrics": BASE_STATIC, "artifacts": {}, "error": None})], project_root)
    text = rank.rank(out=tmp_path)
    assert "Fingerprint overlap, no_swizzle: no_swizzle: masked in it" in text
    assert "Static analysis (variant against the base, same build; occupancy for sm_90):" in text
    assert rank.NOT_TIMED in text and "a timed sweep on a GPU: `make sweep`" in rank.NOT_TIMED
    assert "no jobs logged" not in text
    assert "occupancy for sm_90" in (tmp_path / "rank.md").read_text()


def test_compare_two_sweeps(tmp_path, monkeypatch, project_root, capsys, empty_store):
    """The same jobs in two sweeps: each slowdown with both intervals, and the jobs whose
    intervals do not overlap flagged."""
    monkeypatch.setenv("MLFLOW_TRACKING_URI", empty_store(tmp_path / "mlflow.db"))
    sweep("2025-04-01/10-00-00", "gpu", [("none", "s512", replicated(1.0, 0.999, 1.001)),
                                         ("no_swizzle", "s512", replicated(2.237, 2.236, 2.239)),
                                         ("fp32_accum", "s512", replicated(1.06, 1.05, 1.07)),
                                         ("tiny_blocks", "s512", replicated(2.17, 2.16, 2.18))], project_root)
    sweep("2025-04-01/11-00-00", "gpu", [("none", "s512", replicated(1.0, 0.998, 1.002)),
                                         ("no_swizzle", "s512", replicated(2.250, 2.248, 2.251)),
                                         ("fp32_accum", "s512", replicated(1.065, 1.055, 1.075)),
                                         ("serial_grid", "s512", replicated(24.1, 24.0, 24.2))], project_root)
    assert rank.main(["--compare", "2025-04-01/10-00-00", "2025-04-01/11-00-00", "--out", str(tmp_path)]) == 0
    out = capsys.readouterr().out
    assert out.startswith("A: sweep 2025-04-01/10-00-00 (kernel attention")
    assert "B: sweep 2025-04-01/11-00-00" in out
    assert "2 of 3 jobs in both agree (their intervals overlap); 1 disagree beyond their intervals" in out
    rows = {line.split()[0]: line for line in out.splitlines() if line.split() and line.split()[0] in PLANTED | {
        "no_swizzle": 0, "tiny_blocks": 0, "serial_grid": 0}}
    assert rows["no_swizzle"].rstrip().endswith("DISAGREE") and "1.0058" in rows["no_swizzle"]
    assert rows["fp32_accum"].rstrip().endswith("agree")
    assert rows["tiny_blocks"].rstrip().endswith("only in A") and rows["serial_grid"].rstrip().endswith("only in B")
    assert (tmp_path / "compare.csv").exists() and "DISAGREE" in (tmp_path / "compare.md").read_text()
    assert rank.main(["--compare", "2025-04-01/10-00-00", "nope"]) == 1
    assert "rank: unknown sweep 'nope'" in capsys.readouterr().err


def test_empty_stores_are_clear_messages(tmp_path, monkeypatch, capsys):
    db = tmp_path / "mlflow.db"
    monkeypatch.setenv("MLFLOW_TRACKING_URI", f"sqlite:///{db}")
    assert rank.main([]) == 1
    assert f"rank: no MLflow store at {db}: run a sweep first" in capsys.readouterr().err
    assert not db.exists()  # reading never creates a store

    from mlflow import MlflowClient
    MlflowClient(f"sqlite:///{db}").create_experiment("something_else")
    assert rank.main([]) == 1
    assert f"rank: no sweep in sqlite:///{db}" in capsys.readouterr().err
    assert rank.main(["--experiment", "flash_attention_fwd"]) == 1
    assert "rank: no experiment 'flash_attention_fwd'" in capsys.readouterr().err

    log_cfg(job_cfg("none", "s512", "gpu"), timed(1.0))  # a single run, no sweep
    assert rank.main([]) == 1
    assert "rank: no sweep in" in capsys.readouterr().err
    assert rank.main(["--kernel", "rmsnorm"]) == 1
    assert "rank: no sweep of kernel 'rmsnorm' in" in capsys.readouterr().err


@pytest.mark.skipif(shutil.which("make") is None, reason="make is not installed")
def test_make_rank(store, project_root):
    env = {**os.environ, "MLFLOW_TRACKING_URI": f"sqlite:///{store['folder'] / 'mlflow.db'}"}
    env.pop("SWEEP", None)
    proc = subprocess.run(["make", "-s", "rank", f"PYTHON={sys.executable}"], cwd=project_root, env=env, capture_output=True, text=True,
                          timeout=300)
    assert proc.returncode == 0, proc.stderr
    assert "Ranking" in proc.stdout and "Static analysis" in proc.stdout
    for f in ["rank.csv", "rank.md", "plots/heatmap.png"]:  # beside the store it read
        assert (store["folder"] / f).exists()

    proc = subprocess.run(["make", "-s", "rank", "SWEEP=nope", f"PYTHON={sys.executable}"], cwd=project_root, env=env,
                          capture_output=True, text=True, timeout=300)
    assert proc.returncode != 0
    assert "rank: unknown sweep 'nope'" in proc.stderr and "Traceback" not in proc.stderr


def test_significance_is_the_workers_verdict_not_the_bare_interval():
    # 1.004x [1.003, 1.005] excludes 1 but lies within bench.min_effect: the worker logged 0,
    # and rank must not overrule it; a run logged without the flag reads n/a.
    import pandas as pd
    from ablate.report.rank import ranking

    row = {"status": "ok", "shape": "s512", "base_us": 10.0, "variant_us": 10.04,
           "slowdown": 1.004, "slowdown_lo": 1.003, "slowdown_hi": 1.005}
    jobs = pd.DataFrame([{**row, "pathology": "tiny_offset", "significant": 0.0},
                         {**row, "pathology": "no_flag", "significant": float("nan")}])
    ranked, unranked = ranking(jobs)
    verdict = dict(zip(ranked["pathology"], ranked["significant"]))
    assert verdict == {"tiny_offset": "no", "no_flag": "n/a"}
    assert unranked.empty
