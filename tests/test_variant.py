"""Variants from `cfg.pathology`: validation, naming, and the expansion of a Hydra sweep into
the variants its jobs will build (checked against the jobs of a real `-m` run)."""
import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
from hydra import initialize_config_dir
from hydra.core.global_hydra import GlobalHydra
from hydra.types import RunMode
from omegaconf import OmegaConf

from ablate.job import plugins
from ablate.job.variant import VariantError, variant_from_cfg
from ablate.sweep.design import jobs_of_sweep, variants_of_sweep

ROOT = Path(__file__).resolve().parents[1]
CONF = ROOT / "conf"
ATTENTION = plugins.load("attention")
KERNEL_DIR = ATTENTION.dir
PATHOLOGIES = ATTENTION.options("pathology")
TEST_CONF = ROOT / "tests" / "conf"


@pytest.mark.parametrize("name", PATHOLOGIES)
def test_every_pathology_composes_into_a_variant(name):
    cfg = plugins.compose("attention", [f"pathology={name}"])
    variant = variant_from_cfg(cfg.pathology, KERNEL_DIR)
    assert variant.name == name
    if name == "none":
        assert variant.is_base and variant.pathologies == () and variant.macros == {}
        assert variant.headers == () and variant.specs == {}
    elif variant.generic:  # conf/generic/: ablate's headers, flags, a cap, a transform or the launch
        assert variant.pathologies == (name,) and variant.macros == {}
        assert all((ROOT / h).is_file() for h in variant.headers)
    else:
        assert variant.pathologies == (name,)
        assert variant.macros == {f"ABLATE_{name.upper()}": "1"}
        assert all((ROOT / h).is_file() for h in variant.headers)
        assert variant.specs[name] == OmegaConf.to_container(cfg.pathology[name])


def test_combined_pathologies_make_one_variant():
    cfg = plugins.compose("attention", ["pathology=[no_swizzle,fp32_accum,none]"])
    variant = variant_from_cfg(cfg.pathology, KERNEL_DIR)
    assert variant.name == "fp32_accum+no_swizzle"
    assert variant.pathologies == ("fp32_accum", "no_swizzle")
    assert variant.macros == {"ABLATE_FP32_ACCUM": "1", "ABLATE_NO_SWIZZLE": "1"}
    assert variant.headers == ("kernels/attention/patches/fp32_accum.cuh",
                               "kernels/attention/patches/no_swizzle.cuh")
    assert set(variant.specs) == {"fp32_accum", "no_swizzle"}


def test_a_shared_header_and_macro_are_listed_once(tmp_path):
    (tmp_path / "p.cuh").touch()
    spec = {"header": "p.cuh", "macros": {"ABLATE_P": 1}}
    variant = variant_from_cfg({"a": spec, "b": dict(spec)}, tmp_path)
    # Outside this project: the absolute path reaches nvcc.
    assert variant.headers == (str(tmp_path / "p.cuh"),) and variant.macros == {"ABLATE_P": "1"}


@pytest.fixture
def project(tmp_path):
    (tmp_path / "patches").mkdir()
    (tmp_path / "patches" / "p.cuh").touch()
    (tmp_path / "patches" / "p.h").touch()
    (tmp_path / "outside.cuh").touch()
    root = tmp_path / "root"
    root.mkdir()
    (root / "patches").symlink_to(tmp_path / "patches")  # inside by path, outside for real
    (root / "ok").mkdir()
    (root / "ok" / "p.cuh").touch()
    return root


GOOD = {"header": "ok/p.cuh", "macros": {"ABLATE_P": 1}}


@pytest.mark.parametrize("cfg, message", [
    ({"Bad": GOOD}, "pathology name 'Bad' must match"),
    ({"9x": GOOD}, "pathology name '9x' must match"),
    ({"a-b": GOOD}, "pathology name 'a-b' must match"),
    ({"p": {**GOOD, "macros": {"P": 1}}}, "pathology 'p': macro name 'P' must match"),
    ({"p": {**GOOD, "macros": {"ABLATE_p": 1}}}, "pathology 'p': macro name 'ABLATE_p'"),
    ({"p": {**GOOD, "macros": {"ABLATE_P": "1;rm -rf x"}}}, "pathology 'p': macros.ABLATE_P="),
    ({"p": {**GOOD, "macros": {"ABLATE_P": "a b"}}}, "pathology 'p': macros.ABLATE_P="),
    ({"p": {**GOOD, "macros": {"ABLATE_P": True}}}, "pathology 'p': macros.ABLATE_P must be"),
    ({"p": {**GOOD, "macros": {"ABLATE_P": 1.5}}}, "pathology 'p': macros.ABLATE_P must be"),
    ({"p": {**GOOD, "macros": {"ABLATE_P": None}}}, "pathology 'p': macros.ABLATE_P must be"),
    ({"p": {**GOOD, "macros": ["ABLATE_P"]}}, "pathology 'p': macros must be a mapping"),
    ({"p": {**GOOD, "header": "/etc/p.cuh"}}, "pathology 'p': header '/etc/p.cuh' must be relative"),
    ({"p": {**GOOD, "header": "../outside.cuh"}}, "pathology 'p': header '../outside.cuh' is outside"),
    ({"p": {**GOOD, "header": "patches/p.cuh"}}, "pathology 'p': header 'patches/p.cuh' is outside"),
    ({"p": {**GOOD, "header": "ok/p.h"}}, "pathology 'p': header 'ok/p.h' must end in .cuh"),
    ({"p": {**GOOD, "header": "ok/missing.cuh"}}, "pathology 'p': header 'ok/missing.cuh' does not exist"),
    ({"p": {**GOOD, "header": ""}}, "pathology 'p': header must be a path"),
    ({"p": {**GOOD, "header": 3}}, "pathology 'p': header must be a path"),
    ({"p": {**GOOD, "macro": {"ABLATE_P": 1}}}, r"pathology 'p': unknown field\(s\) \['macro'\]"),
    # A pathology that changes nothing in the build: refused before anything is built (the
    # sweep used to say "ok" and only rank showed the failure).
    ({"p": {"mechanism": "m", "expected": "e", "fingerprint": {"sass.bar": "increases"}}},
     r"^pathology 'p': no macros and no header: it would build the base again; give it macros"),
    ({"p": {"macros": {}, "header": None, "seam": "tile"}}, r"^pathology 'p': no macros and no header"),
    ({"p": "ABLATE_P"}, "pathology 'p': its spec must be a mapping"),
    ({"none": {"macros": {"ABLATE_P": 1}}}, "pathology 'none' is the base"),
    ({"p": GOOD, "q": {"macros": {"ABLATE_P": 2}}},
     "pathology 'q': macros.ABLATE_P=2 conflicts with ABLATE_P=1 from pathology 'p'"),
    ({}, "cfg.pathology must map"),
    (None, "cfg.pathology must map"),
])
def test_bad_pathology_configs_are_clear_errors(project, cfg, message):
    with pytest.raises(VariantError, match=message):
        variant_from_cfg(cfg, project)


def test_a_valid_config_passes(project):
    variant = variant_from_cfg({"p": {**GOOD, "macros": {"ABLATE_P": "x_1"}}}, project)
    assert variant.name == "p" and variant.macros == {"ABLATE_P": "x_1"}
    assert variant.headers == (str(project / "ok" / "p.cuh"),)


def test_test_only_headers_in_this_project_are_allowed():
    """tests/patches/ lies outside kernels/attention/, inside the project: the tests' own
    pathologies are attention's, reached with ../../tests/patches/x.cuh."""
    variant = variant_from_cfg({"noop": {"header": "../../tests/patches/noop.cuh"}}, KERNEL_DIR)
    assert variant.headers == ("tests/patches/noop.cuh",)


# ---- sweeps --------------------------------------------------------------------------------

def sweep_variants(overrides, *search_dirs):
    """variants_of_sweep on the config a multirun with `overrides` hands its callbacks;
    `search_dirs` are added to Hydra's search path (as the tests' own pathologies are)."""
    if search_dirs:
        overrides = overrides + [
            f"hydra.searchpath=[{','.join(f'file://{d}' for d in search_dirs)}]"]
    plugins.use(ATTENTION)
    with initialize_config_dir(config_dir=str(CONF), version_base=None):
        config = GlobalHydra.instance().hydra.compose_config(
            "config", overrides, run_mode=RunMode.MULTIRUN, with_log_configuration=False)
        return [v.name for v in variants_of_sweep(jobs_of_sweep(config))]


def test_glob_sweep_gives_every_pathology_once_whatever_the_shapes():
    names = sweep_variants(["pathology=glob(*)", "shape=s512,s1k"])
    assert names == PATHOLOGIES


def test_choice_and_list_sweeps():
    assert sweep_variants(["pathology=fp32_accum,none"]) == ["fp32_accum", "none"]
    assert sweep_variants(["pathology=[fp32_accum,no_swizzle]"]) == ["fp32_accum+no_swizzle"]
    assert sweep_variants(["pathology=[fp32_accum,no_swizzle],[no_swizzle,fp32_accum],none",
                           "shape=glob(s512*)"]) == ["fp32_accum+no_swizzle", "none"]
    assert sweep_variants(["shape=s512,s1k"]) == ["none"]
    assert sweep_variants(["pathology=noop,none", "mode=static"], TEST_CONF) == ["noop", "none"]


def test_sweeper_params_from_the_config_are_expanded(tmp_path):
    """A sweep declared in a config's hydra.sweeper.params, beside the command line's."""
    (tmp_path / "sweep.yaml").write_text(textwrap.dedent(f"""\
        defaults:
          - config
          - _self_
        hydra:
          searchpath: [file://{CONF}]
          sweeper:
            params:
              pathology: tiny_blocks,serial_grid
        """))
    plugins.use(ATTENTION)
    with initialize_config_dir(config_dir=str(tmp_path), version_base=None):
        config = GlobalHydra.instance().hydra.compose_config(
            "sweep", ["shape=s512,s1k"], run_mode=RunMode.MULTIRUN,
            with_log_configuration=False)
        assert [v.name for v in variants_of_sweep(jobs_of_sweep(config))] == ["tiny_blocks", "serial_grid"]


def test_a_bad_pathology_in_a_sweep_fails_before_anything(tmp_path):
    (tmp_path / "pathology").mkdir()
    (tmp_path / "pathology" / "shelly.yaml").write_text(
        "shelly:\n  macros: {ABLATE_SHELLY: '1;touch pwned'}\n")
    with pytest.raises(VariantError, match="pathology 'shelly': macros.ABLATE_SHELLY="):
        sweep_variants(["pathology=none,shelly"], tmp_path)


APP = """
import hydra

@hydra.main(config_path=".", config_name="app", version_base=None)
def main(cfg):
    pass

if __name__ == "__main__":
    main()
"""

CALLBACK = """
import json
from hydra.experimental.callback import Callback
from ablate.job.variant import variant_from_cfg
from ablate.sweep.design import job_configs

KERNEL_DIR = "{kernel_dir}"


class Collect(Callback):
    '''Records the sweep's variants at its start, and the variant each job then sees.'''

    def __init__(self, out):
        self.out = out

    def on_multirun_start(self, config, **kwargs):
        variants = list({v.name: v for v in (variant_from_cfg(c.pathology, KERNEL_DIR)
                                              for c in job_configs(config))}.values())
        with open(self.out + "/sweep.json", "w") as f:
            json.dump([[v.name, v.macros, list(v.headers)] for v in variants], f)
        from omegaconf import OmegaConf
        with open(self.out + "/composed.json", "w") as f:  # one process, then forked ones: the same configs
            json.dump([[OmegaConf.to_yaml(c) for c in job_configs(config, processes=n)] for n in (1, 3)], f)

    def on_job_start(self, config, **kwargs):
        with open(self.out + "/jobs.txt", "a") as f:
            f.write(variant_from_cfg(config.pathology, KERNEL_DIR).name + "\\n")
"""


def test_a_real_multirun_builds_exactly_the_variants_its_jobs_use(tmp_path):
    """A tiny app on the attention kernel's pathology and shape groups, run with -m in a
    subprocess: the callback's expansion at multirun start equals the distinct variants its
    jobs get."""
    (tmp_path / "app.py").write_text(APP)
    for group in ("pathology", "shape"):  # beside the app's config: glob() sees them there
        (tmp_path / group).mkdir()
        for yaml in [*(KERNEL_DIR / "conf" / group).glob("*.yaml"), *(CONF / group).glob("*.yaml")]:
            (tmp_path / group / yaml.name).symlink_to(yaml)
    (tmp_path / "app.yaml").write_text(textwrap.dedent(f"""\
        defaults:
          - shape: s512
          - pathology: none
          - _self_
        hydra:
          callbacks:
            collect: {{_target_: collect.Collect, out: {tmp_path}}}
          sweep: {{dir: {tmp_path / "multirun"}}}
        """))
    (tmp_path / "collect.py").write_text(CALLBACK.replace("{kernel_dir}", str(KERNEL_DIR)))
    # Attention's configs and the generic pathologies on Hydra's search path, as plugins.use
    # shows them, whatever kernel a test before this one in this process composed last.
    env = dict(os.environ, PYTHONPATH=f"{tmp_path}{os.pathsep}{ROOT}",
               **{plugins.CONF_ENV: str(ATTENTION.conf), plugins.GENERIC_ENV: str(ATTENTION.generic)})
    run = subprocess.run(
        [sys.executable, "app.py", "-m", "pathology=glob(*)", "shape=s512,s1k_causal"],
        cwd=tmp_path, env=env, capture_output=True, text=True, timeout=300)
    assert run.returncode == 0, run.stderr
    sweep = json.loads((tmp_path / "sweep.json").read_text())
    jobs = (tmp_path / "jobs.txt").read_text().split()
    names = [name for name, _, _ in sweep]
    assert len(jobs) == 2 * len(PATHOLOGIES)
    assert names == list(dict.fromkeys(jobs)) == PATHOLOGIES  # the same, in job order
    serial, forked = json.loads((tmp_path / "composed.json").read_text())
    assert len(serial) == len(jobs) and forked == serial  # composed in forks (design.job_configs): equal, in order
    fp32 = dict((n, (m, h)) for n, m, h in sweep)["fp32_accum"]
    assert fp32 == ({"ABLATE_FP32_ACCUM": "1"}, ["kernels/attention/patches/fp32_accum.cuh"])


def test_a_pathology_that_changes_nothing_stops_the_sweep_before_anything_is_built(tmp_path):
    """A yaml with no macros and no header used to sweep as "ok" (the base against itself);
    it is refused in one line, nothing built, nothing recorded."""
    from ablate.tools import new_kernel

    folder = new_kernel.write("idle_kernel", tmp_path / "kernels")
    (folder / "conf" / "pathology" / "idle.yaml").write_text(
        "idle:\n  seam: vector\n  mechanism: none\n  expected: 1x\n  fingerprint: {sass.ldg_128: same}\n")
    env = {**os.environ, "MLFLOW_TRACKING_URI": f"sqlite:///{tmp_path / 'mlflow.db'}"}
    proc = subprocess.run([sys.executable, "-m", "ablate", "-m", "kernel=idle_kernel",
                           f"kernel_path=[{tmp_path / 'kernels'}]", "pathology=glob(*)", "mode=static",
                           f"build.dir={tmp_path / 'build'}", f"hydra.sweep.dir={tmp_path / 'sweep'}"],
                          cwd=ROOT, env=env, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 1 and "Traceback" not in proc.stderr
    assert proc.stderr.strip().splitlines()[-1].startswith(
        "ablate: pathology 'idle': no macros and no header: it would build the base again")
    assert not (tmp_path / "build").exists() and not (tmp_path / "mlflow.db").exists()


def test_a_sweep_builds_nothing_for_what_the_kernel_opts_out_of():
    """kernel.not_applicable: the job says why and nothing is built, in a sweep too (its
    callback builds variants_of_sweep: cutlass_gemm's declared no_forceinline compiled for
    12-26 minutes on a 2-core CPU before this)."""
    names = sweep_variants(["pathology=no_l1,no_unroll,none", "+kernel.not_applicable.no_l1=because"])
    assert names == ["no_unroll", "none"]


def test_a_sweep_is_composed_in_forks_from_16_jobs_on_linux_only(monkeypatch):
    import sys

    from ablate.sweep import design

    monkeypatch.setattr(sys, "platform", "linux")
    assert design.composers(15, cpus=16) == 1  # too few to pay for the forks
    assert design.composers(16, cpus=16) == 4  # a chunk of 4 jobs each
    assert design.composers(84, cpus=16) == 16 and design.composers(84, cpus=2) == 2
    assert design.composers(1000, cpus=64) == 16  # at most 16
    monkeypatch.setattr(sys, "platform", "darwin")
    assert design.composers(84, cpus=16) == 1  # fork is unsafe there: one process


@pytest.mark.parametrize("fault", ["dies", "hangs"])
def test_a_composer_that_dies_or_hangs_leaves_its_jobs_to_this_process(monkeypatch, caplog, fault):
    """A forked composer killed (as the OOM killer would) or stuck: the sweep still gets every
    job's config, in order, the same as one process composes them, and no composer is left
    running (multiprocessing's pool waited forever for a dead one's chunk: a CI run, 2026-12-02)."""
    import multiprocessing
    import signal
    import time

    from ablate.sweep import design

    parent, compose = os.getpid(), design._compose

    def faulty(loader, config, overrides):
        if os.getpid() != parent and "pathology=fp32_accum" in overrides:
            if fault == "dies":
                os.kill(os.getpid(), signal.SIGKILL)
            time.sleep(3600)
        return compose(loader, config, overrides)

    plugins.use(ATTENTION)
    with initialize_config_dir(config_dir=str(CONF), version_base=None):
        config = GlobalHydra.instance().hydra.compose_config(
            "config", ["pathology=glob(*)", "shape=s512,s1k"], run_mode=RunMode.MULTIRUN,
            with_log_configuration=False)
        jobs = design.sweep_jobs(config)
        serial = [OmegaConf.to_yaml(c) for c in design.job_configs(config, jobs, processes=1)]
        monkeypatch.setattr(design, "_compose", faulty)
        monkeypatch.setattr(design, "FORK_WAIT_S", 2)
        tic = time.monotonic()
        forked = [OmegaConf.to_yaml(c) for c in design.job_configs(config, jobs, processes=2)]
    assert len(jobs) >= design.FORK_AT and forked == serial
    assert time.monotonic() - tic < 60
    assert ("died" if fault == "dies" else "gave no answer in 2 s") in caplog.text
    deadline = time.monotonic() + 10
    while multiprocessing.active_children() and time.monotonic() < deadline:
        time.sleep(0.1)
    assert not multiprocessing.active_children()
