"""A kernel's base as the fastest of its declared configurations (ablate/job/candidates.py), on the
CPU: the declaration's refusals (one line naming the entry), static mode's default, every variant
of a job built on the one configuration its shape runs (the candidate's macros, once, in nvcc's
command), the record's key, and a job moved onto the pick of a timing (tests/
test_candidates_gpu.py times them)."""
from pathlib import Path

import pytest

from ablate.build.compile import compile_command, target_arch
from ablate.job import candidates, plugins
from ablate.job.job import with_tuned
from ablate.pipeline import job_of

FIXTURES = Path(__file__).resolve().parent / "fixtures" / "plugins"
TWO = plugins.load_dir(FIXTURES / "two_configs")


def compose(kernel, overrides, tmp_path=None):
    build = [f"build.dir={tmp_path}"] if tmp_path else []
    return plugins.compose(kernel, [*overrides, *build], kernel_path=[FIXTURES])


@pytest.mark.parametrize("own, language, error", [
    ({"CANDIDATES": []}, "cuda", r"^spec.CANDIDATES must map each configuration's name to how it is built"),
    ({"CANDIDATES": {"a": 1}}, "cuda", r"^spec.CANDIDATES\['a'\] = 1: a bare value needs spec.FORCE_MACRO"),
    ({"CANDIDATES": {"a b": 1}, "FORCE_MACRO": "X"}, "cuda", r"^spec.CANDIDATES: name 'a b' must match"),
    ({"CANDIDATES": {"a": 1}, "FORCE_MACRO": "x-y"}, "cuda", r"^spec.FORCE_MACRO must be a macro name"),
    ({"CANDIDATES": {"a": {"TILE": "1 2"}}}, "cuda", r"^spec.CANDIDATES\['a'\]: TILE = '1 2' must be an integer or a word"),
    ({"CANDIDATES": {"a": {"tile-m": 1}}}, "cuda", r"^spec.CANDIDATES\['a'\]: macro name 'tile-m' must match"),
    ({"CANDIDATES": {"a": {}}}, "cuda", r"^spec.CANDIDATES\['a'\]: a candidate's macros must set at least one"),
    ({"CANDIDATES": {"a": 4}}, "triton", r"^spec.CANDIDATES\['a'\] must be a dict of META overrides"),
    ({"CANDIDATES": {"a": {"BLOCK": "big"}}}, "triton", r"^spec.CANDIDATES\['a'\]: BLOCK = 'big' must be a number or a bool"),
    ({"CANDIDATES": {"a": {}}, "base_meta": lambda s: {}}, "triton", r"^spec.base_meta and spec.CANDIDATES both say"),
    ({"CANDIDATES": {"a": 1}, "FORCE_MACRO": "X", "DEFAULT_CANDIDATE": "b"}, "cuda",
     r"^spec.DEFAULT_CANDIDATE must be one of CANDIDATES \(a\) or a function of the shape, got 'b'"),
    ({"CANDIDATES": {"a": 1}, "FORCE_MACRO": "X", "candidates": ["a"]}, "cuda", r"^spec.candidates must be a function"),
])
def test_a_bad_declaration_is_one_line_naming_the_entry(own, language, error):
    with pytest.raises(candidates.CandidateError, match=error) as e:
        candidates.declared(own, language, {"BLOCK": 64})
    assert "\n" not in str(e.value)


def test_a_plugin_whose_declaration_is_bad_fails_to_load_naming_it(tmp_path):
    import shutil

    shutil.copytree(FIXTURES / "two_configs", tmp_path / "two_configs")
    spec = tmp_path / "two_configs" / "spec.py"
    spec.write_text(spec.read_text().replace('FORCE_MACRO = "SCALE_CONFIG"\n', ""))
    with pytest.raises(plugins.PluginError, match=r"spec.py: spec.CANDIDATES\['one_block'\] = 1: a bare value "
                                                  r"needs spec.FORCE_MACRO"):
        plugins.load_dir(tmp_path / "two_configs")


def test_a_bare_value_is_the_force_macros_and_a_dict_its_own_macros():
    assert TWO.spec.CANDIDATE_SETS == {"one_block": {"SCALE_CONFIG": "1"}, "wide_grid": {"SCALE_CONFIG": "2"},
                                       "wrong_scale": {"SCALE_CONFIG": "3"}}
    assert candidates.declared({"CANDIDATES": {"a": {"TILE_M": 128, "PIPE": "deep"}}}, "cuda") == \
        {"a": {"PIPE": "deep", "TILE_M": "128"}}
    assert candidates.declared({}, "cuda") == {}  # a plugin of today's conventions: no candidates


def test_the_default_and_the_timed_ones_are_the_specs_or_named_errors():
    class Spec:
        CANDIDATE_SETS = {"a": {}, "b": {}}
    assert candidates.default(Spec, {"n": 1}) == "a" and candidates.timed(Spec, {"n": 1}) == ["a", "b"]
    Spec.DEFAULT_CANDIDATE = staticmethod(lambda shape: "b" if shape["n"] > 1 else "c")
    assert candidates.default(Spec, {"n": 2}) == "b"
    with pytest.raises(ValueError, match=r"^spec.DEFAULT_CANDIDATE\(shape\) gave 'c' at \{'n': 1\}, not one of"):
        candidates.default(Spec, {"n": 1})
    Spec.candidates = staticmethod(lambda shape: ["b", "z"])
    with pytest.raises(ValueError, match=r"^spec.candidates\(shape\) must give some of CANDIDATES"):
        candidates.timed(Spec, {"n": 1})


def test_static_mode_builds_every_variant_on_the_default_alone(tmp_path):
    job = job_of(compose("two_configs", ["pathology=none", "mode=static"], tmp_path))
    assert job.candidate == "one_block" and not job.tuned
    assert job.base.base_macros == {"SCALE_CONFIG": "1"}
    command = compile_command(job.base, job.build, job.plugin, target_arch("sm_90", job.plugin), Path.cwd())
    assert [a for a in command if "SCALE_CONFIG" in a] == ["-DSCALE_CONFIG=1"]


def test_a_job_moves_onto_the_timings_pick_and_records_it(tmp_path):
    job = job_of(compose("two_configs", ["pathology=none", "mode=static"], tmp_path))
    record = {"kind": "candidates", "candidate": "wide_grid", "times_us": {"one_block": 900.0, "wide_grid": 9.0},
              "gpu": "NVIDIA H200", "seconds": 3.2}
    tuned = with_tuned(job, record)
    assert tuned.candidate == "wide_grid" and tuned.tuned == record
    assert tuned.base.base_macros == tuned.variant.base_macros == {"SCALE_CONFIG": "2"}


def test_a_large_only_seam_follows_the_configuration_the_shape_runs():
    """cutlass_gemm's cluster_2x1 replaces the large configuration's cluster: not applicable at
    decode_m64, whose default is swap_n64; applicable there once the timing picks large."""
    job = job_of(plugins.compose("cutlass_gemm", ["pathology=cluster_2x1", "shape=decode_m64", "mode=static"]))
    assert job.candidate == "swap_n64" and "runs the swap_n64 configuration" in job.opted_out["cluster_2x1"]
    index = job.plugin.spec.CANDIDATES
    assert job.base.base_macros == {"ABLATE_GEMM_FORCE": str(index["swap_n64"])}
    tuned = with_tuned(job, {"kind": "candidates", "candidate": "large", "times_us": {"large": 1.0}})
    assert tuned.opted_out == {} and tuned.variant.base_macros == {"ABLATE_GEMM_FORCE": "1"}


def test_the_record_is_kept_per_sources_candidates_shape_and_gpu_model(tmp_path, monkeypatch):
    from ablate.gpu.autotune import candidate_path

    key = candidate_path(TWO, {"n": 1024}, tmp_path, "NVIDIA H200")
    assert key.parent == tmp_path / "autotune" and key == candidate_path(TWO, {"n": 1024}, tmp_path, "NVIDIA H200")
    assert key != candidate_path(TWO, {"n": 2048}, tmp_path, "NVIDIA H200")
    assert key != candidate_path(TWO, {"n": 1024}, tmp_path, "NVIDIA H100 80GB HBM3")
    monkeypatch.setattr(type(TWO), "sources_digest", lambda self: "0" * 16)
    assert key != candidate_path(TWO, {"n": 1024}, tmp_path, "NVIDIA H200")


def test_without_a_gpu_a_gpu_job_keeps_the_default(tmp_path, monkeypatch):
    import ablate.gpu.autotune as autotune

    monkeypatch.setattr(autotune, "gpu_model", lambda: None)
    job = job_of(compose("two_configs", ["pathology=none", "mode=gpu"], tmp_path))
    assert job.candidate == "one_block" and not job.tuned and job.failed is None


def test_a_failed_timing_is_the_jobs_error(tmp_path, monkeypatch):
    import ablate.gpu.autotune as autotune
    from ablate.build.triton_autotune import AutotuneError

    monkeypatch.setattr(autotune, "gpu_model", lambda: "NVIDIA H200")

    def fail(job, path):
        raise AutotuneError("two_configs: no candidate passes")
    monkeypatch.setattr(autotune, "_timed_now", fail)
    job = job_of(compose("two_configs", ["pathology=none", "mode=gpu"], tmp_path))
    assert job.failed == "two_configs: no candidate passes"


def test_a_build_holds_the_candidate_it_names(tmp_path):
    """The base built at the default: nvcc's command in its log defines SCALE_CONFIG=1, and a
    build on another candidate is another library."""
    from ablate.build.compile import build
    from ablate.paths import ROOT

    job = job_of(compose("two_configs", ["pathology=none", "mode=static"], tmp_path))
    other = candidates.base_on(job.base, job.plugin.spec, "wide_grid")
    assert other.name == "none@wide_grid"
    built = build([job.base, other], job.build, job.plugin, ROOT)
    one, two = built["none"], built["none@wide_grid"]
    assert one.ok and two.ok and one.lib != two.lib
    assert "-DSCALE_CONFIG=1" in one.log.splitlines()[0] and "-DSCALE_CONFIG=2" in two.log.splitlines()[0]


def test_a_sweep_builds_each_shapes_variants_on_that_shapes_base(tmp_path):
    """Jobs whose shapes run different candidates have variants of one name built from different
    macros: the sweep builds each (builds_of_sweep: one build a base configuration), so that no
    job compiles its own (cutlass_gemm's decode_m64 jobs did, ~70 s each on the H200's host, in a
    sweep with sq8k, 2026-12-03)."""
    from ablate.build.compile import build
    from ablate.paths import ROOT
    from ablate.sweep.design import builds_of_sweep, variants_of_sweep

    one = job_of(compose("two_configs", ["pathology=no_l1", "mode=static"], tmp_path))
    two = with_tuned(job_of(compose("two_configs", ["pathology=no_l1", "mode=static", "shape.n=4096"], tmp_path)),
                     {"kind": "candidates", "candidate": "wide_grid", "times_us": {"wide_grid": 1.0}})
    variants = variants_of_sweep([one, two, one])
    assert [v.name for v in variants] == ["no_l1", "no_l1"]
    assert [v.base_macros for v in variants] == [{"SCALE_CONFIG": "1"}, {"SCALE_CONFIG": "2"}]
    groups = builds_of_sweep([one, two], variants)
    assert [[(v.name, v.base_macros["SCALE_CONFIG"]) for v in group] for _, group in groups] == \
        [[("none", "1"), ("no_l1", "1")], [("none", "2"), ("no_l1", "2")]]
    for _, group in groups:
        assert all(r.ok for r in build(group, one.build, one.plugin, ROOT).values())
    for job in (one, two):  # nothing of either job is left to compile
        assert build(job.variants, job.build, job.plugin, ROOT, only_if_built=True) is not None


def test_the_pick_is_the_first_preferred_within_min_effect_of_the_fastest():
    from ablate.gpu.autotune import pick

    times = {"n192": 1687.53, "large": 1703.56, "n224": 1718.58}  # sq8k, an H200, 2026-12-03
    assert pick(times, ["large", "n192", "n224"], 0.01) == "large"  # 0.95% slower: equal to the timing
    assert pick(times, ["large", "n192", "n224"], 0.005) == "n192"
    assert pick(times, ["gone", "n224", "large"], 0.02) == "n224"  # one not timed is passed over
    assert pick(times, [], 0) == "n192"


def test_a_kept_record_is_picked_again_under_the_jobs_min_effect(tmp_path, monkeypatch):
    """The record keeps the times; the rule in force picks among them, and the line says when the
    pick is not the fastest."""
    import json

    import ablate.gpu.autotune as autotune

    monkeypatch.setattr(autotune, "gpu_model", lambda: "NVIDIA H200")
    job = job_of(compose("two_configs", ["pathology=none", "mode=static"], tmp_path))
    path = autotune.candidate_path(job.plugin, job.shape, tmp_path, "NVIDIA H200")
    path.parent.mkdir(parents=True)
    record = {"kind": "candidates", "shape": job.shape, "candidates": ["one_block", "wide_grid"],
              "candidate": "wide_grid", "times_us": {"one_block": 10.05, "wide_grid": 10.0}, "gpu": "NVIDIA H200",
              "peer": None, "peer_us": None, "rejected": {}, "seconds": 1.0}
    path.write_text(json.dumps(record))
    kept = autotune.candidate_record(job)
    assert kept["candidate"] == "one_block"  # the default, 0.5% slower: within bench.min_effect (1%)
    assert "one_block 10.05 us, preferred to wide_grid 10.00 us (within bench.min_effect)" in \
        autotune.said_candidates(kept)
    strict = job_of(compose("two_configs", ["pathology=none", "mode=static", "bench.min_effect=0.001"], tmp_path))
    assert autotune.candidate_record(strict)["candidate"] == "wide_grid"
    assert "wide_grid 10.00 us, then one_block 10.05 us" in autotune.said_candidates(record)


def test_a_static_sweep_over_two_defaults_builds_both_before_its_jobs(tmp_path):
    """End to end: a sweep whose two shapes run two configurations (DEFAULT_CANDIDATE by n) builds
    each shape's base and variant in the callback, 4 libraries, before the first job."""
    import os
    import shutil
    import subprocess
    import sys

    from ablate.paths import ROOT

    plugin = tmp_path / "kernels" / "two_configs"
    shutil.copytree(FIXTURES / "two_configs", plugin)
    spec = plugin / "spec.py"
    spec.write_text(spec.read_text().replace('DEFAULT_CANDIDATE = "one_block"',
                                             'DEFAULT_CANDIDATE = lambda shape: "one_block" if shape["n"] < 2048 else "wide_grid"'))
    env = {**os.environ, "ABLATE_KERNEL_PATH": str(tmp_path / "kernels"), "CUDA_VISIBLE_DEVICES": "",
           "MLFLOW_TRACKING_URI": f"sqlite:///{tmp_path / 'mlflow.db'}"}
    proc = subprocess.run([sys.executable, "-m", "ablate", "-m", "kernel=two_configs", "pathology=no_restrict",
                           "shape.n=1000,4096", "mode=static", f"build.dir={tmp_path / 'build'}",
                           f"hydra.sweep.dir={tmp_path / 'multirun'}"],
                          cwd=ROOT, env=env, capture_output=True, text=True, timeout=600)
    out = proc.stdout + proc.stderr
    assert proc.returncode == 0, out
    assert "built 4 variants in" in out and "0 found" in out, out
    assert "2 jobs: 2 ok" in out, out
