"""Every 95% interval the report prints covers a known truth at least 93% of the time, at n = 3, 5 and 10 seeds.

Simulations with a known truth, seeded, vectorised (a few seconds in all): Clopper-Pearson for "cracked k of n",
the mean interval (the betting interval: the report's mean best scalar and every point of its curve bands), the
paired per-problem difference between two policies, and the bands of best-so-far and share-cracked curves. The
betting interval's own tests (n = 30, unequal means, width against Hoeffding's) are in tests/test_stats_betting.py.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
import pytest

from evolve.report.stats import BET_FRACTIONS, clopper_pearson, curve_bands, mean_interval, paired_difference

REPLICATES = 2000
LEVEL = 0.95
FLOOR = 0.93
SEED_COUNTS = (3, 5, 10)

Sampler = Callable[[np.random.Generator, tuple[int, ...]], np.ndarray]
# name -> (sampler of values in [0, 1], true mean)
TRUTHS: dict[str, tuple[Sampler, float]] = {
    "bernoulli p=0.05": (lambda rng, size: (rng.random(size) < 0.05).astype(float), 0.05),
    "bernoulli p=0.5": (lambda rng, size: (rng.random(size) < 0.5).astype(float), 0.5),
    "beta(2, 5)": (lambda rng, size: rng.beta(2.0, 5.0, size), 2.0 / 7.0),
    "beta(0.5, 0.5)": (lambda rng, size: rng.beta(0.5, 0.5, size), 0.5),
    "0.9 w.p. 0.8, 1.0 w.p. 0.2": (lambda rng, size: np.where(rng.random(size) < 0.8, 0.9, 1.0), 0.92),
    "all agree at 0.7": (lambda rng, size: np.full(size, 0.7), 0.7),
    "all agree at 0": (lambda rng, size: np.zeros(size), 0.0),
}


@pytest.mark.parametrize("n", SEED_COUNTS)
@pytest.mark.parametrize("p", [0.05, 0.5, 0.9])
def test_clopper_pearson_covers_the_true_crack_probability(n: int, p: float) -> None:
    rng = np.random.default_rng(100 * n + round(100 * p))
    table = np.array([clopper_pearson(k, n, LEVEL) for k in range(n + 1)])
    cracked = rng.binomial(n, p, REPLICATES)
    low, high = table[cracked, 0], table[cracked, 1]
    coverage = np.mean((low <= p) & (p <= high))
    assert coverage >= FLOOR, (n, p, coverage)
    # exact, so the true coverage can be summed over k as well: at least nominal, not just in this sample
    exact = sum(clopper_pearson(k, n, LEVEL)[0] <= p <= clopper_pearson(k, n, LEVEL)[1]
                and np.exp(_log_binomial_pmf(k, n, p)) or 0.0 for k in range(n + 1))
    assert exact >= LEVEL - 1e-9, exact


def _log_binomial_pmf(k: int, n: int, p: float) -> float:
    from math import comb, log

    return log(comb(n, k)) + k * log(p) + (n - k) * log(1 - p)


@pytest.mark.parametrize("n", SEED_COUNTS)
@pytest.mark.parametrize("truth", list(TRUTHS))
def test_mean_interval_covers_the_true_mean_for_every_distribution(n: int, truth: str) -> None:
    sampler, mean = TRUTHS[truth]
    rng = np.random.default_rng(n * 7919 + len(truth))
    values = sampler(rng, (n, REPLICATES))  # a column per replicate: curve_bands gives each its interval
    _, low, high, outside = curve_bands(values, LEVEL)
    coverage = np.mean((low <= mean + 1e-12) & (mean - 1e-12 <= high))
    assert outside == 0 and coverage >= FLOOR, (truth, n, coverage)
    assert np.all(high - low > 0.05), "an interval of zero width reads as certainty"
    # the report's table cell uses mean_interval: the same interval as curve_bands for one column
    single = mean_interval(values[:, 0], LEVEL)
    assert np.isclose(single.low, low[0]) and np.isclose(single.high, high[0]) and single.n == n


@pytest.mark.parametrize("n", SEED_COUNTS)
def test_paired_difference_interval_covers_the_mean_true_difference_over_problems(n: int) -> None:
    rng = np.random.default_rng(n)
    problems = tuple(f"p{i}" for i in range(6))
    crack_a = np.array([0.05, 0.5, 0.9, 0.3, 0.0, 1.0])
    crack_b = np.array([0.0, 0.3, 0.95, 0.5, 0.0, 0.6])
    best_a = np.array([(2.0, 5.0), (0.5, 0.5), (5.0, 1.0), (1.0, 1.0), (3.0, 3.0), (8.0, 2.0)])  # beta shapes
    best_b = np.array([(2.0, 2.0), (1.0, 3.0), (5.0, 1.0), (0.5, 2.0), (3.0, 3.0), (2.0, 8.0)])
    truths = {"cracked_share": float(np.mean(crack_a - crack_b)),
              "mean_best": float(np.mean(best_a[:, 0] / best_a.sum(1) - best_b[:, 0] / best_b.sum(1)))}
    size = (6, REPLICATES, n)  # problems x replicates x seeds; per problem, the mean over its seeds
    per_problem = {
        "cracked_share": ((rng.random(size) < crack_a[:, None, None]).mean(axis=2),
                          (rng.random(size) < crack_b[:, None, None]).mean(axis=2)),
        "mean_best": (rng.beta(best_a[:, 0, None, None], best_a[:, 1, None, None], size).mean(axis=2),
                      rng.beta(best_b[:, 0, None, None], best_b[:, 1, None, None], size).mean(axis=2)),
    }
    for metric, (a, b) in per_problem.items():
        # paired_difference's interval is mean_interval of the differences over [-1, 1]: vectorised here
        _, low, high, _ = curve_bands(a - b, LEVEL, (-1.0, 1.0))
        coverage = np.mean((low <= truths[metric]) & (truths[metric] <= high))
        assert coverage >= FLOOR, (metric, n, coverage)
        for replicate in range(3):  # and it is the interval the report prints
            printed = paired_difference(metric, "A", "B", problems, a[:, replicate], b[:, replicate], LEVEL).mean
            assert (printed.n, printed.low, printed.high) == (6, pytest.approx(low[replicate]),
                                                               pytest.approx(high[replicate]))


@pytest.mark.parametrize("n", SEED_COUNTS)
def test_curve_bands_cover_the_true_best_so_far_and_share_cracked_at_every_point(n: int) -> None:
    rng = np.random.default_rng(1000 + n)
    horizon, replicates = 12, REPLICATES // 2  # 13 points each: 13 000 intervals per n
    t = np.arange(horizon + 1)
    # best so far: the seed program scores 0, then one uniform(0, 1) child per iteration: E[max] = t / (t + 1)
    draws = rng.random((replicates, n, horizon))
    best = np.concatenate([np.zeros((replicates, n, 1)), np.maximum.accumulate(draws, axis=2)], axis=2)
    # share cracked: 4 problems, each cracked at each iteration with its own probability
    rates = np.array([0.02, 0.1, 0.3, 0.0])
    first = rng.geometric(np.where(rates > 0, rates, 1.0), size=(replicates, n, rates.size))
    first = np.where(rates > 0, first, horizon + 1)
    share = (first[..., None] <= t).mean(axis=2)  # [replicates, seeds, points]
    truths = {"best": t / (t + 1), "share": np.mean(1 - (1 - rates[:, None]) ** t, axis=0)}
    for name, curves in (("best", best), ("share", share)):
        # one column per (replicate, point): curve_bands bands each column on its own, as on a report's curve
        columns = curves.transpose(1, 0, 2).reshape(n, replicates * t.size)
        _, low, high, _ = curve_bands(columns, LEVEL)
        truth = np.tile(truths[name], replicates)
        hits = ((low <= truth + 1e-12) & (truth - 1e-12 <= high)).reshape(replicates, t.size)
        coverage = hits.mean(axis=0)
        assert coverage.min() >= FLOOR, (name, n, coverage)


def test_seeds_that_agree_give_an_interval_of_nonzero_width() -> None:
    for values in ([0.0, 0.0, 0.0], [1.0, 1.0, 1.0], [0.5, 0.5, 0.5]):
        interval = mean_interval(np.array(values), LEVEL)
        assert interval.high - interval.low > 0.25, (values, interval)
    # three zeros: the upper bound is where the gambler betting on "below m" reaches 2 / alpha = 40, a little
    # above Clopper-Pearson's 0 of 3 (1 - 0.025^(1/3) = 0.708)
    high = mean_interval(np.zeros(3)).high
    assert np.mean((1 + BET_FRACTIONS * high / (1 - high)) ** 3) == pytest.approx(40.0, rel=1e-6)
    assert 0.70 < high < 0.78
    assert clopper_pearson(0, 3) == pytest.approx((0.0, 1 - 0.025 ** (1 / 3)))
    assert clopper_pearson(3, 3)[0] == pytest.approx(0.025 ** (1 / 3))
    _, low, high, _ = curve_bands(np.zeros((3, 4)))
    assert np.all(high > 0.7) and np.all(low == 0)
