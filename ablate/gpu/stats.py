"""Summary statistics of timing samples, and the slowdown ratio with an interval that holds
from one run to the next.

A job times base and variant in R independent replicates (ablate.gpu.timing.replicates: fresh
input allocations, fresh graph captures, the candidates in a new random order). What moves
between runs (where the tensors lie in memory, the captured graphs, clocks) moves between
replicates too, so the interval is taken over replicates, not over the samples of one run:
each replicate gives one ratio of medians, and the interval is Student's t on their logs,
exp(mean ± t(R-1) · sd / √R). A replicate's ratio already carries its own sampling noise,
so this two-stage estimate accounts for both levels (within and between runs) without a
model of either (docs/design.md says why t and not a bootstrap over replicates).
"""
import math

import numpy as np


def _checked(samples, what):
    """The samples as a float array; empty, non-finite or non-positive times are an error."""
    a = np.asarray(samples, dtype=np.float64).ravel()
    if a.size == 0:
        raise ValueError(f"{what}: no samples")
    if not np.all(np.isfinite(a)):
        raise ValueError(f"{what}: samples contain NaN or infinity")
    if np.any(a <= 0):
        raise ValueError(f"{what}: samples must be positive times, got min {a.min()!r}")
    return a


def summary(samples, what="samples"):
    """Median, 10th and 90th percentile of one candidate's samples."""
    a = _checked(samples, what)
    p10, median, p90 = np.percentile(a, [10, 50, 90])
    return {"median": float(median), "p10": float(p10), "p90": float(p90)}


def replicate_ratios(base_replicates, variant_replicates):
    """median(variant) / median(base) of each replicate."""
    if len(base_replicates) != len(variant_replicates):
        raise ValueError(f"{len(base_replicates)} base replicates against {len(variant_replicates)} of the variant")
    return np.array([np.median(_checked(v, f"variant, replicate {i}")) / np.median(_checked(b, f"base, replicate {i}"))
                     for i, (b, v) in enumerate(zip(base_replicates, variant_replicates))])


def slowdown(base_replicates, variant_replicates, min_effect=0.0, level=0.95, resolution=None):
    """The slowdown of the variant over replicates, with its interval.

    base_replicates, variant_replicates: one array of samples (us) per replicate, the i-th of
    each timed together. Returns `slowdown` (the geometric mean of the replicates' ratios),
    `slowdown_lo`, `slowdown_hi` (the `level` t-interval), `half_width` (the larger relative
    distance from the ratio to an end of the interval), `replicates` and `significant` (1
    when the interval lies entirely beyond 1 ± min_effect).

    `resolution`: one (base, variant) pair per replicate, the step (us per launch) in which
    that replicate's samples come: a sample is a CUDA event interval, whose resolution is
    about half a microsecond, divided by the launches of a replay. A median is known only to
    within its step, so each replicate's log ratio carries at least the variance of two
    rounding errors, ((q_b/m_b)^2 + (q_v/m_v)^2) / 12, and the interval never claims more:
    where base and variant are one library (an A/A job) their medians can tie exactly in
    every replicate, and the replicates' spread alone would read as no error at all."""
    if not 0 <= min_effect < 1:
        raise ValueError(f"min_effect must be in [0, 1), got {min_effect!r}")
    if not 0 < level < 1:
        raise ValueError(f"level must be in (0, 1), got {level!r}")
    logs = np.log(replicate_ratios(base_replicates, variant_replicates))
    n = logs.size
    if n < 2:
        raise ValueError(f"an interval across runs needs at least 2 replicates, got {n}")
    floor = 0.0
    if resolution is not None:
        if len(resolution) != n:
            raise ValueError(f"{len(resolution)} resolutions for {n} replicates")
        floor = float(np.mean([((qb / np.median(b)) ** 2 + (qv / np.median(v)) ** 2) / 12
                               for (qb, qv), b, v in zip(resolution, base_replicates, variant_replicates)]))
    # one job: Student's t with n - 1 degrees of freedom
    est = combine([(1, logs)], min_effect, level, floors=[floor])
    ratio, lo, hi = est["value"], est["lo"], est["hi"]
    return {
        "slowdown": ratio,
        "slowdown_lo": lo,
        "slowdown_hi": hi,
        "half_width": max(hi / ratio - 1, 1 - lo / ratio),
        "replicates": n,
        "significant": est["significant"],
    }


def combine(terms, min_effect=0.0, level=0.95, floors=None):
    """exp(sum c_k * mean(logs_k)) with its interval, for independent jobs' replicate log
    ratios: `terms` is [(c_k, logs_k)]. Variance sum c_k^2 s_k^2 / R_k, Student's t with
    Welch-Satterthwaite degrees of freedom. Returns value, lo, hi, df, significant (the
    interval beyond 1 +- min_effect, as for a slowdown). `floors`: per term, the least
    variance of one replicate's log ratio (the timer's resolution: `slowdown`); s_k^2 is
    taken as at least that."""
    est, var, denom = 0.0, 0.0, 0.0
    for k, (c, logs) in enumerate(terms):
        logs = np.asarray(logs, dtype=np.float64)
        if logs.size < 2:
            raise ValueError(f"an interval needs at least 2 replicates per job, got {logs.size}")
        if not np.all(np.isfinite(logs)):
            raise ValueError("replicate log ratios contain NaN or infinity")
        v = c * c * max(logs.var(ddof=1), floors[k] if floors else 0.0) / logs.size
        est += c * logs.mean()
        var += v
        denom += v * v / (logs.size - 1)
    df = var * var / denom if denom > 0 else math.inf
    # Imported here: a sweep's parent needs interval_text only, and scipy took ~1.3 s of its
    # first job on the H100's host (docs/benchmarks.md, "Sweep speed").
    from scipy import stats as scipy_stats

    half = (scipy_stats.t.ppf(0.5 + level / 2, df) if math.isfinite(df) else scipy_stats.norm.ppf(0.5 + level / 2)) \
        * math.sqrt(var)
    lo, hi = math.exp(est - half), math.exp(est + half)
    return {"value": math.exp(est), "lo": lo, "hi": hi, "df": df,
            "significant": int(lo > 1 + min_effect or hi < 1 - min_effect)}


def interval_text(value, lo, hi, suffix="", digits=3):
    """`1.000x [0.997, 1.004]`: three decimals (or `digits`: a model step's slowdowns of a
    few tenths of a percent read in four), or as many more (up to six) as it takes for an
    interval of non-zero width to show one (an A/A job at the timer's resolution reads
    `1.0000x [0.9998, 1.0002]`, never `[1.000, 1.000]`)."""
    while digits < 6 and hi > lo and f"{lo:.{digits}f}" == f"{hi:.{digits}f}":
        digits += 1
    return f"{value:.{digits}f}{suffix} [{lo:.{digits}f}, {hi:.{digits}f}]"


def overlap(a_lo, a_hi, b_lo, b_hi):
    """Whether two intervals share a point: the two results can be the same effect."""
    return max(a_lo, b_lo) <= min(a_hi, b_hi)
