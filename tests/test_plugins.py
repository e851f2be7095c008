"""Kernel plugins: finding them, refusing broken ones by name before anything is built, and
the rule that the pipeline knows no kernel (a plugin, the only place that does)."""
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from ablate.job import plugins
from conftest import kept_build_dir

ROOT = Path(__file__).resolve().parents[1]


def test_the_projects_kernels_are_found():
    found = plugins.available()
    assert {"attention", "rmsnorm"} <= set(found)
    assert found["attention"] == ROOT / "kernels" / "attention"
    for name in ("attention", "rmsnorm"):
        plugin = plugins.load(name)
        assert plugin.source.is_file() and plugin.conf.is_dir()
        assert all(hasattr(plugin.spec, key) for key in plugins.SPEC)
        assert "none" in plugin.options("pathology")  # the base, ablate's own


def test_no_module_of_the_pipeline_names_a_kernel():
    """Everything a kernel is lives in its plugin: ablate/ names no attention, SDPA, heads or
    head_dim (the scaffold's templates included). ablate/workloads/ is a model's code, which in
    situ runs the kernels in (its attention is the model's), not the pipeline's."""
    banned = re.compile(r"attention|sdpa|\bheads\b|head_dim|head dim", re.IGNORECASE)
    hits = [f"{path.relative_to(ROOT)}:{i}: {line.strip()}"
            for path in sorted((ROOT / "ablate").rglob("*")) if path.is_file() and path.suffix != ".pyc"
            and "workloads" not in path.relative_to(ROOT / "ablate").parts
            for i, line in enumerate(path.read_text(errors="replace").splitlines(), 1)
            if banned.search(line)]
    assert hits == []


def copy_of(name, tmp_path):
    """A copy of a project kernel in a plugin folder of its own (outside the project)."""
    folder = tmp_path / "plugins" / name
    shutil.copytree(plugins.load(name).dir, folder)
    return folder


def test_a_plugin_outside_the_project_is_found_by_env_and_by_config(tmp_path, monkeypatch):
    folder = copy_of("rmsnorm", tmp_path)
    folder.rename(tmp_path / "plugins" / "mine")
    (tmp_path / "plugins" / "mine" / "conf" / "kernel" / "rmsnorm.yaml").rename(
        tmp_path / "plugins" / "mine" / "conf" / "kernel" / "mine.yaml")
    assert "mine" not in plugins.available()
    assert plugins.available([tmp_path / "plugins"])["mine"] == tmp_path / "plugins" / "mine"
    monkeypatch.setenv(plugins.PATH_ENV, f"/nonexistent{os.pathsep}{tmp_path / 'plugins'}")
    assert plugins.load("mine").dir == tmp_path / "plugins" / "mine"


@pytest.mark.parametrize("breakage, message", [
    (lambda f: (f / "spec.py").unlink(), r"kernel 'rmsnorm' at .* is missing spec.py"),
    (lambda f: shutil.rmtree(f / "conf" / "shape"), r"is missing conf/shape"),
    (lambda f: (f / "conf" / "kernel" / "rmsnorm.yaml").unlink(), r"is missing conf/kernel/rmsnorm.yaml"),
    (lambda f: (f / "spec.py").write_text("import no_such_module\n"),
     r"spec.py failed to import: ModuleNotFoundError: No module named 'no_such_module'"),
    (lambda f: (f / "spec.py").write_text("SOURCE = 'base/rmsnorm.cu'\n"),
     r"spec.py does not define: SYMBOL \(the C function .*\); ARGTYPES"),
    (lambda f: (f / "spec.py").write_text((f / "spec.py").read_text().replace('WORK = "memory"', 'WORK = "io"')),
     r"spec.WORK must be one of \['memory', 'fp32_fma', 'tf32', 'fp16_tensor', 'bf16_tensor', 'fp8_tensor'\], got 'io'"),
    (lambda f: (f / "spec.py").write_text((f / "spec.py").read_text().replace('"base/rmsnorm.cu"', '"base/gone.cu"')),
     r"spec.SOURCE 'base/gone.cu' is not a file"),
    (lambda f: [p.unlink() for p in (f / "conf" / "shape").glob("*.yaml")], r"has no shape"),
], ids=["no_spec", "no_shapes", "no_kernel_yaml", "spec_import_error", "spec_incomplete", "bad_work",
        "no_source", "empty_shapes"])
def test_a_broken_plugin_is_named_with_what_is_missing(tmp_path, breakage, message):
    folder = copy_of("rmsnorm", tmp_path)
    breakage(folder)
    with pytest.raises(plugins.PluginError, match=message):
        plugins.load_dir(folder)


def test_a_kernel_defined_twice_is_an_error(tmp_path):
    copy_of("rmsnorm", tmp_path)
    with pytest.raises(plugins.PluginError, match=r"kernel 'rmsnorm' is defined twice: .*kernels/rmsnorm and "):
        plugins.available([tmp_path / "plugins"])


def test_a_broken_plugin_stops_the_app_before_anything(tmp_path):
    folder = copy_of("rmsnorm", tmp_path)
    folder = folder.rename(tmp_path / "plugins" / "broken")
    (folder / "conf" / "kernel" / "rmsnorm.yaml").rename(folder / "conf" / "kernel" / "broken.yaml")
    (folder / "spec.py").write_text("SOURCE = 1 / 0\n")
    env = {**os.environ, "MLFLOW_TRACKING_URI": f"sqlite:///{tmp_path / 'mlflow.db'}"}
    proc = subprocess.run([sys.executable, "-m", "ablate", "kernel=broken", f"kernel_path=[{tmp_path / 'plugins'}]",
                           f"build.dir={tmp_path / 'build'}", f"hydra.run.dir={tmp_path / 'hydra'}"],
                          cwd=ROOT, env=env, capture_output=True, text=True, timeout=300)
    assert proc.returncode != 0
    assert "ablate: kernel 'broken': " in proc.stderr and "ZeroDivisionError" in proc.stderr
    assert "Traceback" not in proc.stderr
    assert not (tmp_path / "build").exists() and not (tmp_path / "mlflow.db").exists()


@pytest.mark.parametrize("argv, kernel", [
    ([], "attention"),
    (["kernel=rmsnorm"], "rmsnorm"),
    (["-m", "kernel=rmsnorm", "pathology=glob(*)"], "rmsnorm"),
    (["--cfg", "job", "kernel=rmsnorm", "shape=r16_h4k"], "rmsnorm"),
])
def test_the_command_line_chooses_the_kernel_and_shows_hydra_its_configs(argv, kernel, monkeypatch):
    monkeypatch.delenv(plugins.CONF_ENV, raising=False)
    assert plugins.choose(argv).name == kernel
    assert os.environ[plugins.CONF_ENV] == str(ROOT / "kernels" / kernel / "conf")


def test_kernel_path_takes_home_and_relative_folders_and_refuses_a_missing_one(tmp_path, monkeypatch):
    """`kernel_path=[~/kernels]` (the README's) and a relative folder reach Hydra absolute and
    quoted (its parser refuses `~`); a folder that is not there is one line naming it."""
    (tmp_path / "kernels").mkdir()
    (tmp_path / "work" / "mine").mkdir(parents=True)
    monkeypatch.setenv("HOME", str(tmp_path))
    monkeypatch.chdir(tmp_path / "work")
    argv = ["-m", "kernel=k", "kernel_path=[~/kernels,mine]", "pathology=glob(*)", "+kernel_path=~/kernels"]
    out = plugins.with_kernel_path(argv)
    assert out == ["-m", "kernel=k", f"kernel_path=['{tmp_path}/kernels','{tmp_path}/work/mine']",
                   "pathology=glob(*)", f"+kernel_path=['{tmp_path}/kernels']"]
    assert [o.value() for o in plugins._overrides(out[2:3])] == [[f"{tmp_path}/kernels", f"{tmp_path}/work/mine"]]
    with pytest.raises(plugins.PluginError, match=r"^kernel_path: '~/gone' is not a folder \(.*/gone does not exist\)$"):
        plugins.with_kernel_path(["kernel_path=[~/gone]"])
    (tmp_path / "file").touch()
    with pytest.raises(plugins.PluginError, match=r"is a file"):
        plugins.with_kernel_path([f"kernel_path={tmp_path / 'file'}"])


def test_the_readme_command_with_a_home_kernel_path_runs_from_any_folder(tmp_path):
    """The README's `python -m ablate -m kernel=my_kernel kernel_path=[~/kernels] ...` as printed,
    from a folder other than the checkout: it sweeps, and Hydra's logs go to the project's runs/,
    not to the working directory; a missing folder is one line, no traceback."""
    from ablate.tools import new_kernel

    home = tmp_path / "home"
    assert new_kernel.main(["my_kernel", str(home / "kernels")]) == 0
    env = {**os.environ, "HOME": str(home), "PYTHONPATH": str(ROOT),
           "MLFLOW_TRACKING_URI": f"sqlite:///{tmp_path / 'mlflow.db'}"}
    # the build is the means here: kept between sessions (a plugin outside the project is named
    # by its content, not its folder: ablate/build/compile.py, _digest)
    command = [sys.executable, "-m", "ablate", "-m", "kernel=my_kernel", "kernel_path=[~/kernels]",
               "pathology=glob(*)", "mode=static", "build.jobs=1", f"build.dir={kept_build_dir('scaffold_my_kernel')}"]
    proc = subprocess.run(command, cwd=home, env=env, capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    # its own pathology and the base, and the 8 generic ones: none failed (some may not apply)
    assert re.search(r"\b10 jobs: \d+ ok, 0 failed", proc.stdout + proc.stderr), proc.stdout + proc.stderr
    assert sorted(p.name for p in home.iterdir()) == ["kernels"]  # no runs/hydra here
    proc = subprocess.run([*command[:5], "kernel_path=[~/gone]", *command[6:]], cwd=home, env=env,
                          capture_output=True, text=True, timeout=300)
    assert proc.returncode == 1 and "Traceback" not in proc.stderr
    assert proc.stderr.strip() == f"ablate: kernel_path: '~/gone' is not a folder ({home}/gone does not exist)"


@pytest.mark.parametrize("tool", ["benchmark", "sanitize"])
def test_the_tools_find_a_plugin_on_the_kernel_path(tool, tmp_path, monkeypatch):
    """`ablate benchmark|sanitize --kernel X --kernel-path DIR` (or --override kernel_path=[DIR])
    finds a plugin outside the project; a missing folder is one line."""
    from ablate.tools import new_kernel

    assert new_kernel.main(["far_kernel", str(tmp_path / "kernels")]) == 0
    monkeypatch.setenv("HOME", str(tmp_path))
    monkeypatch.chdir(tmp_path)
    plugin, dirs, rest = plugins.tool_kernel("far_kernel", ["kernels"], ["bench.samples=3"])
    assert plugin.dir == tmp_path / "kernels" / "far_kernel" and dirs == [str(tmp_path / "kernels")]
    assert rest == ["bench.samples=3"]
    assert plugins.tool_kernel("far_kernel", [], ["kernel_path=[~/kernels]"])[1] == dirs
    cfg = plugins.compose("far_kernel", ["pathology=none"], dirs)
    assert list(cfg.kernel_path) == dirs and cfg.kernel.name == "far_kernel"
    module = __import__(f"ablate.tools.{tool}", fromlist=["main"])
    with pytest.raises(SystemExit, match=r"--kernel-path: 'nowhere' is not a folder"):
        module.main(["--kernel", "far_kernel", "--kernel-path", "nowhere"])
    import torch

    if torch.cuda.is_available():
        return
    with pytest.raises(SystemExit) as e:  # found: it stops later, at the GPU it needs
        module.main(["--kernel", "far_kernel", "--kernel-path", "~/kernels", "--sanitizer", "/bin/true"]
                    if tool == "sanitize" else ["--kernel", "far_kernel", "--kernel-path", "~/kernels"])
    assert "unknown kernel" not in str(e.value) and "GPU" in str(e.value)


def test_help_says_how_to_pick_a_kernel_static_mode_and_a_kernel_path():
    """`ablate --help` lists the default kernel's groups: it says so, names the other kernels,
    and says how to pick one, how to run without a GPU and where plugins of one's own go."""
    run = lambda *a: subprocess.run([sys.executable, "-m", "ablate", *a, "--help"], cwd=ROOT,  # noqa: E731
                                    capture_output=True, text=True, timeout=300)
    text = run().stdout
    for needle in ("kernel=NAME", "attention, attention_hopper, cutlass_gemm, fla_l2norm, liger_dyt, liger_rmsnorm, matmul_triton, quack_rmsnorm, rmsnorm", "the groups below are attention's",
                   "kernel=NAME --help", "kernel_path=[DIR,...]", "ABLATE_KERNEL_PATH", "mode=static",
                   "new-kernel NAME DIR", "pathology: divergent_branches"):
        assert needle in text, needle
    text = run("kernel=rmsnorm").stdout
    assert "the groups below are rmsnorm's" in text and "pathology: atomic_reduce" in text


def test_the_sanitizer_builds_none_of_what_the_kernel_declares_not_applicable(tmp_path, monkeypatch):
    """kernel.not_applicable: a sweep never builds those pathologies, nor may the sanitizer
    (cutlass_gemm's regs_capped kept ptxas busy for minutes before it failed, and the sanitizer
    waited on it before it ran anything)."""
    from ablate.build import compile as compile_mod
    from ablate.tools import new_kernel, sanitize

    assert new_kernel.main(["far_kernel", str(tmp_path / "kernels")]) == 0
    yaml = tmp_path / "kernels" / "far_kernel" / "conf" / "kernel" / "far_kernel.yaml"
    yaml.write_text(yaml.read_text() + "  not_applicable:\n    regs_capped: its registers are the test's\n")
    asked = []
    from types import SimpleNamespace

    monkeypatch.setattr(compile_mod, "build", lambda variants, *a: asked.extend(v.name for v in variants) or
                        {v.name: SimpleNamespace(ok=True, name=f"built {v.name}") for v in variants})
    plugin, dirs, _ = plugins.tool_kernel("far_kernel", [str(tmp_path / "kernels")], [])
    _, builds, declared = sanitize.build_pathologies(plugin, ["none", "regs_capped", "scalar_loads"], (), dirs)
    assert declared == {"regs_capped": "its registers are the test's"}
    assert sorted(builds) == ["none", "scalar_loads"]
    assert not any("regs_capped" in name for name in asked) and any("scalar_loads" in name for name in asked)


def test_the_sanitizer_reports_a_drivers_exception_not_its_frames():
    from ablate.tools.sanitize import findings

    output = ("========= COMPUTE-SANITIZER\nTraceback (most recent call last):\n  File \"x.py\", line 3, in <module>\n"
              "    main()\ntriton.runtime.errors.OutOfResources: out of resource: shared memory, Required: 327680\n"
              "========= Target application returned an error\n========= ERROR SUMMARY: 0 errors\n")
    assert findings(1, output) == ["========= Target application returned an error",
                                   "triton.runtime.errors.OutOfResources: out of resource: shared memory, Required: 327680"]


def test_the_sanitizer_runs_a_pathology_at_no_shape_the_spec_says_it_does_not_apply_at():
    """A seam of cutlass_gemm's large configuration alone has the base's code where another
    configuration runs: on a build of large (the default shape's, every pathology's in the
    sanitizer) it runs at every shape; on another configuration, at none."""
    from ablate.tools import sanitize

    plugin, _, _ = plugins.tool_kernel("cutlass_gemm", [], [])
    shapes = [plugin.spec.validate_shape(dict(s)) for s in plugin.spec.SANITIZE_SHAPES]
    assert sanitize.not_run_at(plugin, "no_launch_bounds", shapes) == {}  # the spec's answer alone: it applies
    assert sanitize.not_run_at(plugin, "cluster_2x1", shapes, candidate="large") == {}
    assert sorted(sanitize.not_run_at(plugin, "cluster_2x1", shapes, candidate="swap_n64")) == list(range(len(shapes)))
    defaults = [plugin.spec.DEFAULT_CANDIDATE(s) for s in shapes]
    assert sorted(sanitize.not_run_at(plugin, "cluster_2x1", shapes)) == [i for i, c in enumerate(defaults) if c != "large"]
    assert sanitize.not_run_at(plugin, "none", shapes) == {} == sanitize.not_run_at(plugin, "two_stages", shapes)
    assert sanitize.not_run_at(plugin, "none@swap_n64", shapes) == {}


def test_the_sanitizer_runs_the_shapes_its_globs_name_and_refuses_one_that_names_none():
    from ablate.tools import sanitize

    plugin, _, _ = plugins.tool_kernel("cutlass_gemm", [], [])
    every = sanitize.chosen_shapes(plugin, None)
    assert len(every) == len(plugin.spec.SANITIZE_SHAPES)
    chosen = sanitize.chosen_shapes(plugin, "m=9 *,m=133 * bf16")
    assert [(s["m"], s["n"], s["dtype"]) for s in chosen] == [(9, 264, "fp16"), (133, 1352, "bf16")]
    with pytest.raises(SystemExit, match=r"--shapes: 'm=38 \*' matches no sanitizer shape of cutlass_gemm; its shapes: m=9 n=264"):
        sanitize.chosen_shapes(plugin, "m=9 *,m=38 *")


def test_the_sanitizer_runs_no_neighbour_the_arch_cannot_launch():
    """A tunable's neighbour over the arch's shared memory a block (matmul_triton's 256 x 256
    tiles: BLOCK_M doubled) is not applicable, as in a sweep, with why; it was a sanitizer
    'error' (the driver's launch refused) on the H100."""
    from ablate.tools import sanitize

    plugin, dirs, _ = plugins.tool_kernel("matmul_triton", [], [])
    _, builds, declared = sanitize.build_pathologies(plugin, ["none", "tune_block_m_256", "tune_block_m_64"], (), dirs)
    assert sorted(builds) == ["none", "tune_block_m_64"]
    assert "cannot launch on sm_90" in declared["tune_block_m_256"] and "shared memory" in declared["tune_block_m_256"]


def test_the_sanitizer_runs_no_neighbour_that_does_not_compile():
    """A tunable's neighbour that does not compile (quack_rmsnorm's 64 threads a block at hidden
    8192) is not applicable, as in a sweep; the H200's sanitizer listed it as 'errors (build)'."""
    pytest.importorskip("cutlass", reason="nvidia-cutlass-dsl is not installed (pip install -e '.[cute]')")
    from ablate.tools import sanitize

    plugin, dirs, _ = plugins.tool_kernel("quack_rmsnorm", [], [])
    _, builds, declared = sanitize.build_pathologies(plugin, ["none", "tune_num_threads_64"], (), dirs)
    assert sorted(builds) == ["none"]
    assert declared["tune_num_threads_64"].startswith("this neighbour does not compile (log: ")
