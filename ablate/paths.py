"""Where things are: the project root (where nvcc runs and `runs/` lies), its configs, the
shipped kernels, and ablate's own files (headers on every build's include path, data)."""
from pathlib import Path

PACKAGE = Path(__file__).resolve().parent
ROOT = PACKAGE.parent
CONF = ROOT / "conf"
KERNELS = ROOT / "kernels"
RUNS = ROOT / "runs"
INCLUDE = PACKAGE / "include"  # <ablate/variant_info.h>, the calibrations' headers
DATA = PACKAGE / "data"
