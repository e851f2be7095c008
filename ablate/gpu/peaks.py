"""The GPU's measured ceilings, one per kind of work, which a kernel's speed is held to as a
fraction of peak (spec.WORK says which; ablate/job/thin.py lists the kinds).

- memory: a device-to-device copy of 1 GiB (far past L2), counting bytes read and written:
  the better of cudaMemcpy (torch's copy_) and an elementwise kernel (torch.neg on FP32,
  16-byte accesses), since the copy engine's path is not the fastest a kernel can move
  bytes (on the H100, 2.44 against ~3.0 TB/s);
- fp16_tensor, bf16_tensor: an 8192^3 matrix product in that dtype through torch (cuBLAS,
  FP32 accumulation), 2*N^3 FLOPs;
- tf32: the FP32 product with TF32 allowed (torch.backends.cuda.matmul.allow_tf32);
- fp32_fma: the FP32 product with TF32 off: cuBLAS's SGEMM, FFMA-bound, what this card
  does with FP32 multiply-adds in the best-tuned kernel there is (a little under the FFMA
  issue rate of the datasheet, so a kernel's fraction of it may come near 100%);
- fp8_tensor: an FP8 (e4m3) product through torch._scaled_mm, BF16 out, on GPUs that have
  FP8 tensor cores (compute capability 8.9 and up); elsewhere it is absent (None), with why.

Each is timed under ablate.gpu.timing's protocol (CUDA-graph replay of >= min_sample_us,
the median of the samples) and measured once per GPU: the first job that needs one measures
it and caches it in <peaks dir>/<GPU uuid>.json (the job's `peaks_dir`: beside its build.dir
by default, runs/peaks for runs/build; `use_dir`), with the date, the GPU, torch and the
command, beside the others measured so far; `python -m ablate.gpu.peaks [DEVICE]` measures
them all again (and prints them). Datasheet numbers would flatter every kernel on a card
that cannot reach them; these are what this card does.
"""
import contextlib
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
KINDS = ("memory", "fp32_fma", "tf32", "fp16_tensor", "bf16_tensor", "fp8_tensor")  # thin.WORKS
# The cache's key for each kind (copy_gbps and matmul_tflops as caches before the kinds had them).
KEYS = {"memory": "copy_gbps", "fp16_tensor": "matmul_tflops",
        **{k: f"{k}_tflops" for k in KINDS if k not in ("memory", "fp16_tensor")}}
WHAT = {"memory": "device-to-device copy of 1 GiB", "fp32_fma": "FP32 matmul, TF32 off (SGEMM)",
        "tf32": "TF32 matmul", "fp16_tensor": "FP16 matmul", "bf16_tensor": "BF16 matmul",
        "fp8_tensor": "FP8 e4m3 matmul (_scaled_mm)"}


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


@contextlib.contextmanager
def _tf32(allowed):
    import torch

    before = torch.backends.cuda.matmul.allow_tf32
    torch.backends.cuda.matmul.allow_tf32 = allowed
    try:
        yield
    finally:
        torch.backends.cuda.matmul.allow_tf32 = before


def matmul_tflops(device_index=0, kind="fp16_tensor"):
    """The matrix-product rate in TFLOP/s of one kind of compute (torch.matmul, random data,
    N = MATMUL_N); None, with a RuntimeError's reason, where the GPU lacks it (FP8)."""
    import torch

    n = MATMUL_N
    with torch.cuda.device(device_index):
        gen = torch.Generator(device="cuda").manual_seed(0)
        if kind == "fp8_tensor":
            if torch.cuda.get_device_capability(device_index) < (8, 9) or not hasattr(torch, "_scaled_mm"):
                raise RuntimeError("no FP8 tensor cores (compute capability < 8.9) or no torch._scaled_mm")
            a, b = (torch.randn(n, n, generator=gen, device="cuda").to(torch.float8_e4m3fn) for _ in range(2))
            one = torch.ones((), device="cuda")
            launch = lambda i: torch._scaled_mm(a, b.t(), scale_a=one, scale_b=one, out_dtype=torch.bfloat16)  # noqa: E731
            us = _median_us(launch)
        else:
            dtype = {"fp16_tensor": torch.float16, "bf16_tensor": torch.bfloat16}.get(kind, torch.float32)
            a, b = (torch.randn(n, n, generator=gen, device="cuda", dtype=dtype) for _ in range(2))
            c = torch.empty_like(a)
            with _tf32(kind == "tf32"):
                us = _median_us(lambda i: torch.matmul(a, b, out=c))
    return 2 * n ** 3 / us / 1e6


def measure(kind, device_index=0):
    """One ceiling measured now: GB/s for memory, TFLOP/s for the others."""
    if kind == "memory":
        return copy_gbps(device_index)
    return matmul_tflops(device_index, kind)


def work_of(bound):
    """A spec's WORK or BOUND as a kind of work (`compute` is the FP16 tensor cores)."""
    kind = {"compute": "fp16_tensor"}.get(bound, bound)
    if kind not in KINDS:
        raise ValueError(f"unknown kind of work {bound!r}; one of {list(KINDS)} (or compute)")
    return kind


def ceiling(kind, device_index=0, command="the first ablate job on this GPU that needs it"):
    """The GPU's measured ceiling of a kind of work (or a BOUND), from its cache file,
    measured and added to it when absent; None where the GPU lacks that kind."""
    kind = work_of(kind)
    found = measured(device_index, kinds=(kind,), command=command)
    return found.get(KEYS[kind])


def peak(work, device_index=0):
    """(metric name, value, unit) of the ceiling that applies to a kernel of `work` (a WORK or
    a BOUND): peak_gbps for memory, else peak_tflops; the value None where the GPU lacks it."""
    if work_of(work) == "memory":
        return "peak_gbps", ceiling("memory", device_index), "GB/s"
    return "peak_tflops", ceiling(work, device_index), "TFLOP/s"


def roof_of(work):
    """The kind of compute under a kernel's roofline: its own, or for a memory-bound kernel
    FP32 multiply-adds (its arithmetic is not on the tensor cores)."""
    kind = work_of(work)
    return "fp32_fma" if kind == "memory" else kind


def _uuid(device_index):
    import torch

    props = torch.cuda.get_device_properties(device_index)
    return str(getattr(props, "uuid", "") or props.name).replace(" ", "_"), props.name


_measured = {}  # (device, uuid, folder) -> what this process read or measured


def measured(device_index=0, again=False, command="the first ablate job on this GPU", kinds=("memory", "fp16_tensor")):
    """The GPU's ceilings of `kinds` (and whatever else its cache file holds), from the cache,
    each absent one (all with `again`) measured and written back: {"gpu", "uuid", "copy_gbps",
    "copies", "matmul_tflops" (FP16), "<kind>_tflops", "<kind>_error" (where the GPU lacks
    one), "date", "command", "torch", "measured": {key: date}}. The cache file lies in the
    folder of `use_dir` (the job's peaks_dir)."""
    import torch

    uuid, name = _uuid(device_index)
    folder = _cache_dir[0]
    path = folder / f"{uuid}.json"
    out = _measured.get((device_index, uuid, folder))
    if out is None:
        out = json.loads(path.read_text()) if path.is_file() else {"gpu": name, "uuid": uuid}
    missing = [k for k in kinds if again or (KEYS[k] not in out and f"{k}_error" not in out)]
    if not missing:
        _measured[(device_index, uuid, folder)] = out
        return out
    if path.is_file():  # what other processes added since this one read it
        out = {**out, **json.loads(path.read_text())}
    now = datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds")
    out = {**out, "date": now, "command": command, "torch": torch.__version__}
    for kind in missing:
        out.pop(f"{kind}_error", None)
        try:
            out[KEYS[kind]] = measure(kind, device_index)
        except (RuntimeError, TypeError) as e:  # a kind this GPU (or this torch) lacks
            out[KEYS[kind]], out[f"{kind}_error"] = None, str(e).strip().splitlines()[0]
        if kind == "memory":
            out["copies"] = copies(device_index)
        out.setdefault("measured", {})[KEYS[kind]] = now
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(out, indent=1))
    _measured[(device_index, uuid, folder)] = out
    return out


def main(argv=None):
    """`python -m ablate.gpu.peaks [DEVICE] [DIR]`: measure every ceiling of a GPU again and
    cache them (in DIR, default runs/peaks)."""
    argv = sys.argv[1:] if argv is None else argv
    device = int(argv[0]) if argv else 0
    if len(argv) > 1:
        use_dir(argv[1])
    print(json.dumps(measured(device, again=True, kinds=KINDS,
                              command="python -m ablate.gpu.peaks " + " ".join(argv)), indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
