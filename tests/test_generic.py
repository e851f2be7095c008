"""The generic pathologies (conf/generic/pathology/, docs/design.md "Generic pathologies"):
every kernel gets them without a file of its own; a kernel overrides one with its own yaml or
declares it not applicable; one that changes nothing in a kernel's machine code is
`not_applicable`, never a failure or a silent 1.00x. The done-when test: a plugin in the plain
style of public kernels (tests/fixtures/kernels/plain_axpy: no seams, no ablate header, its
own launch code) sweeps statically with every generic pathology and no patch."""
import ctypes
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from omegaconf import OmegaConf

from ablate.build import compile as compile_mod, sass
from ablate.gpu import green
from ablate.job import plugins
from ablate.job.job import make_job
from ablate.job.result import GOOD_STATUSES, STATUSES
from ablate.job.variant import VariantError, variant_from_cfg
from conftest import kept_build_dir

ROOT = Path(__file__).resolve().parents[1]
FIXTURES = ROOT / "tests" / "fixtures" / "kernels"
PLAIN = FIXTURES / "plain_axpy"
GENERIC = sorted(p.stem for p in (ROOT / "conf" / "generic" / "pathology").glob("*.yaml"))
# What each generic pathology must do to plain_axpy's binary (its yaml's fingerprint holds too).
PLAIN_CHANGES = {"no_restrict": ("sass.ldg_nc", "decreases"), "no_launch_bounds": ("regs", "differs"),
                 "no_forceinline": ("sass.call", "increases"), "regs_capped": ("regs", "decreases"),
                 "no_l1": ("sass.ldg_strong", "increases"), "strict_fp": ("sass.ffma", "decreases"),
                 "no_unroll": ("sass.bra", "increases"), "half_sms": ("sass.instructions", "same")}


def test_the_generic_pathologies_are_the_issues():
    assert GENERIC == sorted(PLAIN_CHANGES)


@pytest.mark.parametrize("kernel", ["attention", "rmsnorm", "attention_hopper", "cutlass_gemm"])
def test_every_kernel_gets_them_and_glob_sees_them(kernel):
    plugin = plugins.load(kernel)
    assert set(GENERIC) <= set(plugin.options("pathology"))
    for name in GENERIC:
        assert plugin.config_file("pathology", name) == ROOT / "conf" / "generic" / "pathology" / f"{name}.yaml"
        variant = make_job(plugins.compose(kernel, [f"pathology={name}"])).variant
        assert variant.name == name and variant.generic == (name,)
        assert variant.specs[name]["fingerprint"] and variant.specs[name]["mechanism"]


def test_the_plain_plugin_sees_them_through_kernel_path():
    from hydra import initialize_config_dir
    from hydra.core.global_hydra import GlobalHydra

    plugin = plugins.load("plain_axpy", [FIXTURES])
    assert plugin.options("pathology") == sorted(GENERIC + ["none"])
    plugins.compose("plain_axpy", kernel_path=[FIXTURES])
    with initialize_config_dir(config_dir=str(plugins.CONF), version_base=None):
        assert GlobalHydra.instance().config_loader().get_group_options("pathology") == plugin.options("pathology")


def copy_of_plain(tmp_path, kernel_yaml_extra="", pathology=None):
    """plain_axpy copied to tmp_path/kernels/plain_axpy, its kernel yaml extended, and an
    own pathology yaml {name: text} added."""
    folder = tmp_path / "kernels" / "plain_axpy"
    shutil.copytree(PLAIN, folder, ignore=shutil.ignore_patterns("__pycache__"))
    yaml = folder / "conf" / "kernel" / "plain_axpy.yaml"
    yaml.write_text(yaml.read_text() + kernel_yaml_extra)
    for name, text in (pathology or {}).items():
        (folder / "conf" / "pathology").mkdir(exist_ok=True)
        (folder / "conf" / "pathology" / f"{name}.yaml").write_text(text)
    plugins.load_dir.cache_clear()
    return folder.parent


def test_a_kernels_own_yaml_overrides_a_generic_one(tmp_path):
    where = copy_of_plain(tmp_path, pathology={"no_l1": (
        "no_l1:\n  generic: true\n  flags: [-Xptxas=-dlcm=cs]\n  mechanism: mine\n  expected: mine\n"
        "  fingerprint: {sass.instructions: same}\n")})
    plugin = plugins.load("plain_axpy", [where])
    assert plugin.config_file("pathology", "no_l1") == plugin.conf / "pathology" / "no_l1.yaml"
    variant = make_job(plugins.compose("plain_axpy", ["pathology=no_l1"], kernel_path=[where])).variant
    assert variant.flags == ("-Xptxas=-dlcm=cs",) and variant.specs["no_l1"]["mechanism"] == "mine"


def test_a_kernel_declares_one_not_applicable_and_nothing_is_built(tmp_path):
    from ablate.pipeline import run_job

    where = copy_of_plain(tmp_path, "  not_applicable:\n    half_sms: it must have every SM\n")
    cfg = plugins.compose("plain_axpy", ["pathology=half_sms", "mode=static", f"build.dir={tmp_path / 'b'}"],
                          kernel_path=[where])
    result = run_job(make_job(cfg))
    assert result.status == "not_applicable" and "it must have every SM" in result.error
    assert not (tmp_path / "b").exists()  # decided before any build
    base = make_job(plugins.compose("plain_axpy", ["mode=static"], kernel_path=[where]))
    assert base.opted_out == {}  # it concerns half_sms's jobs only

    where = copy_of_plain(tmp_path / "bad", "  not_applicable:\n    no_such: why\n")
    with pytest.raises(ValueError, match="no_such.*no generic pathology"):
        make_job(plugins.compose("plain_axpy", kernel_path=[where]))


def test_not_applicable_is_a_status_of_its_own_and_not_a_failure():
    assert "not_applicable" in STATUSES and "not_applicable" in GOOD_STATUSES


@pytest.mark.parametrize("spec, message", [
    ({"flags": ["-o", "/tmp/x"]}, "is not one ablate passes to nvcc"),
    ({"flags": ["--fmad=false; rm -rf ~"]}, "is not one ablate passes to nvcc"),
    ({"flags": ["-Xptxas=-dlcm=cg -v"]}, "is not one ablate passes to nvcc"),
    ({"flags": "--fmad=false"}, "flags must be a list"),
    ({"transform": "sed"}, "transform 'sed' is not one of"),
    ({"regs_cap": {"fraction_of_base": 1.5}}, r"must be a number in \(0, 1\)"),
    ({"regs_cap": 32}, "regs_cap must be"),
    ({"sm_fraction": 0}, r"must be a number in \(0, 1\)"),
    ({"generic": "yes"}, "generic must be true or false"),
])
def test_the_new_keys_are_checked_before_anything_is_built(spec, message):
    with pytest.raises(VariantError, match=message):
        variant_from_cfg({"p": {**spec, "fingerprint": {"regs": "same"}}}, PLAIN)
    with pytest.raises(VariantError, match="the base"):
        variant_from_cfg({"none": {"flags": ["--fmad=false"]}}, PLAIN)


def test_flags_a_cap_and_a_transform_reach_the_command_and_the_librarys_name(tmp_path):
    plugin = plugins.load("plain_axpy", [FIXTURES])
    build_cfg = OmegaConf.merge(OmegaConf.load(ROOT / "conf" / "config.yaml").build,
                                {"dir": str(tmp_path), "arch": "sm_90"})
    def v(spec):
        return variant_from_cfg({"x": {**spec, "fingerprint": {"regs": "same"}}}, plugin.dir)
    strict = compile_mod.compile_command(v({"flags": ["--fmad=false"]}), build_cfg, plugin, "sm_90", ROOT)
    assert "--fmad=false" in strict
    capped = v({"regs_cap": {"fraction_of_base": 0.5}})
    assert compile_mod.regs_cap(capped, 45) == 22
    command = compile_mod.compile_command(capped, build_cfg, plugin, "sm_90", ROOT, regs_cap=22)
    assert "-maxrregcount=22" in command and "-DABLATE_REGS_CAP=22" in command
    with pytest.raises(compile_mod.BuildError, match="build the base alongside"):
        compile_mod.regs_cap(capped, None)  # (build() adds the base: tests/test_interactions_study.py)
    paths = {n: compile_mod.library_path(v(s), build_cfg, plugin, ROOT, base_regs=40)
             for n, s in [("a", {"macros": {"ABLATE_A": 1}}), ("flags", {"flags": ["--fmad=false"]}), ("unroll", {"transform": "unroll_1"}),
                          ("cap", {"regs_cap": {"fraction_of_base": 0.5}})]}
    assert len(set(paths.values())) == 4


def test_no_unroll_compiles_a_transformed_copy_and_leaves_the_sources_alone(tmp_path):
    where = copy_of_plain(tmp_path)
    plugin = plugins.load("plain_axpy", [where])
    source = plugin.source.read_text()
    assert source.count("#pragma unroll\n") == 2
    tree = compile_mod.transformed(plugin, ("unroll_1",), tmp_path / "build")
    copy = (tree / "base" / "plain_axpy.cu").read_text()
    assert copy.count("#pragma unroll 1\n") == 2 and "#pragma unroll\n" not in copy
    assert (tree / "base" / "plain_axpy.h").is_file() and plugin.source.read_text() == source
    assert compile_mod.transformed(plugin, ("unroll_1",), tmp_path / "build") == tree  # same contents, same copy
    plugin.source.write_text(source.replace("kItems = 16", "kItems = 8"))
    assert compile_mod.transformed(plugin, ("unroll_1",), tmp_path / "build") != tree  # the contents name it
    text = "  #pragma unroll 4\n#  pragma   unroll (K)\n#pragma unroll_completely\n#pragma once\n"
    assert compile_mod.TRANSFORM_FUNCTIONS["unroll_1"](text) == (
        "  #pragma unroll 1\n#pragma unroll 1\n#pragma unroll_completely\n#pragma once\n")


def test_the_sass_classes_the_generic_pathologies_read():
    counts = sass.mix(["FFMA R1, R2, R3, R4", "CALL.REL.NOINC 0x100", "@!P4 LDG.E.CONSTANT R5, desc[UR6][R6.64]",
                       "LDG.E.STRONG.GPU R15, desc[UR6][R2.64]", "LDG.E.128 R4, desc[UR6][R2.64]"])
    assert counts["ffma"] == counts["call"] == counts["ldg_nc"] == counts["ldg_strong"] == 1
    assert counts["ldg_32"] == 2 and counts["ldg_128"] == 1  # still counted by width


# ---- half_sms: green contexts (on the CPU, what can be checked without a GPU) ----------------

def test_green_context_requests_round_down_to_the_drivers_granularity():
    assert green.wanted(132, 0.5) == 66
    assert green.wanted(132, 0.5, min_partition=8, alignment=8) == 64  # not 72: never more than half
    assert green.wanted(10, 0.1, min_partition=8, alignment=2) == 8
    buffer = ctypes.create_string_buffer(green.RESOURCE_BYTES)
    (ctypes.c_uint * 3).from_buffer(buffer, green.SM_OFFSET)[:] = [132, 8, 2]
    assert green.sm_fields(buffer) == {"sm_count": 132, "min_partition": 8, "alignment": 2}


def test_the_driver_api_binds_or_says_why_not():
    why = green.unsupported()
    if why is None:  # a driver with green contexts: every function is bound with its signature
        lib = green.driver()
        for name, argtypes in green.FUNCTIONS.items():
            assert getattr(lib, name).argtypes == argtypes
    else:
        assert "libcuda" in why or "12.4" in why
        with pytest.raises(green.GreenContextError):
            green.stream(0, 0.5)


def test_half_sms_reaches_the_gpu_half_and_is_the_bases_code():
    job = make_job(plugins.compose("plain_axpy", ["pathology=half_sms"], kernel_path=[FIXTURES]))
    assert job.variant.sm_fraction == 0.5 and not job.variant.changes_build
    assert job.wire("b.so", "v.so")["sm_fraction"] == 0.5
    assert make_job(plugins.compose("plain_axpy", kernel_path=[FIXTURES])).wire("b", "v")["sm_fraction"] is None
    build_cfg = OmegaConf.merge(job.build, {"arch": "sm_90"})
    variant, base = (compile_mod.compile_command(v, build_cfg, job.plugin, "sm_90", ROOT) for v in (job.variant, job.base))
    # the base's compile; only the pathology list its library reports differs
    assert [a for a in variant if a != "-DABLATE_PATHOLOGIES=half_sms"] == [a for a in base if a != "-DABLATE_PATHOLOGIES="]


# ---- the done-when test: the plain plugin sweeps with no patch ------------------------------

def sweep(tmp_path, kernel_path, *overrides, build_dir=None):
    env = {**os.environ, "MLFLOW_TRACKING_URI": f"sqlite:///{tmp_path / 'mlflow.db'}"}
    return subprocess.run(
        [sys.executable, "-m", "ablate", "-m", "kernel=plain_axpy", f"kernel_path=[{kernel_path}]",
         "mode=static", "build.jobs=1", *overrides, f"build.dir={build_dir or tmp_path / 'build'}",
         f"hydra.sweep.dir={tmp_path / 'multirun'}"],
        cwd=ROOT, env=env, capture_output=True, text=True, timeout=900)


def jobs_of(tmp_path):
    from mlflow import MlflowClient

    client = MlflowClient(f"sqlite:///{tmp_path / 'mlflow.db'}")
    exp = client.get_experiment_by_name("plain_axpy")
    runs = client.search_runs([exp.experiment_id], order_by=["attributes.start_time ASC"])
    return {r.data.params["pathology"]: r for r in runs if r.data.tags.get("kind") == "job"}  # the latest of each


def test_a_plain_kernel_sweeps_with_every_generic_pathology_and_no_patch(tmp_path):
    before = {p: p.read_bytes() for p in PLAIN.rglob("*") if p.is_file() and "__pycache__" not in p.parts}
    # the project's own copy of the plugin: its libraries kept between sessions (what is checked
    # is the sweep's record of each, not that nvcc ran)
    proc = sweep(tmp_path, FIXTURES, "pathology=glob(*)", build_dir=kept_build_dir("plain_axpy"))
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "Traceback" not in proc.stderr
    jobs = jobs_of(tmp_path)
    assert sorted(jobs) == sorted(GENERIC + ["none"])
    for name in GENERIC:  # every one builds, applies, and its fingerprint holds
        run = jobs[name]
        assert run.data.tags["status"] == "static", (name, run.data.tags.get("error"))
        assert run.data.metrics["fingerprint_ok"] == 1, name
        metric, rule = PLAIN_CHANGES[name]
        value, base = run.data.metrics[metric], jobs["none"].data.metrics[metric]
        assert {"decreases": value < base, "increases": value > base, "differs": value != base,
                "same": value == base}[rule], (name, metric, value, base)
    assert jobs["regs_capped"].data.metrics["regs"] == 24  # half of 45, raised to ptxas's lower bound
    assert {p: p.read_bytes() for p in before} == before  # the user's sources untouched

    # The same plugin declaring one not applicable: the job says so, and rank lists it with why.
    where = copy_of_plain(tmp_path / "optout", "  not_applicable:\n    no_l1: its loads are all read-only\n")
    proc = sweep(tmp_path, where, "pathology=none,no_l1")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    run = jobs_of(tmp_path)["no_l1"]
    assert run.data.tags["status"] == "not_applicable"
    env = {**os.environ, "MLFLOW_TRACKING_URI": f"sqlite:///{tmp_path / 'mlflow.db'}"}
    rank = subprocess.run([sys.executable, "-m", "ablate.report.rank", "--kernel", "plain_axpy"], cwd=ROOT,
                          env=env, capture_output=True, text=True, timeout=300)
    assert rank.returncode == 0, rank.stderr
    not_ranked = rank.stdout.split("Not ranked")[1]
    assert "no_l1" in not_ranked and "not_applicable" in not_ranked and "read-only" in not_ranked


def test_a_generic_pathology_that_changes_nothing_is_not_applicable_a_hand_written_one_an_error(tmp_path):
    """rmsnorm has no __restrict__: no_restrict's machine code is the base's."""
    from ablate.pipeline import run_job

    cfg = plugins.compose("rmsnorm", ["pathology=no_restrict", "mode=static", "build.jobs=1",
                                      f"build.dir={kept_build_dir('rmsnorm_no_restrict')}"])
    result = run_job(make_job(cfg))
    assert result.status == "not_applicable", result.error
    assert "machine code equals the base's" in result.error and "__restrict__" in result.error
    # The same pathology, were it hand-written (no `generic: true`), is an error as before.
    from ablate.job import fingerprint
    job = make_job(cfg)
    spec = {k: v for k, v in job.variant.specs["no_restrict"].items() if k != "generic"}
    hand = variant_from_cfg({"no_restrict": spec}, job.plugin.dir)
    assert not hand.generic
    assert any("SASS equals the base's" in p for p in fingerprint.check(hand, {"sass.ldg_nc": 0}, {"sass.ldg_nc": 1}, "x", "x"))


def test_a_kernel_on_a_green_stream_keeps_the_kernels_attributes():
    """The gate and the timing read the variant's spec and path through its OnStream."""
    from ablate.gpu.green import OnStream

    class Kernel:
        spec, path = "the spec", "lib.so"

    on = OnStream(Kernel(), torch_stream=None)
    assert (on.spec, on.path, on.stream) == ("the spec", "lib.so", None)
