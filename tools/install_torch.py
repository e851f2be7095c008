"""Install the torch build that suits this machine, before `pip install -e .[dev]` (make install).

pip cannot choose between torch's builds: on Linux, PyPI's `torch` is a CUDA build of several
GB, and the CPU build lives on PyTorch's own index. So, with only the standard library:

- torch already importable: nothing to do (a CUDA build installed by hand stays);
- a GPU (nvidia-smi answers): PyPI's torch, a CUDA build;
- no GPU: the CPU build from https://download.pytorch.org/whl/cpu (its dependencies from
  PyPI), TORCH_VERSION (the version CI tests) unless told otherwise.

    python tools/install_torch.py [--dry-run]
    TORCH_INDEX=https://download.pytorch.org/whl/cu128 python tools/install_torch.py
"""
import importlib.metadata
import importlib.util
import os
import shutil
import subprocess
import sys

TORCH_VERSION = "2.13.0"
CPU_INDEX = "https://download.pytorch.org/whl/cpu"
PYPI = "https://pypi.org/simple"


def has_gpu():
    smi = shutil.which("nvidia-smi")
    return smi is not None and subprocess.run([smi, "-L"], capture_output=True).returncode == 0


def command():
    """The pip command for this machine, or None when torch is already there."""
    if importlib.util.find_spec("torch") is not None:
        return None
    version = os.environ.get("TORCH_VERSION", TORCH_VERSION)
    pip = [sys.executable, "-m", "pip", "install"]
    if os.environ.get("TORCH_INDEX"):
        return [*pip, f"torch=={version}", "--index-url", os.environ["TORCH_INDEX"], "--extra-index-url", PYPI]
    if has_gpu():
        return [*pip, f"torch=={version}"]
    # --retries 0: where PyTorch's index cannot be reached, pip says so once and goes on with
    # what else it can find (a local wheel, say), instead of retrying for minutes.
    return [*pip, f"torch=={version}", "--index-url", CPU_INDEX, "--extra-index-url", PYPI, "--retries", "0"]


def main(argv):
    cmd = command()
    if cmd is None:
        # its version from its metadata: importing torch to ask takes ~2 s of each `make install`
        try:
            version = importlib.metadata.version("torch")
        except importlib.metadata.PackageNotFoundError:  # importable, but installed with no metadata
            version = "(version unknown)"
        print(f"install_torch: torch {version} is installed already")
        return 0
    print("install_torch:", " ".join(cmd), flush=True)
    return 0 if "--dry-run" in argv else subprocess.call(cmd)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
