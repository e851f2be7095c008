"""Building variants with nvcc through ninja (CPU only: nvcc needs no GPU).

Every kernel and every pathology (with the test-only ones of tests/conf/pathology, which
patch attention) are built once per session, for sm_90, through an nvcc wrapper that counts
compiles (`built` for attention, `built_kernels` for every kernel, shared with test_static
and test_fingerprints). The build mechanics that need edits to sources (depfiles, failed
rebuilds, hashing) run on a tiny stand-in kernel under tmp_path, which compiles in a second
or two.
"""
import os
import re
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace

import pytest
from omegaconf import OmegaConf

import ablate.build.compile
from ablate.job import plugins
from ablate.build.library import Kernel
from ablate.build.compile import (ARCH_RE, BuildError, build, compile_command,
                          library_path, resolve_arch)
from ablate.job.variant import variant_from_cfg
from conftest import NOT_BUILT, kept_build_dir, lock_state

ROOT = Path(__file__).resolve().parents[1]
KERNELS = ("attention", "rmsnorm", "attention_hopper", "cutlass_gemm")  # conftest.KERNELS
ATTENTION = plugins.load("attention")
PATHOLOGIES = ATTENTION.options("pathology")
TEST_PATHOLOGIES = ["broken_build", "noop", "unfingerprinted"]
EVERY_PATHOLOGY = [(k, p) for k in KERNELS for group in ("pathology", "calibration")
                   for p in plugins.load(k).options(group)]
def compiles(built):
    return len(built.nvcc_calls.read_text().splitlines())


# ---- the real kernel ----------------------------------------------------------------------

def test_every_variant_builds_except_the_broken_one(built):
    assert not built.errors
    assert set(built.results) == set(PATHOLOGIES) | set(TEST_PATHOLOGIES) | set(ATTENTION.options("calibration"))
    for name, r in built.results.items():
        if name == "broken_build":
            continue
        assert r.status == "built", f"{name} failed to build:\n{r.log}"
        assert r.lib.is_file() and r.lib.name == f"{r.digest}.so" and len(r.digest) == 16
        assert r.arch == "sm_90"
        # The log starts with the exact command, then keeps ptxas -v's report.
        command = r.log.splitlines()[0]
        assert command.startswith(str(built.build_cfg.nvcc))
        pathologies = "" if name == "none" else name
        assert f"-DABLATE_PATHOLOGIES={pathologies} " in command
        assert "arch=compute_90,code=sm_90" in command
        assert "ptxas info    : Used" in r.log
        kernels = [k for k in r.ptxas["kernels"] if "ablate_calibration_null_kernel" not in k]
        # D 64 and 128, causal or not, FP16 and BF16
        assert len(kernels) == 8 and all("attention_fwd_kernel<" in k for k in kernels)
        assert sum(", Bf16>" in k for k in kernels) == 4
        # the calibrations' unlaunched kernel is there exactly when asked for
        assert (len(r.ptxas["kernels"]) == 9) == ("ABLATE_CALIBRATION_NULL" in built.variants[name].macros)


@pytest.mark.parametrize("kernel", KERNELS)
def test_every_variant_of_every_kernel_builds(built_kernels, kernel):
    b = built_kernels[kernel]
    assert not b.errors
    # kernel.not_applicable in its yaml: never built
    declared = set(OmegaConf.load(b.plugin.conf / "kernel" / f"{kernel}.yaml").kernel.get("not_applicable") or {})
    assert set(b.plugin.options("pathology")) | set(b.plugin.options("calibration")) - declared <= \
        set(b.results) | declared | set(NOT_BUILT.get(kernel, {}))
    for name in set(b.plugin.options("pathology")) - declared:
        r = b.results[name]
        assert r.status == "built", f"{kernel}/{name} failed to build:\n{r.log}"
        info = Kernel(r.lib).info()
        assert info["pathologies"] == list(b.variants[name].pathologies)
        assert info["configs"] and all({"name", "threads", "smem_bytes"} <= set(c) for c in info["configs"])


def test_each_library_carries_its_pathologies(built):
    """-DABLATE_PATHOLOGIES reaches the library: its info names what was switched on."""
    from ablate.build.library import Kernel

    for name, r in built.results.items():
        if r.ok:
            info = Kernel(r.lib).info()
            assert info["pathologies"] == list(built.variants[name].pathologies)
            assert sorted((c["dtype"], c["head_dim"]) for c in info["configs"]) == \
                [("bf16", 64), ("bf16", 128), ("fp16", 64), ("fp16", 128)]


def test_a_broken_variant_is_build_failed_with_its_log(built):
    r = built.results["broken_build"]
    assert r.status == "build_failed" and not r.ok
    assert not r.lib.exists()
    assert "this test-only pathology never compiles" in r.log
    assert r.log.splitlines()[0].startswith(str(built.build_cfg.nvcc))  # the command is kept
    assert r.log_path.read_text() == r.log
    assert r.log_path.name == f"{r.digest}.failed.log"  # not the compile's own <digest>.log.tmp
    assert r.ptxas == {}
    assert not r.cached  # a failure is never kept as a result: it is tried again each session


def test_a_second_build_is_cached_and_runs_no_compile(built):
    good = [built.variants[n] for n, r in built.results.items() if r.ok]
    before = compiles(built)
    mtimes = {v.name: built.results[v.name].lib.stat().st_mtime_ns for v in good}
    again = build(good, built.build_cfg, built.plugin, ROOT)
    assert compiles(built) == before
    for v in good:
        assert again[v.name].cached and again[v.name].status == "built"
        assert again[v.name].lib == built.results[v.name].lib
        assert again[v.name].lib.stat().st_mtime_ns == mtimes[v.name]
        assert again[v.name].ptxas == built.results[v.name].ptxas  # from the kept log

    # The broken one is tried again (and fails again) without touching the others.
    retry = build([built.variants["broken_build"]], built.build_cfg, built.plugin, ROOT)
    assert retry["broken_build"].status == "build_failed"
    assert compiles(built) == before + 1
    assert all(built.results[v.name].lib.stat().st_mtime_ns == mtimes[v.name] for v in good)


# ---- build mechanics on a tiny stand-in project ------------------------------------------

STAND_IN = r"""
#include "base/value.cuh"
__global__ void tiny_kernel(float* x) { x[threadIdx.x] = VALUE; }
extern "C" int ablate_tiny_fwd(void*) { return 1; }
extern "C" const char* ablate_variant_info(void) { return "{}"; }
"""


def stand_in(root: Path):
    """A project under `root` with a kernel folder kernels/tiny: a one-kernel source, a
    header beside it, and a patch that includes a header outside the kernel's folder
    (other/inner.h: tracked by the depfile only)."""
    folder = root / "kernels" / "tiny"
    (folder / "base").mkdir(parents=True)
    (folder / "base" / "tiny.cu").write_text(STAND_IN)
    (folder / "base" / "value.cuh").write_text("#define VALUE 1.0f\n")
    (folder / "patches").mkdir()
    (folder / "patches" / "p.cuh").write_text('#include "../../../other/inner.h"\n')
    (root / "other").mkdir()
    (root / "other" / "inner.h").write_text("#define INNER 1\n")
    build_cfg = OmegaConf.create({"dir": "runs/build", "arch": "sm_90", "nvcc": "nvcc",
                                  "flags": ["-std=c++17"], "jobs": 0})
    kernel = SimpleNamespace(dir=folder, source=folder / "base" / "tiny.cu")
    base = variant_from_cfg({"none": None}, folder)
    patched = variant_from_cfg({"p": {"header": "patches/p.cuh",
                                      "macros": {"ABLATE_P": 1}}}, folder)
    return SimpleNamespace(root=root, build_cfg=build_cfg, kernel=kernel, base=base,
                           patched=patched)


def test_header_edits_rebuild_through_the_depfile(tmp_path):
    p = stand_in(tmp_path)
    first = build([p.base, p.patched], p.build_cfg, p.kernel, p.root)
    assert all(r.status == "built" and not r.cached for r in first.values()), first
    deps = (tmp_path / "runs/build" / f"{first['p'].digest}.deps").read_text()  # nvcc -MD's, kept
    # less what the library's name holds by content (the kernel folder's headers): what
    # another checkout, whose copies of those are newer, checks too
    assert "other/inner.h" in deps and "value.cuh" not in deps

    assert all(r.cached for r in build([p.base, p.patched], p.build_cfg, p.kernel,
                                       p.root).values())
    # inner.h is not part of the hash (outside the kernel's folder): the depfile rebuilds it.
    (tmp_path / "other" / "inner.h").write_text("#define INNER 2\n")
    again = build([p.base, p.patched], p.build_cfg, p.kernel, p.root)
    assert again["p"].lib == first["p"].lib
    assert again["p"].status == "built" and not again["p"].cached
    assert again["none"].cached


def test_a_build_with_nothing_to_do_starts_no_ninja(tmp_path, monkeypatch):
    """A sweep's every job asks for its base and variant again: when each library is newer
    than every file its depfile names, the answer comes without starting ninja; an edit of
    any of them (one outside the kernel's folder too) sends the build to ninja again."""
    from ablate.build import compile as compile_module

    p = stand_in(tmp_path)
    first = build([p.base, p.patched], p.build_cfg, p.kernel, p.root)
    real = compile_module.find_ninja
    monkeypatch.setattr(compile_module, "find_ninja", lambda: pytest.fail("ninja started for nothing to do"))
    again = build([p.base, p.patched], p.build_cfg, p.kernel, p.root)
    assert all(again[n].cached and again[n].lib == first[n].lib and again[n].ptxas == first[n].ptxas
               for n in first)
    started = []
    monkeypatch.setattr(compile_module, "find_ninja", lambda: started.append(1) or real())
    (tmp_path / "other" / "inner.h").write_text("#define INNER 3\n")
    assert not build([p.base, p.patched], p.build_cfg, p.kernel, p.root)["p"].cached and started


def test_a_build_that_waited_for_the_lock_does_not_compile_what_the_build_before_it_made(tmp_path, monkeypatch):
    """Two test processes ask for the same variant: the second finds it unbuilt, waits for the
    folder's lock while the first builds it, then asks again under the lock and starts no ninja
    (which could compile it again while the first process reads it)."""
    from ablate.build import compile as compile_module

    p = stand_in(tmp_path)
    first = build([p.base, p.patched], p.build_cfg, p.kernel, p.root)
    real, calls = compile_module._up_to_date, []

    def checked_before_the_other_build_finished(build_dir, digest, root):
        calls.append(lock_state(build_dir))
        return False if calls[-1] == "free" else real(build_dir, digest, root)
    monkeypatch.setattr(compile_module, "_up_to_date", checked_before_the_other_build_finished)
    monkeypatch.setattr(compile_module, "find_ninja", lambda: pytest.fail("ninja started for what is built"))
    again = build([p.base, p.patched], p.build_cfg, p.kernel, p.root)
    assert all(again[n].cached and again[n].lib == first[n].lib for n in first)
    assert "free" in calls and "held" in calls


def test_only_if_built_answers_without_compiling(tmp_path, monkeypatch):
    """What the sweep's callback asks of each job's variants before the build (to send its
    spec to the GPU worker at once): None where anything would compile, compiling nothing."""
    from ablate.build import compile as compile_module

    p = stand_in(tmp_path)
    real = compile_module.find_ninja
    monkeypatch.setattr(compile_module, "find_ninja", lambda: pytest.fail("ninja started by a check"))
    assert build([p.base, p.patched], p.build_cfg, p.kernel, p.root, only_if_built=True) is None
    assert not list((tmp_path / p.build_cfg.dir).glob("*.so"))
    monkeypatch.setattr(compile_module, "find_ninja", real)
    first = build([p.base, p.patched], p.build_cfg, p.kernel, p.root)
    monkeypatch.setattr(compile_module, "find_ninja", lambda: pytest.fail("ninja started by a check"))
    again = build([p.base, p.patched], p.build_cfg, p.kernel, p.root, only_if_built=True)
    assert {n: r.lib for n, r in again.items()} == {n: r.lib for n, r in first.items()}
    (tmp_path / "other" / "inner.h").write_text("#define INNER 4\n")  # a header it read, edited
    assert build([p.base, p.patched], p.build_cfg, p.kernel, p.root, only_if_built=True) is None


def test_a_variant_that_fails_leaves_the_others_of_its_ninja_run_built(tmp_path):
    p = stand_in(tmp_path)
    (tmp_path / "other" / "inner.h").write_text('#error "inner broke"\n')
    first = build([p.base, p.patched], p.build_cfg, p.kernel, p.root)
    assert first["p"].status == "build_failed" and "inner broke" in first["p"].log
    assert first["p"].log_path.name == f"{first['p'].digest}.failed.log"
    assert not first["p"].log_path.with_name(f"{first['p'].digest}.log.tmp").exists()  # no compile's leftover
    assert first["none"].status == "built" and not first["none"].cached and first["none"].lib.is_file()


def test_a_build_reads_its_results_while_it_holds_the_folders_lock(tmp_path, monkeypatch):
    """Two test processes (make test runs two), or two sweeps, build in one folder one at a
    time; each reads its results (logs, a failure's log moved into place) before it lets the
    next in, which would otherwise rewrite them: a failure's log was once another build's
    compile, caught half-written."""
    from ablate.build import compile as compile_module

    p = stand_in(tmp_path)
    (tmp_path / "other" / "inner.h").write_text('#error "inner broke"\n')
    seen, real = [], compile_module._failed

    def probe(output, lib):  # called as each result is read: is the folder's lock held?
        seen.append(lock_state(lib.parent))
        return real(output, lib)
    monkeypatch.setattr(compile_module, "_failed", probe)
    r = build([p.base, p.patched], p.build_cfg, p.kernel, p.root)
    assert r["p"].status == "build_failed" and r["none"].status == "built"
    assert seen == ["held", "held"]


def test_a_failed_rebuild_keeps_the_earlier_library(tmp_path):
    p = stand_in(tmp_path)
    first = build([p.base, p.patched], p.build_cfg, p.kernel, p.root)
    good = first["p"].lib.read_bytes()
    (tmp_path / "other" / "inner.h").write_text('#error "inner broke"\n')
    again = build([p.base, p.patched], p.build_cfg, p.kernel, p.root)
    assert again["p"].status == "build_failed"
    assert "inner broke" in again["p"].log
    assert first["p"].lib.read_bytes() == good  # the earlier library is intact
    assert again["none"].status == "built" and again["none"].cached
    assert (tmp_path / "runs/build" / f"{first['p'].digest}.log").exists()


def test_the_library_name_hashes_every_input(tmp_path, monkeypatch):
    p = stand_in(tmp_path)

    def path(variant=p.base, **build_changes):
        return library_path(variant, OmegaConf.merge(p.build_cfg, build_changes),
                            p.kernel, p.root)

    base, patched = path(), path(p.patched)
    assert path() == base and len(base.stem) == 16
    names = {base, patched}

    other_macro = variant_from_cfg({"p": {"header": "patches/p.cuh",
                                          "macros": {"ABLATE_P": 2}}}, p.kernel.dir)
    names.add(path(other_macro))
    names.add(path(flags=["-std=c++17", "-O1"]))
    names.add(path(arch="sm_80"))
    with monkeypatch.context() as m:  # the same nvcc command, another nvcc release
        m.setattr(ablate.build.compile, "nvcc_version", lambda nvcc: "Cuda compilation tools 99.9")
        names.add(path())
    (p.kernel.dir / "base" / "value.cuh").write_text("#define VALUE 2.0f\n")
    names.add(path())  # a header in the kernel's folder
    (p.kernel.dir / "patches" / "p.cuh").write_text('#include "../../../other/inner.h"\n// edited\n')
    names.add(path(p.patched))  # the variant's own header
    assert len(names) == 8


def test_a_project_path_with_spaces_is_escaped(tmp_path):
    # (nvcc itself cannot take a `$` in its output path: it hands it to a shell unquoted.)
    root = tmp_path / "a b"
    root.mkdir()
    p = stand_in(root)
    results = build([p.base, p.patched], p.build_cfg, p.kernel, p.root)
    assert all(r.status == "built" for r in results.values()), results["p"].log
    assert all(r.cached for r in build([p.base, p.patched], p.build_cfg, p.kernel,
                                       p.root).values())


def test_the_compile_command(tmp_path):
    p = stand_in(tmp_path)
    combined = variant_from_cfg({"p": {"header": "patches/p.cuh", "macros": {"ABLATE_P": 1}},
                                 "q": {"macros": {"ABLATE_Q": "x_1"}}}, p.kernel.dir)
    command = compile_command(combined, p.build_cfg, p.kernel, "sm_90a", p.root)
    assert command[0] == "nvcc" and command[-1] == "kernels/tiny/base/tiny.cu"
    assert command[command.index("-gencode") + 1] == "arch=compute_90a,code=sm_90a"
    # The patch lies outside this project (ablate's): its absolute path reaches nvcc.
    assert command[command.index("-include") + 1] == str(p.kernel.dir / "patches" / "p.cuh")
    assert {"-DABLATE_P=1", "-DABLATE_Q=x_1", "-DABLATE_PATHOLOGIES=p+q", "-Ikernels/tiny",
            f"-I{ROOT / 'ablate' / 'include'}",
            "-shared", "-fPIC", "-std=c++17"} <= set(command)
    assert "-v" == command[command.index("-Xptxas") + 1]
    base = compile_command(p.base, p.build_cfg, p.kernel, "sm_80", p.root)
    assert "-DABLATE_PATHOLOGIES=" in base and "-include" not in base
    assert "arch=compute_80,code=sm_80" in base


@pytest.mark.parametrize("arch", ["sm90", "compute_90", "sm_90;true", "sm_", "SM_90", ""])
def test_a_bad_arch_is_an_error(arch):
    with pytest.raises(BuildError, match="build.arch"):
        resolve_arch(arch)


def test_auto_arch_is_the_gpus_or_sm_90():
    import torch

    arch = resolve_arch("auto")
    assert ARCH_RE.match(arch)
    if not torch.cuda.is_available():
        assert arch == "sm_90"


def test_auto_arch_comes_from_nvidia_smi_for_the_first_visible_gpu(tmp_path, monkeypatch):
    """No python and torch started to learn the arch (~5 s of a sweep's start): nvidia-smi's
    compute capability of the GPU CUDA_VISIBLE_DEVICES shows first."""
    from ablate.build import compile as compile_module

    smi = tmp_path / "nvidia-smi"
    smi.write_text("#!/bin/sh\nprintf '0, GPU-aaaa-1, 9.0\\n1, GPU-bbbb-2, 8.6\\n'\n")
    smi.chmod(0o755)
    monkeypatch.setenv("PATH", f"{tmp_path}:{os.environ['PATH']}")
    for visible, arch in ((None, "sm_90"), ("1", "sm_86"), ("GPU-bbbb", "sm_86"), ("1,0", "sm_86"),
                          ("", None), ("-1", None)):
        if visible is None:
            monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
        else:
            monkeypatch.setenv("CUDA_VISIBLE_DEVICES", visible)
        assert compile_module._smi_arch() == (True, arch), visible
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "7")  # not listed: torch is asked instead
    assert compile_module._smi_arch() == (False, None)
    smi.write_text("#!/bin/sh\necho 'Field \"compute_cap\" is not a valid field to query.'; exit 2\n")
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
    assert compile_module._smi_arch() == (False, None)  # an older driver: torch is asked


def test_missing_nvcc_or_a_bad_flag_stops_the_build(tmp_path):
    p = stand_in(tmp_path)
    with pytest.raises(BuildError, match="build.nvcc"):
        build([p.base], OmegaConf.merge(p.build_cfg, {"nvcc": str(tmp_path / "no-nvcc")}),
              p.kernel, p.root)
    with pytest.raises(BuildError, match="bad nvcc argument"):
        build([p.base], OmegaConf.merge(p.build_cfg, {"flags": ["-O3\nrm -rf x"]}),
              p.kernel, p.root)
    assert not (tmp_path / "runs/build/build.ninja").exists()


def test_the_base_builds_for_every_ampere_and_ada_target_too():
    # Issue 2: one source for sm_80, sm_86, sm_89 and sm_90 (mma.sync only, shared memory
    # under sm_86/89's 99 KB per-block limit). sm_90 is built by the `built` fixture, and these
    # are kept as its build is (a library is named by the hash of its inputs, the arch among them).
    cfg = OmegaConf.load(ROOT / "conf" / "config.yaml")
    base = variant_from_cfg(OmegaConf.load(ROOT / "conf" / "pathology" / "none.yaml"), ATTENTION.dir)
    for arch in ("sm_80", "sm_86", "sm_89"):
        build_cfg = OmegaConf.merge(cfg.build, {"dir": str(kept_build_dir(f"attention_{arch}")), "arch": arch})
        result = build([base], build_cfg, ATTENTION, ROOT)[base.name]
        assert result.status == "built", f"{arch}:\n{result.log}"
        assert f"'sm_{arch[3:]}'" in result.log  # ptxas compiled for that target
        # Dynamic shared memory is checked only at launch: hold it to sm_86/89's limit here.
        for config in Kernel(result.lib).info()["configs"]:
            assert config["smem_bytes"] <= 99 * 1024, config


def test_a_combined_variant_carries_both_pathologies():
    # nvcc splits -D values at commas: -DABLATE_PATHOLOGIES=a,b would name only a (and
    # define a stray macro b). The names travel joined by "+".
    cfg = OmegaConf.load(ROOT / "conf" / "config.yaml")
    both = OmegaConf.merge(*(OmegaConf.load(ATTENTION.conf / "pathology" / f"{n}.yaml")
                             for n in ("no_swizzle", "fp32_accum")))
    variant = variant_from_cfg(both, ATTENTION.dir)
    build_cfg = OmegaConf.merge(cfg.build, {"dir": str(kept_build_dir("attention_combined")), "arch": "sm_90"})
    result = build([variant], build_cfg, ATTENTION, ROOT)[variant.name]
    assert result.status == "built", result.log
    info = Kernel(result.lib).info()
    assert info["pathologies"] == ["fp32_accum", "no_swizzle"]
    assert info["seams"]["smem_layout"] == "RowMajorLayout" and info["seams"]["score_acc"] == "ScoreF32"


def _kernel_needing(arch):
    from types import SimpleNamespace
    spec = SimpleNamespace(**({"ARCH": arch} if arch else {}))
    return SimpleNamespace(name="k", spec=spec)


@pytest.mark.parametrize("build_arch, required, built_for", [
    ("sm_90", "sm_90a", "sm_90a"),     # the same chip: raised to its own instructions
    ("sm_90a", "sm_90a", "sm_90a"),
    ("sm_80", None, "sm_80"),          # no requirement: build.arch as given
])
def test_a_kernel_can_require_its_arch(build_arch, required, built_for):
    from ablate.build.compile import target_arch
    assert target_arch(build_arch, _kernel_needing(required)) == built_for


def test_another_chips_arch_for_a_kernel_that_requires_one_is_a_clear_error():
    from ablate.build.compile import target_arch
    with pytest.raises(BuildError, match=r"build.arch=sm_80: kernel 'k' is built for sm_90a only"):
        target_arch("sm_80", _kernel_needing("sm_90a"))


@pytest.mark.parametrize("gpu, why", [
    ("sm_80", r"kernel 'k' needs a sm_90a GPU \(its spec.ARCH\) and this one is sm_80"),
    ("sm_90", None), (None, None)])
def test_a_kernel_is_unavailable_on_another_chip(monkeypatch, gpu, why):
    from ablate.build import compile as build_module
    monkeypatch.setattr(build_module, "gpu_arch", lambda: gpu)
    got = build_module.unavailable(_kernel_needing("sm_90a"))
    assert (got is None) if why is None else re.search(why, got)



# ---- a header library's include folder and flags (spec.INCLUDE_DIRS, spec.FLAGS) -----------

def test_a_spec_adds_include_dirs_and_flags_to_every_build(tmp_path):
    """A plugin built on a header library (kernels/cutlass_gemm: CUTLASS from the nvidia-cutlass
    wheel) names the folder, or a function finding it, and the flags the library wants; the
    build compiles against it, and a changed folder is another library."""
    p = stand_in(tmp_path)
    lib = tmp_path / "site" / "lib" / "include"
    lib.mkdir(parents=True)
    (lib / "libvalue.h").write_text("#define LIB_VALUE 2.0f\n")
    (p.kernel.dir / "base" / "tiny.cu").write_text(
        STAND_IN.replace('#include "base/value.cuh"', '#include <libvalue.h>\n#define VALUE LIB_VALUE'))
    p.kernel.spec = SimpleNamespace(INCLUDE_DIRS=lambda: [lib], FLAGS=["--expt-relaxed-constexpr", "-DNDEBUG"])
    command = compile_command(p.base, p.build_cfg, p.kernel, "sm_90", p.root)
    # after the kernel's folder and ablate's; flags after build.flags, before the variant's
    assert command.index(f"-I{lib.relative_to(tmp_path).as_posix()}") > command.index(f"-I{ROOT / 'ablate' / 'include'}")
    assert command.index("--expt-relaxed-constexpr") == command.index("-std=c++17") + 1 and "-DNDEBUG" in command
    first = build([p.base], p.build_cfg, p.kernel, p.root)["none"]
    assert first.status == "built", first.log
    p.kernel.spec.INCLUDE_DIRS = ["../../site/lib/include"]  # a list, relative to the plugin folder
    assert compile_command(p.base, p.build_cfg, p.kernel, "sm_90", p.root) == command
    other = tmp_path / "other_lib"
    other.mkdir()
    (other / "libvalue.h").write_text("#define LIB_VALUE 3.0f\n")
    p.kernel.spec.INCLUDE_DIRS = [other]
    assert library_path(p.base, p.build_cfg, p.kernel, p.root) != first.lib


def test_a_missing_header_library_is_a_clear_build_error(tmp_path):
    p = stand_in(tmp_path)
    p.kernel.name = "tiny"

    def not_installed():
        raise RuntimeError("the nvidia-cutlass package is not installed")
    p.kernel.spec = SimpleNamespace(INCLUDE_DIRS=not_installed)
    with pytest.raises(BuildError, match=r"kernel 'tiny': spec.INCLUDE_DIRS: the nvidia-cutlass package is not installed"):
        compile_command(p.base, p.build_cfg, p.kernel, "sm_90", p.root)
    p.kernel.spec = SimpleNamespace(INCLUDE_DIRS=[tmp_path / "nowhere"])
    with pytest.raises(BuildError, match=r"spec.INCLUDE_DIRS: .*nowhere is not a directory"):
        compile_command(p.base, p.build_cfg, p.kernel, "sm_90", p.root)
    p.kernel.spec = SimpleNamespace(FLAGS="-DNDEBUG")
    with pytest.raises(BuildError, match=r"spec.FLAGS must be a list"):
        compile_command(p.base, p.build_cfg, p.kernel, "sm_90", p.root)


def test_no_torch_is_asked_for_the_arch_where_linux_has_no_nvidia_device(tmp_path, monkeypatch):
    """A CPU machine (no nvidia-smi, no device file): the arch is the default without a child
    that imports torch (~2.4 s of every run's start there); where a device file exists and
    nvidia-smi cannot say, torch is still asked."""
    from ablate.build import compile as compile_module

    if not sys.platform.startswith("linux"):
        pytest.skip("the device files are Linux's")
    monkeypatch.setenv("PATH", str(tmp_path))  # no nvidia-smi
    asked = []
    real_run = subprocess.run

    def run(args, *a, **k):
        if args[0] == sys.executable:
            asked.append(args)
            return subprocess.CompletedProcess(args, 0, stdout="sm_86\n", stderr="")
        return real_run(args, *a, **k)
    monkeypatch.setattr(compile_module.subprocess, "run", run)
    monkeypatch.setattr(compile_module, "NVIDIA_DEVICE_FILES", (str(tmp_path / "nvidiactl"),))
    compile_module.gpu_arch.cache_clear()
    try:
        assert compile_module.gpu_arch() is None and asked == []
        (tmp_path / "nvidiactl").touch()  # a device, and nvidia-smi cannot say which: torch is asked
        compile_module.gpu_arch.cache_clear()
        assert compile_module.gpu_arch() == "sm_86" and len(asked) == 1
    finally:
        compile_module.gpu_arch.cache_clear()


def test_whether_cuda_is_there_needs_no_torch_where_linux_has_no_nvidia_device(tmp_path, monkeypatch):
    from ablate import pipeline
    from ablate.build import compile as compile_module

    if not sys.platform.startswith("linux"):
        pytest.skip("the device files are Linux's")
    monkeypatch.setitem(sys.modules, "torch", None)  # `import torch` would fail: it must not be tried
    monkeypatch.setattr(compile_module, "NVIDIA_DEVICE_FILES", (str(tmp_path / "nvidiactl"),))
    assert pipeline.gpu_available() == (False, "no CUDA device is visible (this machine has no NVIDIA device)")
    (tmp_path / "nvidiactl").touch()
    assert pipeline.gpu_available() == (False, "torch is not installed")


def test_the_compiles_at_once_fit_the_memory_the_kernels_spec_says_one_takes(monkeypatch):
    """ninja's -j: build.jobs, capped where the spec says what one compile takes (BUILD_MEMORY_GIB)
    by how many of them the memory available now holds, at least one; uncapped where the spec
    says nothing, the memory is unknown or one library is built."""
    from types import SimpleNamespace as NS

    from ablate.build import compile as c

    heavy, light = NS(spec=NS(BUILD_MEMORY_GIB=12)), NS(spec=NS())
    monkeypatch.setattr(c, "available_memory_gib", lambda: 23.0)  # a CI machine of two cores
    assert c._jobs({"jobs": 2}, heavy, 11) == 1
    assert c._jobs({"jobs": 0}, heavy, 11) == 1
    assert c._jobs({"jobs": 2}, heavy, 1) == 2
    assert c._jobs({"jobs": 2}, light, 11) == 2 and c._jobs({"jobs": 0}, light, 11) == 0
    monkeypatch.setattr(c, "available_memory_gib", lambda: 5.0)
    assert c._jobs({"jobs": 8}, heavy, 11) == 1
    monkeypatch.setattr(c, "available_memory_gib", lambda: 125.0)  # a GPU machine of 16 cores
    assert c._jobs({"jobs": 16}, heavy, 11) == 10
    assert c._jobs({"jobs": 4}, heavy, 11) == 4
    monkeypatch.setattr(c, "available_memory_gib", lambda: None)
    assert c._jobs({"jobs": 2}, heavy, 11) == 2


def test_available_memory_is_read_where_linux_says_it():
    from ablate.build import compile as c

    if not Path("/proc/meminfo").exists():
        assert c.available_memory_gib() is None
    else:
        assert 0 < c.available_memory_gib() < 2**20
