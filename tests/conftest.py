"""Shared test set-up: the `gpu` marker (skipped without CUDA), the project root, and MLflow
stores in temporary folders, so that no test ever writes to the real runs/mlflow.db."""
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


def cuda_available():
    try:
        import torch
    except ImportError:
        return False
    return torch.cuda.is_available()


def pytest_configure(config):
    config.addinivalue_line("markers", "gpu: needs a CUDA device; skipped where there is none")


def pytest_collection_modifyitems(config, items):
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


@pytest.fixture
def mlflow_store(tmp_path, monkeypatch):
    """A fresh, empty MLflow store for one test: its tracking URI (also set as MLFLOW_TRACKING_URI)."""
    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    monkeypatch.setenv("MLFLOW_TRACKING_URI", uri)
    return uri
