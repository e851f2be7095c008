"""How `make test` spreads the suite over its test processes (pytest-xdist)."""
import subprocess
from pathlib import Path

import test_slurm

ROOT = Path(__file__).resolve().parents[1]


def test_make_test_runs_the_slurm_tests_in_one_process_first():
    """--dist loadgroup sends a group's tests to one process, the largest group first: the SLURM
    tests' services (cluster, PostgreSQL, mlflow server: ~15 s) start once, and the suite's
    longest tests do not end it. Under plain --dist load both processes could start them."""
    make = subprocess.run(["make", "-n", "test"], cwd=ROOT, capture_output=True, text=True, check=True).stdout
    assert "--dist loadgroup" in make and "-n 2" in make, make
    mark = test_slurm.pytestmark
    assert (mark.name, mark.args) == ("xdist_group", ("slurm",))
