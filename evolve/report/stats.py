"""Statistics that hold at small n (3 to 10 seeds, a handful of problems): exact or distribution-free, numpy only.

Every interval here has AT LEAST its nominal coverage for every distribution its docstring names, at every n (none
rests on a normal approximation or on resampling), and none has zero width: three seeds that agree still leave
room for a fourth that does not. Bounds are found by bisection on exact binomial sums or on the relative entropy,
so no special-function library is needed. Tests: tests/test_stats.py and the simulation tests/test_stats_coverage.py.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from itertools import product

import numpy as np

_BISECTIONS = 64  # halvings of [0, 1]: far below float resolution of any printed bound


@dataclass(frozen=True)
class Interval:
    """An estimate with its interval; n is what it rests on (seeds, or problems for a paired difference).

    `out_of_range` counts values outside the declared range: the range was widened to hold them, and the
    guarantee then holds only if the widened range bounds every value the process can produce."""

    estimate: float
    low: float
    high: float
    n: int
    out_of_range: int = 0


def binomial_cdf(k: int, n: int, p: float) -> float:
    """P(X <= k) for X ~ Binomial(n, p), summed exactly term by term."""
    if k < 0:
        return 0.0
    if k >= n:
        return 1.0
    return math.fsum(math.comb(n, i) * p ** i * (1.0 - p) ** (n - i) for i in range(k + 1))


def _bisect(increasing: bool, target: float, function, low: float = 0.0, high: float = 1.0) -> float:
    """The root of function(x) = target on [low, high] for a monotone function of one variable."""
    for _ in range(_BISECTIONS):
        middle = (low + high) / 2
        if (function(middle) < target) == increasing:
            low = middle
        else:
            high = middle
    return (low + high) / 2


def clopper_pearson(k: int, n: int, confidence: float = 0.95) -> tuple[float, float]:
    """Exact (Clopper-Pearson) interval for a binomial proportion: "cracked k of n seeds".

    Guarantee: for every true p, P(low <= p <= high) >= confidence at every n (each tail has at most
    (1 - confidence) / 2), because the bounds invert the exact binomial tail sums. At k = 0 the interval is
    [0, 1 - (alpha/2)^(1/n)], at k = n it is [(alpha/2)^(1/n), 1]: never zero width."""
    if n < 1 or not 0 <= k <= n:
        raise ValueError(f"clopper_pearson needs 0 <= k <= n and n >= 1, got k={k}, n={n}")
    tail = (1.0 - confidence) / 2
    # P(X >= k; p) = 1 - cdf(k - 1) grows with p; P(X <= k; p) = cdf(k) falls with p
    low = 0.0 if k == 0 else _bisect(True, tail, lambda p: 1.0 - binomial_cdf(k - 1, n, p))
    high = 1.0 if k == n else _bisect(False, tail, lambda p: binomial_cdf(k, n, p))
    return low, high


def bernoulli_kl(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """kl(a, b) = a log(a/b) + (1-a) log((1-a)/(1-b)), the relative entropy of Bernoulli(a) from Bernoulli(b)."""
    a, b = np.asarray(a, dtype=float), np.clip(np.asarray(b, dtype=float), 1e-300, 1 - 1e-16)
    with np.errstate(divide="ignore", invalid="ignore"):
        left = np.where(a > 0, a * np.log(np.where(a > 0, a, 1.0) / b), 0.0)
        right = np.where(a < 1, (1 - a) * np.log(np.where(a < 1, 1 - a, 1.0) / (1 - b)), 0.0)
    return left + right


def kl_bounds(means: np.ndarray, n: int, confidence: float = 0.95) -> tuple[np.ndarray, np.ndarray]:
    """Vectorised Hoeffding (1963) relative-entropy bounds for means of n values in [0, 1].

    Returns {mu : n * kl(mean, mu) <= log(2 / alpha)} as (low, high), element by element. Guarantee: for n
    independent (not necessarily identically distributed) values in [0, 1] whose expectations average mu,
    P(mu < low) <= alpha/2 and P(mu > high) <= alpha/2 (Chernoff-Hoeffding: P(mean >= mu + t) <=
    exp(-n kl(mu + t, mu))), so coverage >= confidence for every distribution at every n. At mean 0 or 1 the
    bound equals Clopper-Pearson's."""
    means = np.clip(np.asarray(means, dtype=float), 0.0, 1.0)
    budget = math.log(2.0 / (1.0 - confidence)) / n
    low, high = np.zeros_like(means), means.copy()  # lower bound: kl(mean, mu) falls as mu rises to mean
    for _ in range(_BISECTIONS):
        middle = (low + high) / 2
        outside = bernoulli_kl(means, middle) > budget
        low, high = np.where(outside, middle, low), np.where(outside, high, middle)
    lower = np.where(means <= 0, 0.0, low)
    low, high = means.copy(), np.ones_like(means)  # upper bound: kl(mean, mu) rises as mu rises past mean
    for _ in range(_BISECTIONS):
        middle = (low + high) / 2
        inside = bernoulli_kl(means, middle) <= budget
        low, high = np.where(inside, middle, low), np.where(inside, high, middle)
    upper = np.where(means >= 1, 1.0, high)
    return lower, upper


def mean_interval(values: np.ndarray, confidence: float = 0.95,
                  value_range: tuple[float, float] = (0.0, 1.0)) -> Interval:
    """The mean of `values` (one per seed) with the inverted Hoeffding relative-entropy interval (`kl_bounds`).

    Values are scaled from `value_range` to [0, 1] first. Guarantee: coverage >= confidence for independent
    values inside the range, whatever their distribution, at every n >= 1; never zero width. A value outside
    the range widens the range to hold it and is counted in `out_of_range` (the report flags it)."""
    values = np.asarray(values, dtype=float).ravel()
    if values.size == 0:
        raise ValueError("mean_interval needs at least one value")
    low_end, high_end = value_range
    outside = int(np.sum((values < low_end) | (values > high_end)))
    low_end, high_end = min(low_end, float(values.min())), max(high_end, float(values.max()))
    span = high_end - low_end
    mean = float(values.mean())
    low, high = kl_bounds(np.array([(mean - low_end) / span]), values.size, confidence)
    return Interval(mean, low_end + span * float(low[0]), low_end + span * float(high[0]), int(values.size), outside)


def curve_bands(matrix: np.ndarray, confidence: float = 0.95,
                value_range: tuple[float, float] = (0.0, 1.0)) -> tuple[np.ndarray, np.ndarray, np.ndarray, int]:
    """Pointwise `mean_interval` of a [seeds x points] matrix: (mean, low, high, values outside the range).

    Each point's band has mean_interval's guarantee for that point (pointwise, not simultaneous over the curve)."""
    matrix = np.asarray(matrix, dtype=float)
    low_end, high_end = value_range
    outside = int(np.sum((matrix < low_end) | (matrix > high_end)))
    if outside:
        low_end, high_end = min(low_end, float(matrix.min())), max(high_end, float(matrix.max()))
    span = high_end - low_end
    mean = matrix.mean(axis=0)
    low, high = kl_bounds((mean - low_end) / span, matrix.shape[0], confidence)
    return mean, low_end + span * low, low_end + span * high, outside


def sign_test(differences: np.ndarray) -> float:
    """Two-sided exact sign test: p-value of as many or more problems on one side, ties (zero) dropped.

    Exact under the null that each nonzero difference is as likely positive as negative, independently."""
    differences = np.asarray(differences, dtype=float)
    positive, negative = int(np.sum(differences > 0)), int(np.sum(differences < 0))
    n = positive + negative
    if n == 0:
        return 1.0
    return min(1.0, 2.0 * binomial_cdf(min(positive, negative), n, 0.5))


def permutation_test(differences: np.ndarray, exact_up_to: int = 20, samples: int = 100_000,
                     seed: int = 0) -> tuple[float, bool]:
    """Two-sided paired permutation (sign-flip) test of mean difference 0: (p-value, exact?).

    Under the null each problem's difference is symmetric about 0, so every sign pattern is equally likely. Up to
    `exact_up_to` problems every pattern is enumerated (exact p-value); beyond, `samples` seeded random patterns
    give the Monte Carlo p-value (hits + 1) / (samples + 1), which is itself a valid p-value."""
    differences = np.asarray(differences, dtype=float)
    n = differences.size
    if n == 0:
        return 1.0, True
    observed = abs(differences.sum())
    tolerance = 1e-12 * max(1.0, float(np.abs(differences).sum()))
    if n <= exact_up_to:
        hits = 0
        chunk_bits = min(n, 16)
        low_signs = np.array(list(product((1.0, -1.0), repeat=chunk_bits)))  # [2^chunk, chunk]
        low_sums = low_signs @ differences[:chunk_bits]
        for high_signs in product((1.0, -1.0), repeat=n - chunk_bits):
            rest = float(np.dot(high_signs, differences[chunk_bits:])) if high_signs else 0.0
            hits += int(np.sum(np.abs(low_sums + rest) >= observed - tolerance))
        return hits / 2 ** n, True
    rng = np.random.default_rng(seed)
    hits = 0
    for start in range(0, samples, 10_000):
        signs = rng.choice((-1.0, 1.0), size=(min(10_000, samples - start), n))
        hits += int(np.sum(np.abs(signs @ differences) >= observed - tolerance))
    return (hits + 1) / (samples + 1), False


@dataclass(frozen=True)
class PairedDifference:
    """Policy a minus policy b over the problems both ran: per problem, then the mean with interval and tests."""

    metric: str  # "cracked_share" (share of seeds cracked) or "mean_best" (mean over seeds of the best scalar)
    policy_a: str
    policy_b: str
    problems: tuple[str, ...]
    per_problem: tuple[float, ...]
    mean: Interval  # n = problems
    sign_p: float
    permutation_p: float
    permutation_exact: bool
    wins: int  # problems where a is ahead
    losses: int
    ties: int


def paired_difference(metric: str, policy_a: str, policy_b: str, problems: tuple[str, ...], a: np.ndarray,
                      b: np.ndarray, confidence: float = 0.95,
                      value_range: tuple[float, float] = (0.0, 1.0), samples: int = 100_000) -> PairedDifference:
    """The paired per-problem difference a - b (each a per-problem value in `value_range`).

    Interval: the differences live in [-(hi - lo), hi - lo]; rescaled to [0, 1] they go through `mean_interval`,
    whose guarantee holds for independent, non-identically distributed values: it covers the average over these
    problems of the true per-problem difference with at least `confidence`, whatever the distributions. Tests:
    `sign_test` and `permutation_test` over problems."""
    differences = np.asarray(a, dtype=float) - np.asarray(b, dtype=float)
    width = value_range[1] - value_range[0]
    interval = mean_interval(differences, confidence, (-width, width))
    permutation_p, exact = permutation_test(differences, samples=samples)
    return PairedDifference(metric, policy_a, policy_b, problems, tuple(map(float, differences)), interval,
                            sign_test(differences), permutation_p, exact, int(np.sum(differences > 0)),
                            int(np.sum(differences < 0)), int(np.sum(differences == 0)))


@dataclass(frozen=True)
class Survival:
    """Kaplan-Meier estimate of P(cracked by t) from seeds that cracked (events) and seeds that never did.

    A seed that never cracked is censored at its budget (the iterations it ran), not dropped."""

    times: tuple[float, ...]  # the distinct event times, ascending
    cracked_by: tuple[float, ...]  # 1 - S(t) at each event time (a step function, right-continuous)
    median: float | None  # the first time 1 - S(t) >= 1/2; None when the curve never reaches 1/2
    events: int
    censored: int
    longest_budget: float | None  # the largest censoring time: "median > this" when median is None


def kaplan_meier(times: list[float], cracked: list[bool]) -> Survival:
    """Product-limit estimate: S(t) = prod over event times t_i <= t of (1 - d_i / n_i), where n_i counts seeds
    still at risk (not cracked, not censored before t_i; a seed censored at t_i is still at risk at t_i).

    With no censoring before the last event it equals the empirical share of seeds cracked by t; it is
    consistent under independent censoring. The median is the smallest t with 1 - S(t) >= 1/2."""
    if len(times) != len(cracked):
        raise ValueError("kaplan_meier: one time per seed, one cracked flag per seed")
    event_times = sorted({t for t, c in zip(times, cracked, strict=True) if c})
    survival, steps, median = 1.0, [], None
    for t in event_times:
        at_risk = sum(1 for u in times if u >= t)
        deaths = sum(1 for u, c in zip(times, cracked, strict=True) if c and u == t)
        survival *= 1.0 - deaths / at_risk
        steps.append(1.0 - survival)
        if median is None and 1.0 - survival >= 0.5 - 1e-12:
            median = float(t)
    censored_times = [t for t, c in zip(times, cracked, strict=True) if not c]
    return Survival(tuple(map(float, event_times)), tuple(steps), median, sum(cracked), len(censored_times),
                    max(censored_times) if censored_times else None)
