"""The interactions study on the CPU (docs/design.md "Interactions"): every variant that one
pathology builds, a pair builds too (regs_capped's cap needs the base built alongside); the
pairs that mean something (the kernel's own pathologies with one another and with the generic
ones; generic with generic only when asked); pairs with a side not applicable dropped before
anything is timed; the narrowing options and the estimate line."""
import os
import subprocess
import sys
from pathlib import Path

import pytest
from omegaconf import OmegaConf

from ablate.build import compile as compile_mod
from ablate.job import plugins
from ablate.job.job import make_job
from conftest import kept_build_dir

ROOT = Path(__file__).resolve().parents[1]
FIXTURES = ROOT / "tests" / "fixtures" / "kernels"


def plain_cfg(*overrides):
    return plugins.compose("plain_axpy", ["mode=static", "build.jobs=1", f"build.dir={kept_build_dir('plain_axpy')}",
                                          *overrides], kernel_path=[FIXTURES])


# ---- every variant that one pathology builds, a pair builds too ---------------------------

def test_a_capped_variant_builds_the_base_alongside_when_not_asked_for():
    job = make_job(plain_cfg("pathology=regs_capped"))
    results = compile_mod.build([job.variant], job.build, job.plugin, ROOT)
    assert results["regs_capped"].ok and results["none"].ok
    assert results["regs_capped"].ptxas["max_registers"] < results["none"].ptxas["max_registers"]


def test_a_pair_with_regs_capped_builds_and_its_fingerprints_hold():
    """Its rests (each pathology alone) are built without the base in the list: before the
    base was built alongside, the pair crashed with `build the base alongside it`."""
    from ablate.pipeline import run_job

    result = run_job(make_job(plain_cfg("pathology=[no_unroll,regs_capped]")))
    assert result.status == "static", result.error
    assert result.metrics["fingerprint_ok"] == 1, result.error
