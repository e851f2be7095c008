"""A kernel's tunables and their generated neighbours (ablate/job/tunables.py): the rules, the
pathologies Hydra sees (`pathology=glob(tune_*)`), and the mis-tuned fixture's neighbourhood
built and fingerprinted without a GPU (tests/fixtures/plugins/mistuned)."""
import os
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace

import pytest
import yaml

from ablate.job import plugins, tunables
from ablate.job.variant import variant_from_cfg
from conftest import kept_build_dir

ROOT = Path(__file__).resolve().parents[1]
FIXTURES = ROOT / "tests" / "fixtures" / "plugins"


@pytest.fixture
def mistuned(monkeypatch):
    monkeypatch.setenv(plugins.PATH_ENV, str(FIXTURES))
    return plugins.load("mistuned")


def test_the_neighbours_of_each_kind_of_tunable():
    assert tunables.neighbours("BLOCK_M", 128) == [64, 256]          # a power of two: halved, doubled
    assert tunables.neighbours("num_warps", 1) == [2]                # never below 1
    assert tunables.neighbours("num_stages", 3) == [2, 4]            # stages: one fewer, one more
    assert tunables.neighbours("num_stages", 1) == [2]
    assert tunables.neighbours("NUM_SMS", 132) == []                 # not a power of two: none unless declared
    assert tunables.neighbours("USE_TMA", True) == []                # a flag is an ablation, not a tunable
    assert tunables.neighbours("BM", 128, (64, 128, 256)) == [64, 256]  # declared: the adjacent values
    assert tunables.neighbours("BM", 64, (256, 64, 128)) == [128]       # at an end: one side
    with pytest.raises(tunables.TunableError, match="base value 96"):
        tunables.neighbours("BM", 96, (64, 128))


def test_matmul_triton_gets_its_meta_neighbourhood_as_pathologies_hydra_globs():
    plugin = plugins.load("matmul_triton")
    found = tunables.pathologies(plugin)
    assert set(found) == {f"tune_{n}" for n in (
        "block_m_64", "block_m_256", "block_n_128", "block_n_512", "block_k_32", "block_k_128",
        "group_m_4", "group_m_16", "num_warps_4", "num_warps_16", "num_stages_2", "num_stages_4")}
    assert found["tune_block_m_256"]["meta"] == {"BLOCK_M": 256}
    assert found["tune_block_m_256"]["tuned"] == {"name": "BLOCK_M", "base": 128, "value": 256}
    assert set(found) <= set(plugin.options("pathology"))
    # Hydra composes one from the generated folder, and it becomes a variant of that one override
    cfg = plugins.compose("matmul_triton", ["pathology=tune_num_warps_4", "mode=static"])
    variant = variant_from_cfg(cfg.pathology, plugin.dir)
    assert variant.meta == {"num_warps": 4} and variant.generic == ("tune_num_warps_4",)
    assert variant.seam_of("tune_num_warps_4") == "generic.tune_num_warps"  # never paired with its twin


def test_a_cuda_kernel_declares_tunables_read_from_its_source_defaults():
    plugin = plugins.load("rmsnorm")
    assert tunables.base_values(plugin) == {"RMSNORM_VECS": (4, (1, 2, 4, 8)),
                                            "RMSNORM_THREADS": (256, (128, 256, 512)),
                                            "RMSNORM_FEW_ROWS_VECS": (1, (1, 2, 4))}
    found = tunables.pathologies(plugin)
    assert sorted(found) == ["tune_rmsnorm_few_rows_vecs_2", "tune_rmsnorm_threads_128", "tune_rmsnorm_threads_512",
                             "tune_rmsnorm_vecs_2", "tune_rmsnorm_vecs_8"]
    variant = variant_from_cfg({"tune_rmsnorm_vecs_8": found["tune_rmsnorm_vecs_8"]}, plugin.dir)
    assert variant.macros == {"RMSNORM_VECS": "8"}  # -DRMSNORM_VECS=8: a TUNABLES name needs no ABLATE_ prefix
    # ... but only the tunable's own: any other unprefixed macro is still refused
    with pytest.raises(ValueError, match="macro name 'OTHER'"):
        variant_from_cfg({"tune_x": {**found["tune_rmsnorm_vecs_8"], "macros": {"OTHER": 1}}}, plugin.dir)


def test_bad_tunables_are_one_line_errors_naming_the_kernel_and_name(tmp_path):
    spec = SimpleNamespace(TUNABLES={"BM": (64, 128)})
    plugin = SimpleNamespace(name="k", dir=tmp_path, spec=spec, language="cuda")
    (tmp_path / "k.cu").write_text("#ifndef BN\n#define BN 64\n#endif\n")
    with pytest.raises(tunables.TunableError, match="kernel 'k': TUNABLES names 'BM', but no source"):
        tunables.base_values(plugin)
    spec.TUNABLES = {"BM": 128}
    with pytest.raises(tunables.TunableError, match=r"TUNABLES\['BM'\] must be a tuple"):
        tunables.base_values(plugin)


def test_extra_configurations_join_the_neighbours_as_whole_configs(mistuned):
    """The seam for a kernel's own list (an autotuner's configs as dicts)."""
    found = tunables.pathologies(mistuned, extra=[{"BLOCK": 32, "num_warps": 1},   # the base: left out
                                                 {"BLOCK": 128, "num_warps": 4}])
    assert "tune_config_0" not in found
    assert found["tune_config_1"]["meta"] == {"BLOCK": 128, "num_warps": 4}
    with pytest.raises(tunables.TunableError, match=r"names \['NOPE'\]"):
        tunables.pathologies(mistuned, extra=[{"NOPE": 1}])


def test_an_autotuned_kernels_own_configs_are_its_whole_config_neighbours(monkeypatch):
    """@triton.autotune's configs reach the neighbourhood with no TUNE_CONFIGS in the spec: the
    first is the static base (left out), the other two are tune_config_1 and tune_config_2."""
    monkeypatch.setenv(plugins.PATH_ENV, str(FIXTURES))
    tuned = plugins.load("tuned_axpy")
    assert tuned.spec.TUNE_CONFIGS[1] == {"BLOCK": 2048, "num_warps": 8, "num_stages": 3}
    found = tunables.pathologies(tuned)
    assert "tune_config_0" not in found
    assert found["tune_config_1"]["meta"] == {"BLOCK": 2048, "num_warps": 8}
    assert found["tune_config_2"]["meta"] == {"BLOCK": 512, "num_stages": 2, "num_warps": 2}


def test_the_generated_folder_is_written_once_per_content_outside_the_checkout(mistuned):
    folder = mistuned.tunables
    assert not folder.is_relative_to(ROOT)
    files = sorted(p.name for p in (folder / "pathology").glob("*.yaml"))
    assert files == ["tune_block_16.yaml", "tune_block_64.yaml", "tune_num_stages_2.yaml", "tune_num_warps_2.yaml"]
    text = yaml.safe_load((folder / "pathology" / "tune_block_64.yaml").read_text())
    assert text["tune_block_64"]["meta"] == {"BLOCK": 64}
    assert tunables.write(mistuned) == folder  # the same content, the same folder


def test_over_limits_makes_a_neighbour_that_cannot_launch_not_applicable():
    from ablate.pipeline import over_limits

    tuned = SimpleNamespace(pathologies=("tune_block_m_256",), specs={"tune_block_m_256": {"tuned": {"name": "x"}}})
    var = SimpleNamespace(arch="sm_90", ptxas={"kernels": {"k": {"smem_bytes": 0}}})
    big = {"configs": [{"name": "fp16", "smem_bytes": 300 * 1024, "threads": 256}]}
    assert "needs 307200 bytes of shared memory a block, the arch allows 232448" in over_limits(tuned, var, big)
    assert over_limits(tuned, var, {"configs": [{"name": "fp16", "smem_bytes": 1024, "threads": 256}]}) is None
    own = SimpleNamespace(pathologies=("no_tma",), specs={"no_tma": {}})
    assert over_limits(own, var, big) is None  # a hand-written pathology is the kernel's to answer for


def static_sweep(tmp_path, *overrides):
    env = {**os.environ, "MLFLOW_TRACKING_URI": f"sqlite:///{tmp_path / 'mlflow.db'}"}
    return subprocess.run(
        [sys.executable, "-m", "ablate", "-m", "kernel=mistuned", f"kernel_path=[{FIXTURES}]", "mode=static",
         *overrides, f"build.dir={kept_build_dir('mistuned')}", f"hydra.sweep.dir={tmp_path / 'multirun'}"],
        cwd=ROOT, env=env, capture_output=True, text=True, timeout=900)


def test_the_mistuned_fixtures_neighbourhood_builds_and_fingerprints_without_a_gpu(tmp_path):
    pytest.importorskip("triton")
    proc = static_sweep(tmp_path, "pathology=glob(tune_*)")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    from mlflow import MlflowClient

    client = MlflowClient(f"sqlite:///{tmp_path / 'mlflow.db'}")
    exp = client.get_experiment_by_name("mistuned")
    jobs = {r.data.params["pathology"]: r for r in client.search_runs([exp.experiment_id])
            if r.data.tags.get("kind") == "job"}
    assert sorted(jobs) == ["tune_block_16", "tune_block_64", "tune_num_stages_2", "tune_num_warps_2"]
    for name in ("tune_block_16", "tune_block_64", "tune_num_warps_2"):  # built, its machine code not the base's
        run = jobs[name]
        assert run.data.tags["status"] == "static", (name, run.data.tags.get("error"))
        assert run.data.metrics["fingerprint_ok"] == 1, name
    assert jobs["tune_block_64"].data.params["overrides"] == "BLOCK=64"  # from the manifests' effective meta
    assert jobs["tune_block_64"].data.metrics["sass.ldg_64"] == 1  # two elements a thread: 64-bit loads
    assert jobs["tune_block_16"].data.metrics["sass.ldg_32"] == 1
    assert jobs["tune_num_warps_2"].data.metrics["threads_per_block"] == 64
    assert '"value": 64' in jobs["tune_block_64"].data.params["tuned"]
    # no loop to pipeline: num_stages 2 compiles to the base's machine code, not applicable with why
    stages = jobs["tune_num_stages_2"]
    assert stages.data.tags["status"] == "not_applicable"
    assert "num_stages = 2 compiles to the base's machine code" in stages.data.tags["error"]


def test_matmul_tritons_neighbourhood_builds_for_sm_90_each_changed_or_not_applicable_with_why():
    """The shipped Triton kernel's twelve neighbours, static (the kept Triton build folder,
    shared with tests/test_triton.py): each builds and changes the machine code, or is not
    applicable with a reason (BLOCK_N = 512 needs more shared memory than a block may have)."""
    pytest.importorskip("triton")
    from ablate.job.job import make_job
    from ablate.pipeline import run_job

    names = sorted(tunables.pathologies(plugins.load("matmul_triton")))
    outcomes = {}
    for name in names:
        cfg = plugins.compose("matmul_triton", [f"pathology={name}", "mode=static", "build.arch=sm_90",
                                                f"build.dir={kept_build_dir('triton')}"])
        outcomes[name] = run_job(make_job(cfg))
    for name, r in outcomes.items():
        assert r.status in ("static", "not_applicable"), (name, r.status, r.error)
        if r.status == "static":
            assert r.error is None and r.metrics["fingerprint_ok"] == 1, (name, r.error)
        else:
            assert r.error.startswith("not applicable"), (name, r.error)
    assert outcomes["tune_block_n_512"].status == "not_applicable"
    assert "bytes of shared memory a block, the arch allows 232448" in outcomes["tune_block_n_512"].error
    assert outcomes["tune_num_warps_4"].metrics["fp16.threads_per_block"] == 128
    assert outcomes["tune_num_warps_4"].params["overrides"] == "num_warps=4"


def test_a_neighbour_that_does_not_compile_is_not_applicable_with_why(tmp_path):
    """The fixture declaring BLOCK's values (a Triton spec's TUNABLES overrides the META rule):
    BLOCK = 24 is no power of two, which tl.arange refuses at compile time."""
    pytest.importorskip("triton")
    import shutil

    from ablate.job.job import make_job
    from ablate.pipeline import run_job

    where = tmp_path / "kernels"
    shutil.copytree(FIXTURES / "mistuned", where / "mistuned", ignore=shutil.ignore_patterns("__pycache__"))
    spec = where / "mistuned" / "spec.py"
    spec.write_text(spec.read_text() + '\nTUNABLES = {"BLOCK": (24, 32, 64)}\n')
    cfg = plugins.compose("mistuned", ["pathology=tune_block_24", "mode=static", f"build.dir={tmp_path / 'build'}",
                                       "build.arch=sm_90"], kernel_path=[str(where)])
    result = run_job(make_job(cfg))
    assert result.status == "not_applicable", (result.status, result.error)
    assert result.error.startswith("not applicable: this neighbour does not compile: the variant (tune_block_24)")
    assert result.params["not_applicable"] == "does not compile"


def test_a_neighbour_that_cannot_run_is_not_applicable_a_pathology_that_crashes_stays_crashed(mistuned, monkeypatch):
    """A launch the GPU refuses (a crash of the job's GPU half) makes a neighbour not
    applicable, with the GPU's words; the kernel's own pathology keeps its crash."""
    pytest.importorskip("triton")
    from ablate import pipeline
    from ablate.job.job import make_job
    from ablate.job.result import Result

    monkeypatch.setattr(pipeline, "effective_mode", lambda mode, plugin=None: "gpu")
    monkeypatch.setattr(pipeline, "gpu_job", lambda *a: Result("crashed", error="CUDA error: too many resources"))
    outcomes = {}
    for name in ("tune_block_64", "half_sms"):
        cfg = plugins.compose("mistuned", [f"pathology={name}", "build.arch=sm_90",
                                           f"build.dir={kept_build_dir('mistuned')}"], kernel_path=[str(FIXTURES)])
        outcomes[name] = pipeline.run_job(make_job(cfg))
    tuned = outcomes["tune_block_64"]
    assert tuned.status == "not_applicable" and tuned.params["not_applicable"] == "cannot launch"
    assert tuned.error == "not applicable: this neighbour could not run: CUDA error: too many resources"
    assert outcomes["half_sms"].status == "crashed"  # not a neighbour: its crash is a finding of its own


def test_a_process_that_does_not_see_the_generated_folder_writes_it_again(mistuned, monkeypatch, tmp_path):
    """A job on another machine gets the environment, not the submitting machine's temporary
    directory: the search-path plugin writes the same folder again from the spec."""
    import shutil

    from hydra_plugins.ablate_kernel import _tunables

    plugins.use(mistuned)
    folder = Path(os.environ[plugins.TUNABLES_ENV])
    shutil.rmtree(folder)
    assert _tunables(str(mistuned.conf)) == str(folder)  # what Hydra's search path gets in such a process
    assert (folder / "pathology" / "tune_block_64.yaml").is_file()
    shutil.rmtree(folder)
    cfg = plugins.compose("mistuned", ["pathology=tune_block_64"], kernel_path=[str(FIXTURES)])
    assert cfg.pathology.tune_block_64.meta == {"BLOCK": 64}
    assert (folder / "pathology" / "tune_block_64.yaml").is_file()
