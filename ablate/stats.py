"""Summary statistics of timing samples and the slowdown ratio with a bootstrap interval."""
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


def slowdown(base, variant, resamples=10_000, seed=0, min_effect=0.0, level=0.95):
    """median(variant) / median(base) with a percentile bootstrap interval.

    Each sample set is resampled with replacement on its own (they are independent
    measurements), the ratio of medians is taken per resample, and the interval is the
    central `level` of those ratios. `significant` means the interval lies entirely
    beyond 1 +- min_effect: with hundreds of low-noise samples the interval is so narrow
    that the protocol's own systematic offsets (two graphs of the same kernel differ by
    ~0.05% on the H100) would otherwise count as effects.
    """
    b = _checked(base, "base")
    v = _checked(variant, "variant")
    if not 0 <= min_effect < 1:
        raise ValueError(f"min_effect must be in [0, 1), got {min_effect!r}")
    if resamples < 100:
        raise ValueError(f"bootstrap resamples must be >= 100, got {resamples}")
    rng = np.random.default_rng(seed)
    # Resample in chunks so a large resample count stays within modest memory.
    ratios = []
    for start in range(0, resamples, 1000):
        n = min(1000, resamples - start)
        mb = np.median(rng.choice(b, size=(n, b.size)), axis=1)
        mv = np.median(rng.choice(v, size=(n, v.size)), axis=1)
        ratios.append(mv / mb)
    tail = 100 * (1 - level) / 2
    lo, hi = np.percentile(np.concatenate(ratios), [tail, 100 - tail])
    ratio = np.median(v) / np.median(b)
    return {
        "slowdown": float(ratio),
        "slowdown_lo": float(lo),
        "slowdown_hi": float(hi),
        "significant": int(lo > 1 + min_effect or hi < 1 - min_effect),
    }
