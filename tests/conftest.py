"""Shared test set-up: the `gpu` marker (skipped without CUDA), the project root, MLflow
stores in temporary folders, so that no test ever writes to the real runs/mlflow.db, and the
session's build of every variant of every kernel (`built_kernels`; `built` is attention's),
kept in the build cache between sessions and checkouts, and shared by the test processes of one (`make
test` runs two, pytest-xdist: the second to need it waits on the build folder's lock while
the first compiles, then finds it built)."""
import os
import shutil
from pathlib import Path
from types import SimpleNamespace

import pytest
from omegaconf import OmegaConf

ROOT = Path(__file__).resolve().parents[1]
# A run's GPU worker ends with it (conf/config.yaml, keep_worker_s): the tests' many runs would
# otherwise each leave one waiting on the GPU. The tests of keeping it set their own.
os.environ["ABLATE_KEEP_WORKER_S"] = "0"
KERNELS = ("attention", "rmsnorm", "attention_hopper", "cutlass_gemm")
TEST_PATHOLOGIES = ["broken_build", "noop", "unfingerprinted"]  # tests/conf/pathology, attention's
# nvcc flags every variant of a kernel is built with here (build.flags, so that a launch-only
# variant still builds the base's code), where the whole build would be most of the CI's time:
# cutlass_gemm's pathologies and its base are compiled with the FP16 instances alone (the BF16
# ones are the same templates on another element type). A build that names no shape compiles one
# configuration, large (spec.CANDIDATES: the kernel's FORCE_MACRO unset), which every fingerprint
# names. Its base is also built whole (`whole`), after them, for the tests of its instances.
# Measured on the 2-core CPU (2026-11-28, nvcc 13.0, one compile at a time, the table's ~20
# configurations in one unit then): a whole build 423 s (cicc 303 s), FP16 alone 359 s, the
# headers alone 83 s and one instance alone 140 s; one configuration in both types, as now, ~3
# minutes of a core and 3.6 GB (2026-12-02).
NARROWED = {"cutlass_gemm": ["-DABLATE_GEMM_FP16_ONLY=1"]}
# Variants not built here, and why: the calibrations are ablate's own header beside the kernel
# (attention's builds check them); in cutlass_gemm each is one more build of its templates.
NOT_BUILT = {"cutlass_gemm": {
    name: "a calibration (ablate/include/ablate/calibration_null.cuh beside the kernel): checked on "
          "attention's builds; here it would be one more ~3-minute build of CUTLASS's templates"
    for name in ("no_effect", "twice")}}


def cuda_available():
    try:
        import torch
    except ImportError:
        return False
    return torch.cuda.is_available()


def pytest_configure(config):
    config.addinivalue_line("markers", "gpu: needs a CUDA device; skipped where there is none")


# Modules whose tests wait most (a SLURM task killed, scancel, each tens of seconds of waiting on
# the scheduler): run first, so that under `-n 2` their waits overlap the other process's work
# instead of closing the run with one process idle. Only the order changes.
WAIT_FIRST = ("test_slurm.py",)


def pytest_collection_modifyitems(config, items):
    items.sort(key=lambda item: 0 if item.path.name in WAIT_FIRST else 1)  # stable: the rest keep their order
    gpu_items = [item for item in items if "gpu" in item.keywords]
    if not gpu_items or cuda_available():
        return
    skip = pytest.mark.skip(reason="needs a CUDA device (torch.cuda.is_available() is false or torch is missing)")
    for item in gpu_items:
        item.add_marker(skip)


@pytest.fixture(scope="session")
def project_root():
    return ROOT


@pytest.fixture(scope="session", autouse=True)
def _no_writes_to_the_real_store(tmp_path_factory):
    """Every test (and every process it starts) logs to a throwaway store unless it picks
    its own: the user's recorded runs are never touched by the test suite."""
    with pytest.MonkeyPatch.context() as mp:
        uri = f"sqlite:///{tmp_path_factory.mktemp('mlflow') / 'mlflow.db'}"
        mp.setenv("MLFLOW_TRACKING_URI", uri)
        yield uri


@pytest.fixture(scope="session")
def empty_store(tmp_path_factory):
    """make(path) -> the URI of a new, empty MLflow sqlite store at `path`: a copy of one made
    once per test process. MLflow makes a new store's schema by running each of its migrations
    in turn (~1.3 s of CPU on the 2-core machine), which every test's store would repeat; the
    copy is the file a new store is. A test of how a store comes to be makes its own."""
    made = {}

    def make(path):
        if "file" not in made:
            from mlflow import MlflowClient

            made["file"] = tmp_path_factory.mktemp("empty_store") / "mlflow.db"
            MlflowClient(f"sqlite:///{made['file']}").search_experiments()  # the schema, made
        path = Path(path)
        path.parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(made["file"], path)
        return f"sqlite:///{path}"
    return make


@pytest.fixture
def mlflow_store(tmp_path, monkeypatch, empty_store):
    """A fresh, empty MLflow store for one test: its tracking URI (also set as MLFLOW_TRACKING_URI)."""
    uri = empty_store(tmp_path / "mlflow.db")
    monkeypatch.setenv("MLFLOW_TRACKING_URI", uri)
    return uri


_session = {}


BUILD_DIR_ENV = "ABLATE_TEST_BUILD_DIR"
CALLS_ENV = "ABLATE_TEST_NVCC_CALLS"


def session_build_dir() -> Path:
    """Where the session builds every variant: kept from one run of the tests to the next,
    and shared by every checkout on this machine (`tests/` of the build cache,
    ablate/build/cache.py; or ABLATE_TEST_BUILD_DIR), since a library is named by the hash of
    what goes into it, paths relative to the project root, and rebuilt when a file outside
    the hash that its depfile names changes, as in every sweep (ablate/build/compile.py).
    The first run on a machine compiles all ~80 (~520 s on 2 cores: docs/benchmarks.md,
    "Sweep speed"); the next, in this checkout or a fresh clone, only what changed.
    `ablate cache clear` empties it."""
    from ablate.build import cache

    return Path(os.environ.get(BUILD_DIR_ENV) or cache.root() / "tests")


def kept_build_dir(name: str) -> Path:
    """A build folder of its own for one test, kept between sessions beside the session's
    build (session_build_dir()/kept/<name>): for a test whose build is the means, not what it
    checks (a sweep whose records it reads, a library whose report it reads), so that a later
    run compiles only what changed, as the session's build does. A test of the build itself
    (what is compiled, when, its failures) builds into its own tmp_path."""
    return session_build_dir() / "kept" / name


def module_at(path: Path, name: str):
    """The Python file at `path` imported as a module named `name` (a tool under tools/, a test
    file's cases), without putting its folder on sys.path."""
    import importlib.util

    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def tool(name: str):
    """tools/<name>.py as a module."""
    return module_at(ROOT / "tools" / f"{name}.py", name)


def lock_state(folder: Path) -> str:
    """"held" where another open file holds the build folder's lock (`folder`/.lock: a build
    reading its results), "free" where it can be taken at once: the probe of the tests that
    check a build reads its results under that lock."""
    import fcntl

    fd = os.open(folder / ".lock", os.O_RDONLY)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        return "free"
    except BlockingIOError:
        return "held"
    finally:
        os.close(fd)


def _nvcc_wrapper(folder: Path) -> Path:
    """nvcc through a script that counts this session's compiles (into the file CALLS_ENV
    names: per session, so that sessions sharing the build dir count their own); the same
    path and text every session, so that the compile commands, and the libraries' names,
    are too."""
    nvcc = folder / "nvcc"
    text = ("#!/bin/sh\n"
            f'case " $* " in *" --version "*) ;; *) [ -n "${CALLS_ENV}" ] && echo "$*" >> "${CALLS_ENV}" ;; esac\n'
            f'exec "{shutil.which("nvcc")}" "$@"\n')
    if not nvcc.is_file() or nvcc.read_text() != text:
        tmp = nvcc.with_suffix(f".{os.getpid()}.tmp")
        tmp.write_text(text)
        tmp.chmod(0o755)
        tmp.replace(nvcc)
    return nvcc


def every_variant(tmp_path_factory):
    """{kernel: its build}: the base, every pathology and every calibration of each kernel
    (with the kernel's NARROWED flags; `whole`: its base without them), and attention's
    test-only ones, built once per session (into session_build_dir, kept
    between sessions) through one nvcc wrapper, which counts this session's compiles."""
    from ablate.job import plugins
    from ablate.build.compile import build
    from ablate.job.variant import Variant, VariantError, variant_from_cfg

    if "built" not in _session:
        base = session_build_dir()
        base.mkdir(parents=True, exist_ok=True)
        calls = tmp_path_factory.mktemp("every_variant") / "nvcc_calls"
        calls.touch()
        os.environ[CALLS_ENV] = str(calls)
        nvcc = _nvcc_wrapper(base)
        cfg = OmegaConf.load(ROOT / "conf" / "config.yaml")
        # As many compiles at once as cores (ninja's default is 2 more), fewer where the memory
        # available does not hold them (ablate.build.compile: cutlass_gemm's spec.BUILD_MEMORY_GIB;
        # a CI machine of 2 cores has 23 GiB).
        build_cfg = OmegaConf.merge(cfg.build, {"dir": str(base / "build"), "arch": "sm_90",
                                                "nvcc": str(nvcc), "jobs": os.cpu_count() or 1})
        _session["built"] = {}
        for kernel in KERNELS:
            plugin = plugins.load(kernel)
            # the yaml each name composes from (the kernel's, ablate's or a generic one), but not
            # the generic pathologies the kernel declares not applicable (nothing builds them)
            declared = OmegaConf.load(plugin.conf / "kernel" / f"{kernel}.yaml").kernel.get("not_applicable") or {}
            files = [plugin.config_file(group, n) for group in ("pathology", "calibration")
                     for n in plugin.options(group) if n not in declared and n not in NOT_BUILT.get(kernel, {})]
            if kernel == "attention":
                files += [ROOT / "tests" / "conf" / "pathology" / f"{n}.yaml" for n in TEST_PATHOLOGIES]
            variants, errors = {}, {}
            for f in files:  # a bad yaml fails its own tests, not everyone's
                try:
                    variant = variant_from_cfg(OmegaConf.load(f), plugin.dir)
                except VariantError as err:
                    errors[f.stem] = err
                    continue
                variants[variant.name] = variant
            narrowed = NARROWED.get(kernel, [])
            kernel_cfg = OmegaConf.merge(build_cfg, {"flags": list(build_cfg.flags) + narrowed})
            results = build(list(variants.values()), kernel_cfg, plugin, ROOT)
            # after, not beside: a third compile of CUTLASS's templates at once (~4.7 GB each) was
            # killed for memory on the 2-core machine (2026-11-28)
            whole = build([Variant("none", ())], build_cfg, plugin, ROOT)["none"] if narrowed else results["none"]
            _session["built"][kernel] = SimpleNamespace(
                plugin=plugin, variants=variants, errors=errors, results=results, whole=whole,
                build_cfg=kernel_cfg, nvcc_calls=calls, sass=_sass_reader(results))
    return _session["built"]


def _sass_reader(results):
    from ablate.build import sass

    reports = {}

    def sass_of(name):  # cuobjdump once per library
        if name not in reports:
            reports[name] = sass.read(results[name].lib)
        return reports[name]
    return sass_of


def composed_again_untimed(cfg, monkeypatch):
    """The job of `cfg` composed a second time with the GPU worker made to fail the test: the
    record the first job kept (an autotuner's pick, or the fastest of a kernel's candidates) is
    read back, nothing tuned or timed twice."""
    import ablate.gpu.pool as pool
    from ablate.pipeline import job_of

    monkeypatch.setattr(pool, "run_worker", lambda spec, t: pytest.fail("tuned or timed twice"))
    again = job_of(cfg)
    monkeypatch.undo()
    return again


def loaded_pathologies(kernel, names):
    """{pathology name: the variant loaded to run} (a Kernel, or a TritonKernel for a Triton
    plugin): each of `names` composed and built as the sanitizer builds them (one build, into
    the project's build folder, which a sweep run before has filled); a variant that fails to
    build fails the test that asked, with its log. Those no sweep builds are missing:
    built_pathologies says why."""
    return built_pathologies(kernel, names)[0]


def built_pathologies(kernel, names):
    """(loaded_pathologies' dict, {pathology name: why no sweep builds it}) from one build."""
    from ablate.build.library import load
    from ablate.job import plugins
    from ablate.tools.sanitize import build_pathologies

    plugin = plugins.load(kernel)
    _, results, declared = build_pathologies(plugin, names)
    for name, result in results.items():
        assert result.ok, f"{name} failed to build:\n{result.log}"
    return {name: load(result.lib, plugin.spec) for name, result in results.items()}, declared


@pytest.fixture(scope="session")
def built_kernels(tmp_path_factory):
    return every_variant(tmp_path_factory)


@pytest.fixture(scope="session")
def built(built_kernels):
    return built_kernels["attention"]


def synthetic_job(cfg):
    """The Job of a config smaller than the app's (the tracking and rank tests write such
    configs: a kernel, a shape's name, pathologies of macros alone), as make_job would work
    it out for the fields it has."""
    from ablate.job import plugins
    from ablate.job.job import Job
    from ablate.job.variant import variant_from_cfg

    plugin = plugins.load(str(cfg.kernel.name))
    variant, base = (variant_from_cfg(p, plugin.dir) for p in (cfg.pathology, {"none": None}))
    shape = OmegaConf.to_container(cfg.shape, resolve=True)
    return Job(plugin=plugin, shape=shape, shape_name=str(shape.get("name")), variant=variant, base=base,
               peers=(), bench={"min_effect": OmegaConf.select(cfg, "bench.min_effect", default=None)},
               mode=str(cfg.mode), kernel_counters=(), cfg=cfg)


def log_cfg(cfg, result, parent=None):
    """tracking.log_job of such a config's Job and a result given as a dict or a Result."""
    from ablate.job.result import Result
    from ablate.sweep import tracking

    return tracking.log_job(synthetic_job(cfg), Result.from_dict(result) if isinstance(result, dict) else result,
                            parent)


def fake_gpus(tmp_path, monkeypatch, listing):
    """nvidia-smi lists `listing` ("index, uuid, name" lines), the GPU locks live in tmp_path,
    and nothing narrows the choice (CUDA_VISIBLE_DEVICES unset)."""
    from ablate.gpu import gpus

    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    smi = bin_dir / "nvidia-smi"
    smi.write_text("#!/bin/sh\ncat <<'EOF'\n" + listing + "EOF\n")
    smi.chmod(0o755)
    monkeypatch.setenv("PATH", f"{bin_dir}{os.pathsep}{os.environ['PATH']}")
    monkeypatch.setenv(gpus.LOCK_DIR_ENV, str(tmp_path / "locks"))
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
