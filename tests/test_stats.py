"""The slowdown statistics on synthetic replicates whose answer is known, and the adaptive
stop on synthetic streams."""
import math

import numpy as np
import pytest

from ablate.gpu.stats import overlap, replicate_ratios, slowdown, summary
from ablate.gpu.timing import replicates


def timings(rng, n, median_us, noise=0.02):
    """Samples shaped like kernel timings: a median with multiplicative (log-normal) noise."""
    return median_us * np.exp(rng.normal(0.0, noise, n))


def run(rng, truth, n_replicates, between, within=0.01, samples=30):
    """One job's replicates: each run shifts the base and the variant by a shared offset
    (cancels in the ratio) and the ratio itself by N(0, between) in log (where the tensors
    lie, the graphs captured: what moves from one run to the next), plus sampling noise."""
    base, variant = [], []
    for _ in range(n_replicates):
        shared = rng.normal(0.0, 0.01)
        shift = rng.normal(0.0, between)
        base.append(timings(rng, samples, 100.0 * math.exp(shared), within))
        variant.append(timings(rng, samples, 100.0 * truth * math.exp(shared + shift), within))
    return base, variant


def test_summary_percentiles():
    s = summary(np.arange(1, 102))  # 1..101
    assert s == {"median": 51.0, "p10": 11.0, "p90": 91.0}


def test_the_interval_covers_the_truth_across_runs():
    """200 simulated jobs with a known between-run spread (0.4%, about what moving the inputs
    does on the H100) and a true slowdown of 1.3: the interval must cover 1.3 in >= 93% of
    them. A single run's own samples would not see the between-run spread at all."""
    rng = np.random.default_rng(2026)
    covered = 0
    for _ in range(200):
        r = slowdown(*run(rng, 1.3, 3, between=0.004))
        covered += r["slowdown_lo"] <= 1.3 <= r["slowdown_hi"]
    assert covered >= 186, f"covered the truth in {covered} of 200 simulated jobs"


@pytest.mark.parametrize("n_replicates, most", [(3, 2.2), (8, 1.3)])
def test_the_interval_is_no_wider_than_the_spread_asks(n_replicates, most):
    """Against the interval one would draw knowing the true spread (1.96 sigma / sqrt(R) on
    the log ratio), the t-interval pays only for estimating sigma from R replicates:
    t(R-1) E[s] / 1.96 sigma = 1.94 at R = 3, 1.16 at R = 8."""
    rng = np.random.default_rng(11)
    between, within, samples = 0.004, 0.01, 30
    # A replicate's log ratio: the between-run shift plus the two medians' sampling noise.
    sigma = math.sqrt(between**2 + 2 * (1.2533 * within / math.sqrt(samples)) ** 2)
    oracle = 1.96 * sigma / math.sqrt(n_replicates)
    widths = [math.log(r["slowdown_hi"] / r["slowdown_lo"]) / 2
              for r in (slowdown(*run(rng, 1.1, n_replicates, between, within, samples)) for _ in range(200))]
    assert np.mean(widths) < most * oracle, (np.mean(widths), oracle)
    assert np.mean(widths) > 0.8 * oracle  # and not narrower than the truth allows


def test_the_estimate_is_the_geometric_mean_of_the_replicates():
    base = [[10.0, 10.0, 10.0], [20.0, 20.0]]
    variant = [[11.0, 11.0, 11.0], [24.0, 24.0]]
    assert list(replicate_ratios(base, variant)) == pytest.approx([1.1, 1.2])
    r = slowdown(base, variant)
    assert r["slowdown"] == pytest.approx(math.sqrt(1.1 * 1.2))
    assert r["replicates"] == 2 and r["slowdown_lo"] < r["slowdown"] < r["slowdown_hi"]
    # Two replicates: t(1) = 12.71 times the standard error of the two logs.
    half = 12.706 * abs(math.log(1.2) - math.log(1.1)) / 2
    assert math.log(r["slowdown_hi"] / r["slowdown"]) == pytest.approx(half, rel=1e-3)


def test_an_a_a_job_whose_medians_tie_keeps_the_timers_resolution():
    """Base against itself, samples in steps of the event timer's resolution over the launches
    (here 0.5 us / 100 launches at ~20 us per launch): the medians tie in every replicate.
    The replicates' spread alone says zero width; the interval keeps the step's rounding."""
    from ablate.gpu.stats import interval_text

    rng = np.random.default_rng(0)
    step = 0.5 / 100
    reps = [np.round((20 + rng.normal(0, 0.001, 20)) / step) * step for _ in range(3)]
    assert len({float(np.median(r)) for r in reps}) == 1  # they tie: the case of the report
    bare = slowdown(reps, reps)
    assert bare["slowdown_lo"] == bare["slowdown_hi"] == 1.0  # what the spread alone says
    r = slowdown(reps, reps, resolution=[(step, step)] * 3)
    # sd of one log ratio: sqrt(2/12) * step / 20; t(2) = 4.303 over sqrt(3) replicates
    half = 4.303 * math.sqrt(2 / 12) * step / 20 / math.sqrt(3)
    assert r["slowdown"] == 1.0 and math.log(r["slowdown_hi"]) == pytest.approx(half, rel=1e-3)
    assert not r["significant"]
    assert interval_text(r["slowdown"], r["slowdown_lo"], r["slowdown_hi"]) == "1.0000 [0.9997, 1.0003]"
    assert interval_text(1.0, 0.997, 1.004, "x") == "1.000x [0.997, 1.004]"
    # Where the replicates spread more than the step, the step changes nothing.
    noisy = [[10.0, 10.0], [10.0, 10.0], [10.0, 10.0]], [[11.0, 11.0], [12.0, 12.0], [11.5, 11.5]]
    assert slowdown(*noisy, resolution=[(step, step)] * 3) == slowdown(*noisy)


def test_base_against_base_is_not_significant():
    rng = np.random.default_rng(3)
    flagged = sum(slowdown(*run(rng, 1.0, 3, between=0.004))["significant"] for _ in range(100))
    assert flagged <= 10, f"base vs base called significant in {flagged} of 100 jobs"


def test_an_offset_below_min_effect_is_not_significant():
    # A 0.3% offset resolved by quiet replicates is real at min_effect 0 and not at 1%, while
    # a 5% slowdown still counts, and so does a 5% speed-up.
    rng = np.random.default_rng(7)
    quiet = dict(between=0.0005, within=0.002, samples=200)
    assert slowdown(*run(rng, 1.003, 5, **quiet))["significant"] == 1
    assert slowdown(*run(rng, 1.003, 5, **quiet), min_effect=0.01)["significant"] == 0
    assert slowdown(*run(rng, 1.05, 5, **quiet), min_effect=0.01)["significant"] == 1
    assert slowdown(*run(rng, 1 / 1.05, 5, **quiet), min_effect=0.01)["significant"] == 1


@pytest.mark.parametrize(
    "bad, message",
    [
        ([], "no samples"),
        ([1.0, 0.0, 2.0], "positive"),
        ([1.0, -3.0], "positive"),
        ([1.0, float("nan")], "NaN"),
        ([1.0, float("inf")], "NaN or infinity"),
    ],
)
def test_degenerate_samples_are_a_clear_error(bad, message):
    good = [1.0, 1.1, 0.9]
    with pytest.raises(ValueError, match=message):
        slowdown([good, good], [good, bad])
    with pytest.raises(ValueError, match=message):
        slowdown([bad, good], [good, good])
    with pytest.raises(ValueError, match=message):
        summary(bad)


def test_one_replicate_is_no_interval():
    with pytest.raises(ValueError, match="at least 2 replicates, got 1"):
        slowdown([[1.0, 2.0]], [[1.0, 2.0]])
    with pytest.raises(ValueError, match="2 base replicates against 1"):
        slowdown([[1.0], [1.0]], [[1.0]])


def test_min_effect_out_of_range_is_an_error():
    with pytest.raises(ValueError, match="min_effect"):
        slowdown([[1.0, 2.0]] * 2, [[1.0, 2.0]] * 2, min_effect=1.5)


def test_overlap():
    assert overlap(1.0, 1.1, 1.1, 1.2) and overlap(1.0, 1.3, 1.1, 1.2)
    assert not overlap(1.0, 1.09, 1.1, 1.2) and not overlap(1.2, 1.3, 1.0, 1.1)


# ---- the adaptive stop -------------------------------------------------------------------

BENCH = {"replicates": 3, "max_replicates": 8, "precision": 0.005, "budget_s": 60}


class Stream:
    """A synthetic job for timing.replicates: take(i) makes one replicate of base and variant
    and advances a fake clock by `seconds`, the time a replicate of timing takes."""

    def __init__(self, between, within=0.01, seconds=1.0, seed=0, truth=1.2):
        self.rng, self.args, self.seconds, self.now = np.random.default_rng(seed), (truth, 1, between, within), seconds, 0.0

    def take(self, i):
        self.now += self.seconds
        base, variant = run(self.rng, *self.args)
        return {"base": base[0], "variant": variant[0]}

    def clock(self):
        return self.now


def adaptive(stream, bench=BENCH):
    return replicates(stream.take, bench, estimate, stream.clock)


def estimate(reps):
    return slowdown([r["base"] for r in reps], [r["variant"] for r in reps])


def test_a_quiet_job_stops_at_the_precision_with_the_fewest_replicates():
    reps, reason, seconds = adaptive(Stream(between=0.0002, within=0.002))
    assert reason == "precision" and len(reps) == 3 and seconds == 3.0
    assert estimate(reps)["half_width"] <= 0.005


def test_a_noisy_job_says_so_and_stops_at_the_replicate_cap():
    reps, reason, _ = adaptive(Stream(between=0.05))
    assert reason == "max_replicates" and len(reps) == 8
    assert estimate(reps)["half_width"] > 0.005


def test_the_budget_stops_a_noisy_job_but_never_before_the_minimum():
    reps, reason, seconds = adaptive(Stream(between=0.05, seconds=10.0), {**BENCH, "budget_s": 45})
    assert reason == "budget" and len(reps) == 5 and seconds == 50.0
    reps, reason, _ = adaptive(Stream(between=0.05, seconds=10.0), {**BENCH, "budget_s": 0})
    assert reason == "budget" and len(reps) == 3  # the minimum is taken whatever the budget


def test_more_replicates_narrow_the_interval_until_the_precision_is_met():
    reps, reason, _ = adaptive(Stream(between=0.002, within=0.004, seed=5))
    assert reason == "precision" and 3 < len(reps) <= 8
    assert estimate(reps[:3])["half_width"] > 0.005 >= estimate(reps)["half_width"]


def test_a_calibrations_launches_take_consecutive_sets_of_the_rotation():
    """twice: two launches per launch, walking the rotation in order as the base does, so that
    each finds its set cold (sets i and i + 1 read each set twice in a row: 0, 1, 1, 2, ...)."""
    from ablate.gpu.timing import kernel_launcher

    seen = []
    launch = kernel_launcher(lambda tensors, shape: seen.append(tensors), ["s0", "s1", "s2"], {}, launches=2)
    for i in range(3):
        launch(i)
    assert seen == ["s0", "s1", "s2", "s0", "s1", "s2"]
    seen.clear()
    kernel_launcher(lambda tensors, shape: seen.append(tensors), ["only"], {}, launches=2)(0)
    assert seen == ["only", "only"]  # warm L2 (one set): both launches find it warm, as the base's do
