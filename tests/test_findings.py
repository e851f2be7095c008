"""The findings `make rank` prints first (ablate/report/findings.py), from a store the test fills
with the mis-tuned fixture's jobs (tests/fixtures/plugins/mistuned: its BLOCK = 32 is beaten
by its neighbour BLOCK = 64), as test_rank.py fills one for attention; and the range every
shipped pathology's `expected` states, as the findings read it."""
import pandas as pd
import pytest
from mlflow import MlflowClient
from omegaconf import OmegaConf

from ablate.job import plugins, tunables
from ablate.report import findings, rank
from ablate.sweep import tracking
from conftest import ROOT, log_cfg
from test_tunables import FIXTURES

SHAPE = "n64m"


def timed(s, half=0.01, overrides="none"):
    lo, hi = s * (1 - half), s * (1 + half)
    return {"status": "ok", "params": {"overrides": overrides, "bound": "memory"}, "artifacts": {}, "error": None,
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
                   for n in ("half_sms", "half_warps", "no_fp_fusion")}
        generic["half_sms"]["expected"] = "1.5-2x at n64m"  # a stated range the measurement misses below
        jobs = [("none", {"macros": {}, "header": None}, timed(1.0)),
                ("tune_block_64", generated["tune_block_64"], timed(0.53, overrides="BLOCK=64")),
                ("tune_block_16", generated["tune_block_16"], timed(1.9, overrides="BLOCK=16")),
                ("tune_num_warps_2", generated["tune_num_warps_2"], timed(1.002, overrides="num_warps=2")),
                ("half_sms", generic["half_sms"], timed(1.2)),
                # "up to 2x where ...": a condition, no range; matmul_triton's 6.128x (its spills) is no miss
                ("half_warps", generic["half_warps"], timed(6.128)),
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
    # half_warps states no range; no_fp_fusion's "about 1x on a memory-bound kernel" holds (1.001x)
    assert "half_warps at" not in missed and "no_fp_fusion" not in missed
    assert "  No range stated, so none held to one: half_warps\n" in missed
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
    assert findings.stated_range(text, "n64m", shapes) is None
    assert findings.stated_range("~30x at s512 (4 of 132 SMs busy); ~8x at s4k.", "s4k", shapes)[:2] == \
        pytest.approx((8 / 1.1, 8 * 1.1))
    assert findings.stated_range("1.5x or more: ...", "s4k", shapes)[:2] == (1.5, float("inf"))
    assert findings.stated_range("At least 1.3x: ...", "s4k", shapes)[:2] == (1.3, float("inf"))
    assert findings.stated_range("Up to 2x.", "s4k", shapes)[:2] == (0.0, 2.0)
    assert findings.stated_range("1.00x (no significant change): ...", "s4k", shapes)[:2] == \
        pytest.approx((1 / 1.05, 1.05))


def test_a_range_is_read_only_where_the_text_states_one():
    """The forms in use that state a range, and the conditional prose that states none: read
    as a range, the latter gave every kernel a miss its text never predicted (regs_capped's
    "close to 1x for a kernel whose ..." read as 1x: "expected 1x, measured 10.186x")."""
    shapes = ["s512", "s4k", "r16_h4k", "r16k_h8k"]

    def read(text, shape="s4k", bound=None):
        stated = findings.stated_range(text, shape, shapes, bound)
        return stated and stated[2]

    rms = ("16 x 4096 (r16_h4k; 512 threads a row): 1.00x (no significant change): one vector a thread. "
           "16384 x 8192 (r16k_h8k): 1.05-1.3x. DRAM traffic is unchanged")
    assert (read(rms, "r16_h4k"), read(rms, "r16k_h8k"), read(rms, "s4k")) == ("1.00x", "1.05-1.3x", None)
    assert read("1.05-1.15x at sq4k, s4k and s512 (an epilogue, no longer hidden); 1.00x elsewhere", "s512") \
        == "1.05-1.15x"
    assert read("1.05-1.3x: loads overlap; more at s512, where loads are a larger share") == "1.05-1.3x"
    assert read("1.05-1.3x: loads overlap; more at s512, where loads are a larger share", "s512") is None
    assert read("~1.9x on causal shapes (s512), 1.00x on non-causal ones", "s512") == "~1.9x"
    assert read("2.000x on every shape. Earlier ones measured 1.79-1.88x at s512", "s512") == "2.000x"
    fma = "Up to 2x the FP32 instructions of the multiply-adds. About 1x on a memory-bound kernel (1.000x)"
    assert read(fma, bound="memory") == "About 1x on a memory-bound kernel" and read(fma, bound="compute") is None
    for prose in [
        "A slowdown wherever the registers hold live data; close to 1x for a kernel whose registers were addresses",
        "Up to 2x where the issue rate or the registers of each thread bind; less where memory binds.",
        "Up to 2x for a kernel bound by SM throughput with several waves",
        "About 1x for a kernel that reads each byte once (streaming)",
        "Large on a loop-bound kernel (a matmul's K loop: 1.5x or more); about 1x on a kernel without one.",
        "DRAM reads up ~1.5x at s4k, little at s512",  # not the slowdown's range
        "About 1.0x at D=64 (the consumers need fewer registers); at D=128 a few percent",
        "1.2-1.6x on the D=128 shapes, where the spills are 736 bytes",
        "16 x 4096: 1.05-1.15x: the double division",  # a label that names no shape of the sweep
        "1.2x, where registers bind",
        "Either sign: more registers can speed the code or cut the occupancy",
    ]:
        assert read(prose) is None and read(prose, bound="memory") is None, prose


# What every shipped pathology's `expected` states, as the findings read it (stated_range's
# words): per shape of its kernel, "*" at every other shape, "memory" / "compute" on a kernel
# of that spec.BOUND; {} or None: no range stated. A yaml missing here, or read otherwise,
# fails: read its text, and write here what it states (or reword the text until it says so).
STATED = {
    "conf/calibration/no_effect.yaml": {"*": "1.000x"},
    "conf/calibration/twice.yaml": {"*": "2.000x"},
    "conf/generic/pathology/half_sms.yaml": {},  # up to 2x for a kernel with several waves; more where they quantize
    "conf/generic/pathology/no_forceinline.yaml": {},  # large where ...
    "conf/generic/pathology/no_l1.yaml": {},  # about 1x for a streaming kernel: a condition
    "conf/generic/pathology/no_launch_bounds.yaml": {},  # either sign
    "conf/generic/pathology/no_restrict.yaml": {},  # small on a streaming kernel, more where ...
    "conf/generic/pathology/no_unroll.yaml": {},  # large where ...
    "conf/generic/pathology/regs_capped.yaml": {},  # a slowdown wherever ...; close to 1x for a kernel whose ...
    "conf/generic/pathology/strict_fp.yaml": {"memory": "About 1x on a memory-bound kernel"},
    "conf/generic_triton/pathology/half_sms.yaml": {},
    "conf/generic_triton/pathology/half_warps.yaml": {},  # up to 2x where ...
    "conf/generic_triton/pathology/no_fp_fusion.yaml": {"memory": "About 1x on a memory-bound kernel"},
    "conf/generic_triton/pathology/no_pipelining.yaml": {},  # large on a loop-bound kernel (1.5x or more)
    "kernels/attention/conf/pathology/divergent_branches.yaml": {"s512": "1.15-1.35x", "s4k": "1.1-1.3x"},
    "kernels/attention/conf/pathology/extra_syncthreads.yaml": {"*": "1.05-1.2x"},
    "kernels/attention/conf/pathology/fp32_accum.yaml": {"*": "1.0-1.1x"},
    "kernels/attention/conf/pathology/no_causal_skip.yaml": {"s4k_causal": "~1.9x"},  # 1.00x on non-causal ones
    "kernels/attention/conf/pathology/no_cp_async.yaml": {"*": "1.2-1.6x"},
    "kernels/attention/conf/pathology/no_smem_staging.yaml": {"s512": "1.5-2.5x", "s4k": "2-3.5x"},
    "kernels/attention/conf/pathology/no_swizzle.yaml": {"s4k": "1.5-3x"},  # smaller at s512
    "kernels/attention/conf/pathology/over_unroll.yaml": {"s512": "1.03-1.15x", "s4k": "1.03-1.15x"},
    "kernels/attention/conf/pathology/scalar_loads.yaml": {"*": "2-4x"},
    "kernels/attention/conf/pathology/serial_grid.yaml": {"s512": "~30x", "s4k": "~8x"},
    "kernels/attention/conf/pathology/tiny_blocks.yaml": {"*": "2-3.5x"},
    "kernels/attention/conf/pathology/uncoalesced.yaml": {"*": "1.05-1.3x", "s512": None},  # more at s512
    "kernels/attention_hopper/conf/pathology/mma_sync.yaml": {"s4k": "1.5-2x", "s8k_d128": "1.5-2x"},
    "kernels/attention_hopper/conf/pathology/no_overlap.yaml": {"s8k_d128": "1.05-1.15x"},
    "kernels/attention_hopper/conf/pathology/no_persistence.yaml": {"s4k": "1.01-1.05x", "s8k_d128": "1.01-1.05x"},
    "kernels/attention_hopper/conf/pathology/no_pingpong.yaml": {"s4k": "1.05-1.15x", "s8k_d128": "1.05-1.15x"},
    "kernels/attention_hopper/conf/pathology/no_setmaxnreg.yaml": {},  # about 1.0x at D=64: no shape named
    "kernels/attention_hopper/conf/pathology/no_stream_k.yaml": {"s4k_d128": "1.01-1.03x", "s8k_d128": "1.01-1.03x"},
    "kernels/attention_hopper/conf/pathology/no_swizzle.yaml": {"s4k": "1.2-2x", "s8k_d128": "1.2-2x"},
    "kernels/attention_hopper/conf/pathology/no_tma.yaml": {"s4k": "1.1-1.5x", "s8k_d128": "1.1-1.5x"},
    "kernels/attention_hopper/conf/pathology/no_warp_specialization.yaml": {"s8k_d128": "1.1-1.2x"},
    "kernels/attention_hopper/conf/pathology/single_stage.yaml": {"s4k": "1.2-1.6x", "s8k_d128": "1.2-1.6x"},
    "kernels/cutlass_gemm/conf/pathology/cluster_2x1.yaml": {},  # at the large shapes: no shape named
    "kernels/cutlass_gemm/conf/pathology/cooperative.yaml": {"sq4k": "1.05-1.15x", "prefill_n4k": "1.05-1.15x",
                                                            "prefill_n14k": "1.05-1.15x", "sq8k": "1.03-1.08x"},
    "kernels/cutlass_gemm/conf/pathology/cp_async.yaml": {"decode_m64": "1.5-2.3x"},
    "kernels/cutlass_gemm/conf/pathology/no_pdl.yaml": {"sq4k": "0.96-1.03x", "sq4k_bf16": "0.96-1.03x", "sq8k": "0.96-1.03x"},  # 1.1-1.6x at short launches: a condition
    "kernels/cutlass_gemm/conf/pathology/no_swizzle.yaml": {"sq8k": "1.05-1.25x", "prefill_n14k": "1.05-1.25x",
                                                           "sq4k": "1.00-1.05x", "prefill_n4k": "1.00-1.05x",
                                                           "decode_m64": "1.00x"},
    "kernels/cutlass_gemm/conf/pathology/no_tma_epilogue.yaml": {"decode_m64": "1.04-1.10x"},
    "kernels/cutlass_gemm/conf/pathology/tile_64x64.yaml": {},
    "kernels/cutlass_gemm/conf/pathology/two_stages.yaml": {"decode_m64": "3-5x"},
    "kernels/fla_l2norm/conf/pathology/oversized_bd.yaml": {"r256k_d128_bf16": "1.05-2x"},
    "kernels/fla_l2norm/conf/pathology/row_per_program.yaml": {"r256k_d128_bf16": "3-7x"},
    "kernels/liger_dyt/conf/pathology/tiny_blocks.yaml": {"tok16k_bf16": "1.6-2.4x", "tok16k_fp16": "1.6-2.4x"},
    "kernels/liger_rmsnorm/conf/pathology/oversized_block.yaml": {"*": "1.1-1.5x"},
    "conf/generic_cute/pathology/half_sms.yaml": {},
    "kernels/quack_rmsnorm/conf/pathology/cluster_pair.yaml": {"*": "0.97-1.10x"},
    "kernels/quack_rmsnorm/conf/pathology/half_row_threads.yaml": {"*": "0.97-1.05x"},
    "kernels/quack_rmsnorm/conf/pathology/late_weight.yaml": {"*": "1.00-1.10x"},
    "kernels/quack_rmsnorm/conf/pathology/reload_gmem.yaml": {"*": "1.0-1.3x"},
    "kernels/quack_rmsnorm/conf/pathology/reload_smem.yaml": {"*": "0.95-1.10x"},
    "kernels/quack_rmsnorm/conf/pathology/warp_per_row.yaml": {"*": "1.15-1.6x"},
    "kernels/matmul_triton/conf/pathology/narrow_tiles.yaml": {"*": "1.05-1.2x"},
    "kernels/matmul_triton/conf/pathology/no_grouping.yaml": {},  # "at sq8k and prefill": no shape of its own names
    "kernels/matmul_triton/conf/pathology/device_descriptors.yaml": {"*": "1.00-1.8x"},
    "kernels/matmul_triton/conf/pathology/no_pdl.yaml": {"*": "1.00-1.15x"},
    "kernels/matmul_triton/conf/pathology/no_tma.yaml": {"*": "1.05-1.25x"},
    "kernels/matmul_triton/conf/pathology/no_tma_store.yaml": {"*": "1.00-1.03x"},
    "kernels/matmul_triton/conf/pathology/not_persistent.yaml": {"*": "1.02-1.08x"},
    "kernels/matmul_triton/conf/pathology/small_tiles.yaml": {"*": "1.5-2.5x"},
    **{f"kernels/rmsnorm/conf/pathology/{name}.yaml": {"r16_h4k": small, "r16_h4k_bf16": small,
                                                      "r16k_h8k": large, "r16k_h8k_bf16": large}
       for name, small, large in [("atomic_reduce", "3-10x", "1.5-3x"), ("fp64_math", "1.05-1.15x", "1.0-1.3x"),
                                  ("scalar_loads", "1.03-1.10x", "1.2-1.6x"),
                                  ("smem_reduce", "1.15-1.3x", "1.00-1.03x"), ("tiny_blocks", "1.6-2.5x", "1.0-1.3x"),
                                  ("two_pass", "1.2-1.4x", "1.1-1.35x"), ("uncoalesced", "1.00x", "1.3-1.6x")]},
}


def shipped_predictions():
    """(yaml relative to the project, kernel, its shapes, its spec.BOUND, the `expected`) of
    every pathology yaml a shipped kernel composes (its own and the generic ones) and of the
    calibrations, once per kernel."""
    for name, folder in sorted(plugins.available().items()):
        if folder.parent != ROOT / "kernels":
            continue
        plugin = plugins.load(name)
        files = [plugin.config_file("pathology", n) for n in plugin.options("pathology")
                 if n != findings.BASE and not findings.is_tuned(n)]
        for path in [*files, *sorted((ROOT / "conf" / "calibration").glob("*.yaml"))]:
            text = OmegaConf.to_container(OmegaConf.load(path))[path.stem].get("expected")
            yield str(path.relative_to(ROOT)), name, plugin.options("shape"), plugin.spec.BOUND, text


def test_every_shipped_prediction_reads_as_its_text_says():
    wrong, seen = {}, set()
    for path, kernel, shapes, bound, text in shipped_predictions():
        seen.add(path)
        want = STATED.get(path, {})
        for shape in shapes:
            stated = findings.stated_range(text, shape, shapes, bound)
            got, expected = stated and stated[2], want.get(shape, want.get(bound, want.get("*")))
            if got != expected:
                wrong.setdefault((path, kernel, got, expected), []).append(shape)
    assert not sorted(seen - set(STATED)), f"add to STATED what these state: {sorted(seen - set(STATED))}"
    assert not sorted(set(STATED) - seen), f"STATED names what no kernel ships: {sorted(set(STATED) - seen)}"
    more = lambda at: f" and {len(at) - 3} more" if len(at) > 3 else ""  # noqa: E731
    assert not wrong, "\n".join(f"{path} at {kernel} {', '.join(at[:3])}{more(at)}: read {got!r}, "
                                f"its text states {expected!r}" for (path, kernel, got, expected), at in wrong.items())


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
