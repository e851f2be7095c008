"""The GPU's measured ceilings, which a kernel's speed is held to as a fraction of peak.

- memory: a device-to-device copy of 1 GiB (far past L2), counting bytes read and written:
  the better of cudaMemcpy (torch's copy_) and an elementwise kernel (torch.neg on FP32,
  16-byte accesses), since the copy engine's path is not the fastest a kernel can move
  bytes (on the H100, 2.44 against ~3.0 TB/s);
- compute: an 8192^3 FP16 matrix product through torch (cuBLAS), 2*N^3 FLOPs.

Both are timed under ablate.gpu.timing's protocol (CUDA-graph replay of >= min_sample_us, the
median of the samples) and measured once per GPU: the first job that needs them measures
both and caches them in <peaks dir>/<GPU uuid>.json (the job's `peaks_dir`: beside its build.dir
by default, runs/peaks for runs/build; `use_dir`), with the date, the GPU, torch and the
command that measured them; `python -m ablate.gpu.peaks` measures them again (and prints them).
Datasheet numbers would flatter every kernel on a card that cannot reach them; these are
what this card does.
"""
import datetime
import functools
import json
import sys

from ablate.paths import RUNS

CACHE = RUNS / "peaks"  # the default; a job's own through use_dir (its peaks_dir)
_cache_dir = [CACHE]


def use_dir(folder) -> None:
    """Cache the ceilings in `folder` from now on in this process (None: the default)."""
    from pathlib import Path

    _cache_dir[0] = Path(folder) if folder else CACHE

COPY_BYTES = 1 << 30
MATMUL_N = 8192
SAMPLES = {"samples": 20, "warmup": 3, "min_sample_us": 2000}


def _median_us(launch, bench=SAMPLES):
    import numpy as np

    from ablate.gpu import timing

    samples, _, _ = timing.measure({"peak": launch}, 1, bench)
    return float(np.median(samples["peak"]))


@functools.cache
def copy_gbps(device_index=0):
    """Device-to-device copy bandwidth in GB/s (bytes read + bytes written per second): the
    faster of cudaMemcpy and a kernel that reads and writes every element once."""
    return max(copies(device_index).values())


@functools.cache
def copies(device_index=0):
    """{way: GB/s} of each way of copying 1 GiB that copy_gbps takes the best of."""
    import torch

    with torch.cuda.device(device_index):
        src = torch.empty(COPY_BYTES // 4, dtype=torch.float32, device="cuda").uniform_()
        dst = torch.empty_like(src)
        ways = {"cudaMemcpy": lambda i: dst.copy_(src), "kernel": lambda i: torch.neg(src, out=dst)}
        return {way: 2 * COPY_BYTES / _median_us(launch) / 1e3 for way, launch in ways.items()}


@functools.cache
def matmul_tflops(device_index=0):
    """FP16 matrix-product rate in TFLOP/s (torch.matmul, FP32 accumulation, random data)."""
    import torch

    with torch.cuda.device(device_index):
        gen = torch.Generator(device="cuda").manual_seed(0)
        a, b = (torch.randn(MATMUL_N, MATMUL_N, generator=gen, device="cuda", dtype=torch.float16)
                for _ in range(2))
        c = torch.empty_like(a)
        us = _median_us(lambda i: torch.matmul(a, b, out=c))
    return 2 * MATMUL_N ** 3 / us / 1e6


def peak(bound, device_index=0):
    """(metric name, value, unit) of the ceiling that applies to a kernel of `bound`."""
    if bound == "memory":
        return "peak_gbps", measured(device_index)["copy_gbps"], "GB/s"
    return "peak_tflops", measured(device_index)["matmul_tflops"], "TFLOP/s"


def measured(device_index=0, again=False, command="the first ablate job on this GPU"):
    """Both ceilings of the GPU, from its cache file in the folder of `use_dir`, measured and
    written when there is none (or `again`): {"gpu", "uuid", "copy_gbps", "copies",
    "matmul_tflops", "date", "command", "torch"}."""
    return _measured(device_index, again, command, _cache_dir[0])


def _uuid(device_index):
    import torch

    props = torch.cuda.get_device_properties(device_index)
    return str(getattr(props, "uuid", "") or props.name).replace(" ", "_"), props.name


@functools.cache
def _measured(device_index, again, command, folder):
    import torch

    uuid, name = _uuid(device_index)
    path = folder / f"{uuid}.json"
    if path.is_file() and not again:
        return json.loads(path.read_text())
    out = {"gpu": name, "uuid": uuid, "copy_gbps": copy_gbps(device_index), "copies": copies(device_index),
           "matmul_tflops": matmul_tflops(device_index),
           "date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
           "command": command, "torch": torch.__version__}
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(out, indent=1))
    return out


def main(argv=None):
    """`python -m ablate.gpu.peaks [DEVICE] [DIR]`: measure both ceilings of a GPU again and
    cache them (in DIR, default runs/peaks)."""
    argv = sys.argv[1:] if argv is None else argv
    device = int(argv[0]) if argv else 0
    if len(argv) > 1:
        use_dir(argv[1])
    print(json.dumps(measured(device, again=True, command="python -m ablate.gpu.peaks " + " ".join(argv)), indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
