"""How far apart the GPUs of a sweep time the same kernel, and what that means where results
from different GPUs are compared.

A job's interval says how precisely its slowdown is known on the GPU that timed it; it says
nothing about another GPU of the same model (two H100s of one host agreed within their
intervals for 58 of 66 jobs of two kernels, the others differed by 1-2.5%: issue 33).
A sweep on several GPUs times its control (the base against itself, pathology `none`) on
every one of them (ablate/gpu/pool.py): the job records each GPU's base time and their
spread, `gpu_spread` = slowest / fastest - 1; every job's own base time, on its GPU, is a
second reading of the same spread. Where two results of one job come from
different GPUs (`ablate rank --compare`), each interval is widened by that factor on both
sides before they are held against each other.
"""
import numpy as np
import pandas as pd


def of_sweep(jobs):
    """The sweep's between-GPU spread and the number of GPUs it was measured on; (None, 0)
    when the sweep timed on one GPU. The larger of two readings of it: the controls' (each
    timed on every GPU at once: `gpu_spread`), and the jobs' own base times (every job times
    the base: per shape, the median on each GPU, slowest over fastest, less 1), which needs
    no control in the sweep."""
    spreads, n = [], 0
    if "gpu_spread" in jobs:
        ok = jobs[(jobs["status"] == "ok") & jobs["gpu_spread"].notna()]
        if not ok.empty:
            per_gpu = [c for c in jobs.columns if str(c).startswith("base_us_gpu")]
            n = int(ok[per_gpu].notna().sum(axis=1).max()) if per_gpu else 2
            spreads.append(float(ok["gpu_spread"].max()))
    if {"gpu_uuid", "base_us", "shape"} <= set(jobs.columns):
        ok = jobs[(jobs["status"] == "ok") & jobs["gpu_uuid"].notna() & jobs["base_us"].notna()]
        medians = ok.groupby(["shape", "gpu_uuid"])["base_us"].median().astype(float)
        for _, per_gpu in medians.groupby(level="shape"):
            if len(per_gpu) >= 2:
                spreads.append(float(per_gpu.max() / per_gpu.min() - 1))
                n = max(n, len(per_gpu))
    return (max(spreads), n) if spreads else (None, 0)


def line(jobs):
    """The report's line on the spread between the sweep's GPUs ("" for one GPU)."""
    spread, n = of_sweep(jobs)
    if spread is None:
        return ""
    return (f"\nBetween GPUs: {n} GPUs time the base up to {spread:.2%} apart (the control on each, "
            "and the jobs' own base times); results compared across GPUs are held to intervals widened by that much")


def widened(lo, hi, spread):
    """An interval [lo, hi] of a ratio widened by a relative spread on both sides."""
    return lo / (1 + spread), hi * (1 + spread)


def same_gpu(a, b):
    """Whether two jobs' GPUs (their UUIDs) are known and the same."""
    return isinstance(a, str) and isinstance(b, str) and a == b and a != "unknown"


def verdict(row, spread, overlap):
    """'agree' (the intervals overlap), 'agree within the GPUs' spread' (they overlap once
    widened, the two timed on different GPUs) or 'DISAGREE'."""
    lo_a, hi_a, lo_b, hi_b = (row[f"slowdown_{e} {x}"] for x in "AB" for e in ("lo", "hi"))
    if overlap(lo_a, hi_a, lo_b, hi_b):
        return "agree"
    if spread and not same_gpu(row.get("gpu_uuid A"), row.get("gpu_uuid B")):
        if overlap(*widened(lo_a, hi_a, spread), *widened(lo_b, hi_b, spread)):
            return "agree within the GPUs' spread"
    return "DISAGREE"


def of_both(*sweeps):
    """The spread to hold two sweeps' results to: the larger of theirs (0 where neither was
    timed on two GPUs)."""
    found = [s for s, _ in map(of_sweep, sweeps) if s is not None and not pd.isna(s)]
    return float(np.max(found)) if found else 0.0
