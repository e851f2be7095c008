"""The mis-tuned fixture timed (tests/fixtures/plugins/mistuned: its base's BLOCK = 32 keeps
4 KB of loads in flight per SM): its neighbourhood swept on the GPU, then `make rank` prints
first that the base is beaten by BLOCK = 64. Skips without a GPU."""
import os
import subprocess
import sys

import pytest

from conftest import kept_build_dir
from test_tunables import FIXTURES, ROOT

pytestmark = pytest.mark.gpu


def test_the_mistuned_base_is_beaten_and_rank_says_so_first(tmp_path):
    pytest.importorskip("triton")
    env = {**os.environ, "MLFLOW_TRACKING_URI": f"sqlite:///{tmp_path / 'mlflow.db'}",
           plugins_env(): str(FIXTURES)}
    proc = subprocess.run(
        [sys.executable, "-m", "ablate", "-m", "kernel=mistuned", "pathology=glob(tune_*)", "shape=n64m",
         "bench.peers=[]", f"build.dir={kept_build_dir('mistuned')}", f"hydra.sweep.dir={tmp_path / 'multirun'}"],
        cwd=ROOT, env=env, capture_output=True, text=True, timeout=900)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    rank = subprocess.run([sys.executable, "-m", "ablate.report.rank", "--kernel", "mistuned", "--out",
                           str(tmp_path / "out")], cwd=ROOT, env=env, capture_output=True, text=True, timeout=300)
    assert rank.returncode == 0, rank.stderr
    print(rank.stdout)  # the numbers, for whoever runs it with -s
    head = rank.stdout.split("Ranking (slowdown")[0]
    beaten = [ln for ln in head.splitlines() if "the base is beaten at n64m:" in ln]
    assert any("tune_block_64 runs" in ln and "adopt BLOCK=64 or explain" in ln for ln in beaten), head
    assert "n64m: the base is NOT at a local optimum" in head
    assert "tune_block_16" not in " ".join(beaten)  # the smaller block is no speed-up


def plugins_env():
    from ablate.job import plugins

    return plugins.PATH_ENV
