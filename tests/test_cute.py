"""CuTe DSL kernels on the CPU (ablate/build/cute_aot.py): a kernel written here, not shipped
(tests/fixtures/plugins/cute_scale), entering through a spec of 40 lines or fewer and swept
statically; QuACK's RMSNorm (kernels/quack_rmsnorm) by module path, its base QuACK's own
configuration, each of its pathologies compiled by the DSL for sm_90a and its fingerprint
held; the spec's errors, each one line naming what is wrong. Skipped, with the reason,
without the CuTe DSL (pip install -e '.[cute]'). On a GPU: tests/test_cute_gpu.py."""
import json
import shutil
from pathlib import Path

import pytest

pytest.importorskip("cutlass", reason="the CuTe DSL is not installed (pip install -e '.[cute]')")
pytest.importorskip("torch")

from ablate.build import cute_aot  # noqa: E402
from ablate.job import plugins  # noqa: E402
from ablate.job.job import make_job  # noqa: E402
from conftest import kept_build_dir  # noqa: E402
from test_triton_libraries import sweep  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
FIXTURES = ROOT / "tests" / "fixtures" / "plugins"


def test_a_kernel_written_here_enters_through_a_short_spec_and_sweeps_statically():
    spec_lines = (FIXTURES / "cute_scale" / "spec.py").read_text().splitlines()
    assert len(spec_lines) <= 40
    results = sweep("cute_scale", kept_build_dir("cute_scale"))
    for name, r in results.items():
        assert r.status == "static" and r.metrics["fingerprint_ok"] == 1, (name, r.status, r.error)
    base, scalar = results["none"].metrics, results["scalar_loads"].metrics
    # the base's 8 bf16 values a thread are one 128-bit load and store; VEC 1 leaves none
    assert base["sass.ldg_128"] > 0 and base["sass.stg_128"] > 0 and scalar["sass.ldg_128"] == 0
    assert base["threads_per_block"] == 128 and results["tune_threads_256"].metrics["threads_per_block"] == 256
    assert results["half_sms"].metrics["sass.instructions"] == base["sass.instructions"]


def test_the_derived_call_is_the_functions_runtime_parameters_in_order():
    import torch

    spec = plugins.load("cute_scale", [FIXTURES]).spec
    shape = spec.validate_shape({"rows": 3, "cols": 4096, "a": 0.25, "dtype": "fp16"})
    inputs = spec.make_inputs(shape, torch.Generator().manual_seed(0), "cpu")
    args = spec.call_args(inputs, shape)
    assert args[0] is inputs["x"] and args[1] is inputs["y"] and args[2] == 0.25 and len(args) == 3
    assert spec.instance_of(shape) == "fp16" and spec.instance_of({**shape, "dtype": "bf16"}) == "bf16"
    assert spec.launched("fp16", shape, []) and not spec.launched("bf16", shape, [])


def test_the_manifest_holds_cubin_object_threads_and_shared_memory():
    build = kept_build_dir("cute_scale")
    manifests = [json.loads(p.read_text()) for p in build.glob("*.cute.json")]
    assert manifests, "the sweep above builds them"
    m = next(m for m in manifests if m["meta"] == {"VEC": 8, "THREADS": 128} and m["info"]["pathologies"] == [])
    assert m["arch"] == "sm_90a" and set(m["instances"]) == {"bf16", "fp16"}
    for inst in m["instances"].values():
        assert (build / inst["files"]["cubin"]).read_bytes()[:4] == b"\x7fELF"
        assert (build / inst["files"]["o"]).stat().st_size > 0
        assert inst["threads"] == 128 and inst["smem_bytes"] == 0 and inst["launches"] == 1


def test_quacks_base_is_its_own_heuristic_for_the_hopper():
    from quack.rmsnorm_config import RmsNormFwdConfig

    spec = plugins.load("quack_rmsnorm").spec
    picked = RmsNormFwdConfig.from_analytical_heuristic(spec.HIDDEN, 16, arch_major=9)
    assert spec.META == vars(picked)


def test_quacks_pathologies_compile_for_sm90a_and_their_fingerprints_hold():
    plugin = plugins.load("quack_rmsnorm")
    own = sorted(p.stem for p in (plugin.conf / "pathology").glob("*.yaml"))
    assert len(own) >= 4
    results = sweep_some("quack_rmsnorm", ["none", *own], kept_build_dir("quack_rmsnorm"))
    for name, r in results.items():
        assert r.status == "static" and r.metrics["fingerprint_ok"] == 1, (name, r.status, r.error)
    base = results["none"].metrics
    assert base["regs"] > 64 and base["spill_bytes"] == 0 and base["smem_bytes"] >= 2 * 8192
    assert results["warp_per_row"].metrics["spill_bytes"] > 0
    assert results["cluster_pair"].metrics["smem_bytes"] < base["smem_bytes"]


def sweep_some(kernel, names, build_dir):
    """sweep() of `names` only (QuACK's compiles take ~10 s a variant on the 2-core machine)."""
    from ablate.build.compile import build
    from ablate.pipeline import run_job

    jobs = {n: make_job(plugins.compose(kernel, [f"pathology={n}", "mode=static", f"build.dir={build_dir}",
                                                 "build.arch=sm_90"])) for n in names}
    first = jobs["none"]
    build([j.variant for j in jobs.values()], first.cfg.build, first.plugin, ROOT)
    return {n: run_job(j) for n, j in jobs.items()}


# ---- the spec's errors -------------------------------------------------------------------------

def copy_fixture(tmp_path, edit):
    folder = tmp_path / "cute_scale"
    shutil.copytree(FIXTURES / "cute_scale", folder)
    spec = folder / "spec.py"
    spec.write_text(edit(spec.read_text()))
    plugins.load_dir.cache_clear()
    return folder


@pytest.mark.parametrize("edit, says", [
    (lambda s: s.replace('CUTE = "base/scale.py:scale"', 'CUTE = "scale"'), "spec.CUTE must be 'FILE.py:FUNCTION'"),
    (lambda s: s.replace('CUTE = "base/scale.py:scale"', 'CUTE = "not_a_package_here.ops:f"'),
     "module 'not_a_package_here' is not installed"),
    (lambda s: s.replace('META = {"VEC": 8, "THREADS": 128}', "META = {}"), "spec.META must be a non-empty dict"),
    (lambda s: s.replace('STATIC = ("cols",)', 'STATIC = ("width",)'), "spec.STATIC ['width'] are no field of SHAPE"),
    (lambda s: s + "\ndef compile_args(shape, meta):\n    return (), {}\n", "say its compiled function's arguments"),
])
def test_a_spec_that_cannot_be_used_is_one_line_naming_the_entry(tmp_path, edit, says):
    folder = copy_fixture(tmp_path, edit)
    with pytest.raises(plugins.PluginError) as e:
        plugins.load_dir(folder)
    assert says in str(e.value) and "\n" not in str(e.value)


def test_a_meta_name_the_kernel_lacks_and_cuda_fields_are_refused_naming_them(tmp_path):
    folder = copy_fixture(tmp_path, lambda s: s)
    (folder / "conf" / "pathology" / "bad_name.yaml").write_text("bad_name:\n  meta: {WIDTH: 4}\n  mechanism: m\n"
                                                                 "  expected: e\n  fingerprint: {regs: same}\n")
    (folder / "conf" / "pathology" / "a_macro.yaml").write_text("a_macro:\n  macros: {ABLATE_X: 1}\n  mechanism: m\n")
    from ablate.build.compile import build

    job = make_job(plugins.compose("cute_scale", ["pathology=bad_name", "mode=static", f"build.dir={tmp_path / 'b'}"],
                                   kernel_path=[tmp_path]))
    r = build([job.variant], job.cfg.build, job.plugin, ROOT)["bad_name"]
    assert r.status == "build_failed" and "meta ['WIDTH'] of bad_name: not among spec.META's names" in r.log
    with pytest.raises(ValueError, match="macros is for cuda kernels"):
        make_job(plugins.compose("cute_scale", ["pathology=a_macro", "mode=static"], kernel_path=[tmp_path]))


def test_a_string_or_null_is_a_meta_value():
    from ablate.job.variant import VariantError, _check_meta

    assert _check_meta("p", {"reload_from": "smem", "other": None}) == {"reload_from": "smem", "other": None}
    with pytest.raises(VariantError, match="meta.x must be a number, a bool, a string, null"):
        _check_meta("p", {"x": [1, 2]})


# ---- what the build reads of the DSL's output ---------------------------------------------------

def test_ptxas_lines_are_read_from_the_dsls_remarks_wrapped_or_not():
    plain = ("remark[ptxas info]: ptxas output: ptxas info    : 0 bytes gmem\n"
             "ptxas info    : Compiling entry function 'k_0' for 'sm_90a'\n"
             "ptxas info    : Used 122 registers, used 1 barriers\n\n  --> quack/rmsnorm.py:107:0\n")
    wrapped = ("remark[ptxas]: ptxas detected register spills\n  remark: Spilled values ... ptxas\n"
               "          reports spill usage\n\n          ptxas output:\n          ptxas info    : Compiling entry function\n"
               "          'k_1'\n          for 'sm_90a'\n          ptxas info    : Function properties for\n          k_1\n"
               "          ptxas         .     296 bytes stack frame, 292 bytes spill stores, 292 bytes spill loads\n"
               "          ptxas info    : Used 255 registers, used 0 barriers\n  suggestion: reduce live ranges\n")
    from ablate.build.ptxas import parse

    got = parse(cute_aot.ptxas_report(plain + wrapped), demangle_names=False)
    assert got["kernels"]["k_0"]["registers"] == 122 and got["kernels"]["k_1"]["registers"] == 255
    assert got["spill_bytes"] == 584


def test_the_dynamic_shared_memory_is_the_constant_the_launch_stores():
    config = "!llvm.struct<(array<3 x i32>, array<3 x i32>, i64, ptr, ptr, i32)>"
    ir = (f"llvm.func @launch() {{\n  %11 = llvm.mlir.constant(16400 : i64) : i64\n"
          f"  %30 = llvm.getelementptr %24[0, 2] : (!llvm.ptr) -> !llvm.ptr, {config}\n"
          f"  llvm.store %11, %30 : i64, !llvm.ptr\n}}\n")
    assert cute_aot.dynamic_smem(ir) == [16400]
    with pytest.raises(ValueError, match="no constant"):
        cute_aot.dynamic_smem(ir.replace("llvm.store %11", "llvm.store %12"))


def test_the_scaffold_of_kind_cute_sweeps_statically(tmp_path):
    """make new-kernel NAME=... KIND=cute: it loads, and its base and pathology compile, the
    base's 16-byte loads there and gone in scalar_loads (its fingerprint)."""
    from ablate.tools import new_kernel

    new_kernel.write("cute_axpy_scaffold", tmp_path, "cute")
    results = sweep("cute_axpy_scaffold", tmp_path / "build", kernel_path=(tmp_path,))
    for name in ("none", "scalar_loads"):
        r = results[name]
        assert r.status == "static" and r.metrics["fingerprint_ok"] == 1, (name, r.status, r.error)
    assert results["none"].metrics["sass.ldg_128"] > 0 and results["scalar_loads"].metrics["sass.ldg_128"] == 0
