"""Triton kernels as libraries ship them, on the CPU: a function under @triton.autotune and
one under @triton.heuristics (fixtures tests/fixtures/plugins/tuned_axpy, even_axpy) swept
statically, TRITON by module path, a missing package refused in one line, a library kernel's
version in its provenance, and Liger-Kernel's RMSNorm (kernels/liger_rmsnorm; skipped
without the extra). On a GPU: tests/test_triton_libraries_gpu.py."""
import json
import logging
import shutil
import sys
from pathlib import Path

import pytest

pytest.importorskip("triton", reason="triton is not installed (pip install -e '.[dev]' installs it on Linux x86_64)")
pytest.importorskip("torch")

from ablate.build import triton_aot, triton_target  # noqa: E402
from ablate.job import plugins  # noqa: E402
from ablate.job.job import make_job  # noqa: E402
from ablate.pipeline import run_job  # noqa: E402
from conftest import kept_build_dir  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
FIXTURES = ROOT / "tests" / "fixtures" / "plugins"


def sweep(kernel, build_dir, kernel_path=(FIXTURES,)):
    """{pathology: Result} of every pathology of the kernel, statically for sm_90: every
    variant built in one build first, as a sweep's callback builds them (ablate/sweep/callbacks.py;
    one compile process forks them all: ablate/build/triton_forks.py), then each job run."""
    from ablate.build.compile import build
    from ablate.sweep.design import variants_of_sweep

    plugin = plugins.load(kernel, list(kernel_path))
    jobs = {name: make_job(plugins.compose(kernel, [f"pathology={name}", "mode=static", f"build.dir={build_dir}",
                                                    "build.arch=sm_90"], kernel_path=list(kernel_path)))
            for name in plugin.options("pathology")}
    first = next(iter(jobs.values()))
    variants = variants_of_sweep(list(jobs.values()))
    if first.base.name not in [v.name for v in variants]:
        variants.insert(0, first.base)
    build(variants, first.cfg.build, first.plugin, ROOT)
    return {name: run_job(job) for name, job in jobs.items()}


def assert_every_job_ok_or_not_applicable(results):
    for name, r in results.items():
        assert r.status in ("static", "not_applicable"), (name, r.status, r.error)
        if r.status == "static":
            assert r.error is None and r.metrics["fingerprint_ok"] == 1, (name, r.error)
    assert {n for n, r in results.items() if r.status == "static"} > {"none"}


def test_an_autotuned_kernel_sweeps_statically_on_its_first_config(tmp_path, caplog):
    """@triton.autotune used to fail every job (AttributeError: 'Autotuner' object has no
    attribute 'params'); without META the static base is the autotuner's first config, said
    once, and recorded in each job."""
    plugin = plugins.load("tuned_axpy", [FIXTURES])
    configs = triton_target.autotune_configs(triton_target.load(str(plugin.dir), plugin.spec.TRITON))
    assert configs == [{"BLOCK": 1024, "num_warps": 4, "num_stages": 3}, {"BLOCK": 2048, "num_warps": 8, "num_stages": 3},
                       {"BLOCK": 512, "num_warps": 2, "num_stages": 2}]
    assert plugin.spec.META == configs[0] and plugin.spec.META_FROM == "autotune"
    with caplog.at_level(logging.WARNING, logger="ablate"):
        results = sweep("tuned_axpy", tmp_path / "build")
    assert_every_job_ok_or_not_applicable(results)
    said = [r.message for r in caplog.records if "@triton.autotune" in r.message]
    assert len(said) <= 1 and all("the base is its first of 3 configs" in m for m in said)
    for r in results.values():
        assert json.loads(r.params["base_meta"]) == configs[0]
        assert r.params["base_meta_from"] == "first autotune config"
    # a pathology overrides the autotuned META as any other: small_block's BLOCK is 128; the
    # neighbours (tune_*: BLOCK halved and doubled, and the autotuner's other two configs) 512, 2048
    manifests = [json.loads(p.read_text()) for p in (tmp_path / "build").glob("*.triton.json")]
    assert {m["meta"]["BLOCK"] for m in manifests} == {1024, 128, 512, 2048}


def test_the_autotuned_base_on_a_gpu_is_the_variants_base(tmp_path, monkeypatch):
    """What job_of does with the autotuner's pick (ablate/gpu/autotune.py, base_record, mode=gpu): every
    variant of the job is built on it, and a pathology's fraction_of_base reads it."""
    from ablate.gpu import autotune
    from ablate.pipeline import job_of

    picked = {"BLOCK": 2048, "num_warps": 8, "num_stages": 3}
    monkeypatch.setattr(autotune, "base_record", lambda plugin, shape, build_dir, timeout_s: {"meta": picked})
    cfg = plugins.compose("tuned_axpy", ["pathology=half_warps", "mode=gpu", f"build.dir={tmp_path}"],
                          kernel_path=[FIXTURES])
    job = job_of(cfg)
    assert job.base.base_meta == picked == job.variant.base_meta
    spec = job.plugin.spec
    assert triton_aot.effective_meta(spec, job.base) == picked
    assert triton_aot.effective_meta(spec, job.variant) == {**picked, "num_warps": 4}
    static = job_of(plugins.compose("tuned_axpy", ["pathology=half_warps", "mode=static"], kernel_path=[FIXTURES]))
    assert static.base.base_meta == {} and triton_aot.effective_meta(spec, static.variant)["num_warps"] == 2


def test_the_specs_meta_overrides_the_autotuner(tmp_path, monkeypatch):
    """A META that declares part of a config: the rest is the autotuner's (its pick on a GPU,
    its first config without); one that declares all of it leaves the autotuner out."""
    from ablate.gpu import autotune
    from ablate.pipeline import job_of

    folder = tmp_path / "plugins" / "tuned_axpy"
    shutil.copytree(FIXTURES / "tuned_axpy", folder)
    spec_py = folder / "spec.py"
    spec_py.write_text(spec_py.read_text() + '\nMETA = {"num_warps": 2}\n')
    spec = plugins.load("tuned_axpy", [folder.parent]).spec
    assert spec.META_FROM == "autotune" and spec.META == {"BLOCK": 1024, "num_warps": 2, "num_stages": 3}
    monkeypatch.setattr(autotune, "base_record", lambda plugin, shape, build_dir, timeout_s:
                        {"meta": {"BLOCK": 2048, "num_warps": 8, "num_stages": 3}})
    job = job_of(plugins.compose("tuned_axpy", ["pathology=none", "mode=gpu"], kernel_path=[folder.parent]))
    assert job.base.base_meta == {"BLOCK": 2048, "num_warps": 2, "num_stages": 3}
    full = tmp_path / "full" / "tuned_axpy"
    shutil.copytree(folder, full)
    (full / "spec.py").write_text(spec_py.read_text() + 'META = {"BLOCK": 256, "num_warps": 1, "num_stages": 1}\n')
    spec = plugins.load("tuned_axpy", [full.parent]).spec
    assert spec.META_FROM == "spec.META" and spec.META == {"BLOCK": 256, "num_warps": 1, "num_stages": 1}
    job = job_of(plugins.compose("tuned_axpy", ["pathology=none", "mode=gpu"], kernel_path=[full.parent]))
    assert job.base.base_meta == {}


def test_a_heuristics_kernel_sweeps_statically_its_values_computed_per_instance(tmp_path):
    plugin = plugins.load("even_axpy", [FIXTURES])
    spec = plugin.spec
    # n = 1000000 is a multiple of 16 (the arguments' one specialization) but not of BLOCK
    assert spec.instance_of({"n": 1048576}) == "even" and spec.instance_of({"n": 1000000}) == "odd"
    results = sweep("even_axpy", tmp_path / "build")
    assert_every_job_ok_or_not_applicable(results)
    for path in (tmp_path / "build").glob("*.triton.json"):
        manifest = json.loads(path.read_text())
        assert {n: i["heuristics"] for n, i in manifest["instances"].items()} == {"even": {"EVEN": True},
                                                                                "odd": {"EVEN": False}}
    # the launcher binds a call's arguments with the heuristic's value for them
    from ablate.build.triton_launch import TritonKernel

    lib = next((tmp_path / "build").glob("*.triton.json"))
    kernel = TritonKernel(lib, spec)
    for n, instance in ((1048576, "even"), (1000000, "odd")):
        shape = {"n": n}
        assert kernel.instance(spec.args(triton_aot.fake_inputs(spec, shape), shape))[0] == instance
    assert triton_target.heuristic_values(triton_target.load(str(plugin.dir), spec.TRITON), {"n": 1000},
                                          {"BLOCK": 1000, "EVEN": False}) == {}  # a given value is left to it


def test_one_process_forks_every_variants_compile_and_a_failure_stays_its_own(tmp_path, monkeypatch):
    """A build's Triton variants are compiled by one process that imports torch and Triton once
    and forks a child per variant (ablate/build/triton_forks.py), not one process each (~3.5 s
    of CPU a variant on the 2-core machine); a variant that fails is that variant's failure,
    with its own log, and the others build."""
    import subprocess

    from ablate.build.compile import build
    from ablate.job.variant import variant_from_cfg

    plugin = plugins.load("even_axpy", [FIXTURES])
    cfg = plugins.compose("even_axpy", ["pathology=none", "mode=static", f"build.dir={tmp_path}", "build.arch=sm_90"],
                          kernel_path=[FIXTURES])
    variants = [variant_from_cfg({name: {"meta": meta}}, plugin.dir)
                for name, meta in (("warps2", {"num_warps": 2}), ("warps8", {"num_warps": 8}),
                                   ("typo", {"BLOCK_Q": 64}))]
    started, real = [], subprocess.run
    monkeypatch.setattr(triton_aot.subprocess, "run", lambda cmd, *a, **k: started.append(cmd) or real(cmd, *a, **k))
    results = build(variants, cfg.build, plugin, ROOT)
    assert len(started) == 1 and started[0][1:3] == ["-m", "ablate.build.triton_forks"], started
    assert results["warps2"].ok and results["warps8"].ok, results["warps2"].log + results["warps8"].log
    for name in ("warps2", "warps8"):  # each its own ptxas report, and no other's failure
        assert results[name].ptxas and "BLOCK_Q" not in results[name].log, results[name].log
    assert not results["typo"].ok and "BLOCK_Q" in results["typo"].log and "ptxas" not in results["typo"].log
    assert "error: the Triton compile exited 1" in results["typo"].log
    assert not list(tmp_path.glob(".*.request.json*")) and not list(tmp_path.glob(".*cache*"))  # nothing left


def package_plugin(tmp_path, target, module_text=None):
    """A plugin whose TRITON is `target` (a module path), with even_axpy's spec otherwise; the
    package written under tmp_path/site when given."""
    folder = tmp_path / "plugins" / "lib_axpy"
    (folder / "conf" / "kernel").mkdir(parents=True)
    (folder / "conf" / "shape").mkdir()
    spec = (FIXTURES / "even_axpy" / "spec.py").read_text().replace('TRITON = "base/axpy.py:axpy_kernel"',
                                                                   f"TRITON = {target!r}")
    (folder / "spec.py").write_text(spec)
    (folder / "conf" / "kernel" / "lib_axpy.yaml").write_text(
        (FIXTURES / "even_axpy" / "conf" / "kernel" / "even_axpy.yaml").read_text().replace("even_axpy", "lib_axpy"))
    (folder / "conf" / "shape" / "n1m.yaml").write_text("n: 1048576\n")
    if module_text:
        site = tmp_path / "site" / "axpy_lib"
        site.mkdir(parents=True)
        (site / "__init__.py").write_text("")
        (site / "kernels.py").write_text(module_text)
    return folder


def test_triton_by_module_path_builds_and_sweeps(tmp_path, monkeypatch):
    """TRITON = "package.module:function": an installed package's function, no file in the
    plugin; its source is the module's file, and the compile process imports it too."""
    folder = package_plugin(tmp_path, "axpy_lib.kernels:axpy_kernel",
                            (FIXTURES / "even_axpy" / "base" / "axpy.py").read_text())
    site = str(tmp_path / "site")
    monkeypatch.syspath_prepend(site)
    monkeypatch.setenv("PYTHONPATH", site + ":" + str(ROOT))
    plugin = plugins.load("lib_axpy", [folder.parent])
    assert plugin.source == tmp_path / "site" / "axpy_lib" / "kernels.py" and plugin.spec.SYMBOL == "axpy_kernel"
    assert not (folder / "base").exists()
    package = plugin.package()
    assert package["triton_module"] == "axpy_lib.kernels:axpy_kernel" and len(package["triton_function"]) == 16
    results = sweep("lib_axpy", tmp_path / "build", [folder.parent])
    assert_every_job_ok_or_not_applicable(results)


def test_a_library_kernels_version_and_source_are_in_its_provenance(tmp_path, monkeypatch):
    """plugin_sources folds in the package's version and the function's hash, so that a
    ranking never pairs sweeps of two versions of the library's kernel."""
    from ablate.sweep import tracking

    folder = package_plugin(tmp_path, "axpy_lib.kernels:axpy_kernel",
                            (FIXTURES / "even_axpy" / "base" / "axpy.py").read_text())
    monkeypatch.syspath_prepend(str(tmp_path / "site"))
    plugin = plugins.load("lib_axpy", [folder.parent])
    first = tracking.plugin_provenance(plugin)
    assert first["triton_module"] == "axpy_lib.kernels:axpy_kernel" and first["plugin_sources"] == plugin.sources_digest()
    real = triton_target.package
    monkeypatch.setattr(triton_target, "package", lambda t: {**real(t), "triton_package": "axpy_lib 2.0"})
    assert plugin.sources_digest() != first["plugin_sources"]
    monkeypatch.setattr(triton_target, "package", lambda t: {**real(t), "triton_function": "0" * 16})
    assert plugin.sources_digest() != first["plugin_sources"]


def test_a_missing_package_is_one_line_naming_the_module(tmp_path):
    folder = package_plugin(tmp_path, "no_such_library.ops:axpy_kernel")
    with pytest.raises(plugins.PluginError) as e:
        plugins.load("lib_axpy", [folder.parent])
    text = str(e.value)
    assert "\n" not in text and "module 'no_such_library.ops' is not installed" in text, text
    with pytest.raises(ValueError, match="'FILE.py:FUNCTION' .* or 'package.module:FUNCTION'"):
        triton_target.split("no-such.module:f")


def test_the_liger_plugin_builds_statically():
    """kernels/liger_rmsnorm names Liger-Kernel's function by module path and holds no copy of
    it; its META is Liger's own launch for hidden 4096; every variant builds for sm_90."""
    pytest.importorskip("liger_kernel", reason="liger-kernel is not installed (pip install -e '.[liger]')")
    from liger_kernel.ops.utils import calculate_settings

    plugin = plugins.load("liger_rmsnorm")
    assert plugin.spec.TRITON.startswith("liger_kernel.ops.rms_norm:")
    assert not any(p.suffix == ".py" and p.name != "spec.py" for p in plugin.sources())
    block, warps = calculate_settings(plugin.spec.HIDDEN)
    assert (plugin.spec.META["BLOCK_SIZE"], plugin.spec.META["num_warps"]) == (block, warps)
    assert plugin.package()["triton_package"].startswith("liger_kernel 0.8.5")
    results = sweep("liger_rmsnorm", kept_build_dir("liger_rmsnorm"), ())  # the build is the means here
    assert_every_job_ok_or_not_applicable(results)
    assert results["oversized_block"].status == "static"


def test_without_liger_its_plugin_is_refused_in_one_line(tmp_path, monkeypatch):
    """Where the extra is not installed (its import made to fail here, as Python's own would)."""
    class NoLiger:
        @staticmethod
        def find_spec(name, path=None, target=None):
            if name.split(".")[0] == "liger_kernel":
                raise ModuleNotFoundError(f"No module named {name!r}", name=name)

    for mod in [m for m in sys.modules if m.split(".")[0] == "liger_kernel"]:
        monkeypatch.delitem(sys.modules, mod)
    monkeypatch.setattr(sys, "meta_path", [NoLiger, *sys.meta_path])
    monkeypatch.setattr(triton_target, "load", triton_target.load.__wrapped__)
    with pytest.raises(plugins.PluginError) as e:
        plugins.load_dir.__wrapped__(plugins.available()["liger_rmsnorm"])
    assert "\n" not in str(e.value) and "module 'liger_kernel.ops.rms_norm' is not installed" in str(e.value)


# ---- the call as the library's launcher makes it (issue: library kernels on the GPU) ----------

def test_the_call_binds_what_the_librarys_launcher_passes():
    """shaped_scale is shaped as Liger's DyT: HAVE_BETA fixed by META, N from the shape (a
    constexpr), BLOCK_N and num_warps tuned, EVEN from a heuristic below the autotuner. The
    call passes the first two and leaves the tuned keys and the heuristic to Triton; DyT's
    `dynamic_func() missing ... 'N'` was N never bound."""
    from ablate.build import triton_autotune

    spec = plugins.load("shaped_scale", [FIXTURES]).spec
    shape = {"rows": 4096, "cols": 1000}
    plan = triton_autotune.call_plan(spec, shape, triton_aot.fake_inputs(spec, shape))
    assert {k: v for k, v in plan["kwargs"].items() if not hasattr(v, "data_ptr")} == {"N": 1000, "HAVE_BETA": True}
    assert set(plan["kwargs"]) == {"X", "Y", "Alpha", "Beta", "N", "HAVE_BETA"} and plan["pinned"] == {}
    assert plan["sources"] == {"N": "shape", "HAVE_BETA": "spec.META", "EVEN": "heuristics", "BLOCK_N": "autotuner",
                               "num_warps": "autotuner", "num_stages": "autotuner"}
    assert triton_autotune.sources_text(plan["sources"]) == (
        "autotuner: BLOCK_N, num_stages, num_warps; spec.META: HAVE_BETA; shape: N; heuristics: EVEN")
    # N is a constexpr: each width is its own instance, told apart by N's value
    assert spec.instance_of({"rows": 8, "cols": 1000}) == "c1000" and spec.instance_of({"rows": 8, "cols": 1024}) == "c1024"
    # a pathology that sets a constexpr of the shape wins over it (fla_l2norm's oversized_bd sets BD)
    fn = triton_aot.load_function(str(spec.folder), spec.TRITON)
    _, _, binder = triton_aot.binder_of(fn, 90)
    args = spec.args(triton_aot.fake_inputs(spec, shape), shape)
    _, spec_list, _ = triton_aot.specialization(fn, binder, args, {**spec.META, "N": 1024, "EVEN": True})
    assert ["constexpr", 1024] in spec_list


def test_a_constexpr_nothing_gives_is_refused_in_one_line(tmp_path):
    folder = tmp_path / "shaped_scale"
    shutil.copytree(FIXTURES / "shaped_scale", folder)
    spec_py = folder / "spec.py"
    spec_py.write_text(spec_py.read_text().replace(', "N": "cols"}', "}"))
    with pytest.raises(plugins.PluginError) as e:
        plugins.load("shaped_scale", [tmp_path])
    text = str(e.value)
    assert "\n" not in text and "constexpr 'N' has no value" in text and "PARAMS" in text, text


def test_meta_pins_a_tuned_key_and_the_autotuner_times_only_its_configs():
    """tuned_subclass (a library's Autotuner subclass) with META = {num_warps: 4}: its
    autotuner times the configs of 4 warps; a pin that no config has is put into each."""
    from ablate.build import triton_autotune

    plugin = plugins.load("tuned_subclass", [FIXTURES])
    spec = plugin.spec
    obj = triton_target.load(str(plugin.dir), spec.TRITON)
    tuner = triton_target.autotuner(obj)
    assert type(tuner).__name__ == "CountingAutotuner" and spec.META_FROM == "autotune"
    shape = {"n": 1048576}
    plan = triton_autotune.call_plan(spec, shape, triton_aot.fake_inputs(spec, shape))
    assert plan["pinned"] == {"num_warps": 4} and "num_warps" not in plan["kwargs"]
    assert plan["sources"]["num_warps"] == "spec.META" and plan["sources"]["WIDE"] == "heuristics"
    kept = triton_autotune.pinned_configs(tuner.configs, plan["pinned"])
    assert [(c.kwargs["BLOCK"], c.num_warps) for c in kept] == [(64, 4), (256, 4), (1024, 4)]
    put = triton_autotune.pinned_configs(tuner.configs, {"num_warps": 16, "BLOCK": 256})
    assert [(c.kwargs["BLOCK"], c.num_warps) for c in put] == [(256, 16)]
    assert [c.num_warps for c in tuner.configs] == [1, 4, 1, 4, 1, 4]  # the library's own list is untouched


def test_the_pick_is_tuned_once_in_the_gpu_child_and_read_back(tmp_path, monkeypatch):
    """base_record: no record, the GPU child tunes (a spec {"autotune": ...} through the pool)
    and the pick is written; the next job reads it; a failure is raised for every job at that
    shape from one run, naming what failed."""
    from ablate.build import triton_autotune
    from ablate.gpu import autotune
    from ablate.job.result import Result

    plugin = plugins.load("shaped_scale", [FIXTURES])
    shape = {"rows": 4096, "cols": 1024}
    asked = []
    record = {"meta": {"BLOCK_N": 512, "num_warps": 4, "num_stages": 3, "HAVE_BETA": True}, "gpu": "NVIDIA H200",
              "sources": {"BLOCK_N": "autotuner", "num_warps": "autotuner", "num_stages": "autotuner",
                          "HAVE_BETA": "spec.META", "N": "shape"}, "configs_timed": 4, "timings": {}}

    def worker(spec, timeout_s):
        asked.append(spec)
        return Result("ok", {"autotune": json.dumps(record)})
    import ablate.gpu.pool as worker_module
    monkeypatch.setattr(worker_module, "run_worker", worker)
    monkeypatch.setattr(autotune, "gpu_model", lambda: "NVIDIA H200")
    first = autotune.base_record(plugin, shape, tmp_path, 60)
    again = autotune.base_record(plugin, shape, tmp_path, 60)
    assert len(asked) == 1 and asked[0]["autotune"] == {"kernel_dir": str(plugin.dir), "shape": shape}
    assert asked[0]["bench"]["timeout_s"] == 60
    assert first == again and first["meta"]["BLOCK_N"] == 512 and first["shape"] == shape
    assert len(list((tmp_path / "autotune").glob("*.json"))) == 1
    line = triton_autotune.said(first, 4)
    assert "autotuner: BLOCK_N=512, num_stages=3, num_warps=4; spec.META: HAVE_BETA=True; shape: N" in line
    # another GPU model is another record
    monkeypatch.setattr(autotune, "gpu_model", lambda: "NVIDIA H100 80GB HBM3")
    autotune.base_record(plugin, shape, tmp_path, 60)
    assert len(asked) == 2
    # a failure: once per shape, every job there told the same
    monkeypatch.setattr(worker_module, "run_worker", lambda spec, t: asked.append(spec) or Result(
        "crashed", error="base/scale.py:scale_kernel: its autotuner failed while timing config {'BLOCK_N': 3}: ..."))
    other = {"rows": 8, "cols": 1000}
    for _ in range(2):
        with pytest.raises(triton_autotune.AutotuneError, match="while timing config .'BLOCK_N': 3"):
            autotune.base_record(plugin, other, tmp_path, 60)
    assert len(asked) == 3


def test_an_autotuner_failure_is_its_jobs_error_and_the_sweep_goes_on(tmp_path, monkeypatch):
    """Where the library's autotuner fails at one shape, that shape's jobs are recorded
    crashed (the base's side, naming the config), nothing of theirs is built, and the jobs at
    the other shapes run."""
    from ablate.build import triton_autotune
    from ablate.gpu import autotune
    from ablate.pipeline import job_of
    from ablate.sweep.design import variants_of_sweep

    def record(plugin, shape, build_dir, timeout_s):
        if shape["cols"] == 1000:
            raise triton_autotune.AutotuneError("scale_kernel: its autotuner failed while timing config "
                                                "{'BLOCK_N': 512, 'num_warps': 4}: CompilationError: ...")
        return {}
    monkeypatch.setattr(autotune, "base_record", record)
    jobs = {cols: job_of(plugins.compose("shaped_scale", ["pathology=half_warps", "mode=gpu", f"shape.cols={cols}",
                                                           f"build.dir={tmp_path}", "build.arch=sm_90"],
                                           kernel_path=[FIXTURES])) for cols in (1000, 1024)}
    assert jobs[1000].failed and "'BLOCK_N': 512" in jobs[1000].failed and jobs[1024].failed is None
    assert variants_of_sweep(list(jobs.values())) == [jobs[1024].variant]
    r = run_job(jobs[1000])
    assert r.status == "crashed" and r.params["failed_side"] == "base" and "while timing config" in r.error
    assert not list(tmp_path.glob("*.triton.json"))  # nothing built for it


@pytest.mark.parametrize("kernel,extra", [("liger_dyt", "liger_kernel"), ("fla_l2norm", "fla")])
def test_the_library_plugins_sweep_statically(kernel, extra):
    """Liger's DyT (autotuned, N from the shape, HAVE_BETA from META) and fla's L2 norm (fla's
    own Autotuner subclass, do_not_specialize, D, BD and NB from the shape) by module path,
    with no file of their own but the spec: every job static or not applicable, each
    pathology's fingerprint holding."""
    pytest.importorskip(extra, reason=f"{extra} is not installed (pip install -e '.[liger,fla]')")
    plugin = plugins.load(kernel)
    assert not any(p.suffix == ".py" and p.name != "spec.py" for p in plugin.sources())
    assert plugin.spec.META_FROM == "autotune"
    results = sweep(kernel, kept_build_dir(kernel), ())
    assert_every_job_ok_or_not_applicable(results)
    own = [p.stem for p in (plugin.dir / "conf" / "pathology").glob("*.yaml")]
    assert own and all(results[p].status == "static" for p in own), {p: results[p].error for p in own}
    assert "shape: " in results["none"].params["base_meta_sources"]


def test_the_call_is_positional_as_far_as_the_launcher_gives_each_parameter():
    """Triton's Autotuner gives prune_configs_by and its hooks the positional arguments only
    (`named_args`): the tuned call passes the function's parameters in order up to the first
    the autotuner or a heuristic gives (tuned_subclass's pruner reads named_args["n"])."""
    from ablate.build import triton_autotune

    for kernel, shape, first_keyword in (("tuned_subclass", {"n": 4096}, None),
                                         ("shaped_scale", {"rows": 8, "cols": 1000}, None)):
        spec = plugins.load(kernel, [FIXTURES]).spec
        plan = triton_autotune.call_plan(spec, shape, triton_aot.fake_inputs(spec, shape))
        fn = triton_aot.load_function(str(spec.folder), spec.TRITON)
        args, kwargs = triton_autotune.positional(fn, plan["kwargs"])
        names = [p.name for p in fn.params]
        assert names[:len(args)] == [n for n in names if n in plan["kwargs"]] and kwargs == {}
    fn = triton_aot.load_function(str(spec.folder), spec.TRITON)
    args, kwargs = triton_autotune.positional(fn, {"X": 1, "Y": 2, "Beta": 4, "N": 5})
    assert args == [1, 2] and kwargs == {"Beta": 4, "N": 5}
