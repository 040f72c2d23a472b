"""Statistics that hold at small n (3 to 10 seeds, a handful of problems): exact or distribution-free, numpy only.

Every interval here has AT LEAST its nominal coverage for every distribution its docstring names, at every n (none
rests on a normal approximation or on resampling), and none has zero width: three seeds that agree still leave
room for a fourth that does not. Bounds are found by bisection on exact binomial sums, on the relative entropy or
on a betting capital, so no special-function library is needed. p-values of several comparisons in one report are
Holm-adjusted together (`holm`, `holm_correct`). Tests: tests/test_stats.py and the simulations
tests/test_stats_coverage.py and tests/test_stats_betting.py.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field, replace

import numpy as np

from evolve.report.permutation import permutation_test, snap_ties

_BISECTIONS = 64  # halvings of [0, 1]: far below float resolution of any printed bound
_PRODUCT_ROWS = 12  # factors multiplied before a log: each <= n * 2^40 (bisection stays 2^-40 of the mean
# away from 0 and 1), so twelve of them stay far inside a float
_BET_BISECTIONS = 40  # halvings for a betting bound: 1e-12, far below any printed digit
_CANDIDATES = 256  # candidate means tried at once per pass of a betting bound's search (few columns only)
# The betting interval's bets: fractions s of the largest bet a candidate mean m allows (1/m betting that values
# exceed m, 1/(1 - m) that they fall short). Small fractions win on spread-out values and many of them, large ones
# on values that agree; fixed in advance (never tuned to the data), so the mixture is a valid e-value.
BET_FRACTIONS = np.concatenate([0.5 ** np.arange(6, 0, -1), 1.0 - 0.5 ** np.arange(2, 9)])


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
    width: float = field(init=False)  # high - low, carried so that report.json and study_report.json show it

    def __post_init__(self) -> None:
        object.__setattr__(self, "width", self.high - self.low)


_EXACT_TERMS_UP_TO = 1000  # past this n, math.comb(n, i) can exceed the largest float


def binomial_cdf(k: int, n: int, p: float) -> float:
    """P(X <= k) for X ~ Binomial(n, p), summed term by term: each term exactly up to n = 1000, past it from its
    logarithm (the binomial coefficient alone would overflow a float)."""
    if k < 0:
        return 0.0
    if k >= n:
        return 1.0
    if n <= _EXACT_TERMS_UP_TO:
        return math.fsum(math.comb(n, i) * p ** i * (1.0 - p) ** (n - i) for i in range(k + 1))
    if p <= 0.0 or p >= 1.0:
        return 1.0 if p <= 0.0 else 0.0
    log_p, log_q, log_n = math.log(p), math.log1p(-p), math.lgamma(n + 1)
    return min(1.0, math.fsum(math.exp(log_n - math.lgamma(i + 1) - math.lgamma(n - i + 1) + i * log_p
                                       + (n - i) * log_q) for i in range(k + 1)))


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
    bound equals Clopper-Pearson's. It sees only the mean, so values that agree get as wide an interval as values
    spread over the range: the report uses `betting_bounds`; this is the reference the tests measure it against."""
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


def _log_capital(values: np.ndarray, candidate: np.ndarray, side: int) -> np.ndarray:
    """log K(m) per column: the capital of a gambler who spreads one unit evenly over the constant bets
    `BET_FRACTIONS` that the mean of `values` [n, columns] (in [0, 1]) is above (side +1) or below (side -1) the
    column's candidate mean m: K(m) = mean over s of prod_i (1 + side * s / room * (x_i - m)), room = m or 1 - m.

    Each factor is >= 0 for every x in [0, 1]. K(m) never rises as m rises (side +1) or falls (side -1): every
    factor is monotone in m, so each one-sided bound is found by a search on m (`_boundary`)."""
    room = np.maximum(candidate if side > 0 else 1.0 - candidate, 1e-300)  # [columns]
    bets = side * BET_FRACTIONS[:, None] / room[None, :]  # [bets, columns]
    logs = np.zeros((BET_FRACTIONS.size, values.shape[1]))
    for start in range(0, values.shape[0], _PRODUCT_ROWS):  # multiply a block of factors, then one log per block
        block = values[None, start:start + _PRODUCT_ROWS, :] - candidate[None, None, :]
        factors = np.maximum(1.0 + bets[:, None, :] * block, 0.0).prod(axis=1)  # [bets, columns]
        with np.errstate(divide="ignore"):
            logs += np.log(factors)  # -inf where a bet lost everything
    top = logs.max(axis=0)
    finite = np.isfinite(top)
    shift = np.where(finite, top, 0.0)
    return np.where(finite, shift + np.log(np.exp(logs - shift).mean(axis=0)), -np.inf)


def betting_bounds(values: np.ndarray, confidence: float = 0.95) -> tuple[np.ndarray, np.ndarray]:
    """Betting confidence bounds for the mean of each column of `values` [n, columns], values in [0, 1].

    Waudby-Smith and Ramdas, "Estimating means of bounded random variables by betting" (JRSS-B 2024), with their
    diversified-Kelly capital (a fixed mixture of constant bets, `_log_capital`), hedged: the interval is the set
    of candidate means m where both one-sided capitals stay below 2 / alpha. Guarantee: for n independent values in
    [0, 1] whose expectations mu_i average mu (not necessarily equal), E[K(mu)] = mean over s of
    prod_i (1 + lambda_s (mu_i - mu)) <= 1 (arithmetic-geometric mean inequality), so by Markov
    P(mu < low) <= alpha / 2 and P(mu > high) <= alpha / 2: coverage >= confidence for every distribution at every
    n. Constant bets are what keep that guarantee when the means differ (problems of unequal difficulty); a
    predictable plug-in bet learned from earlier values has no such bound there. Unlike `kl_bounds` the bounds use
    the spread of the values, not only their mean: values that agree give a narrow interval, never a zero one.
    Deterministic; the order of the values does not matter (the capital is a product of constant bets)."""
    values = np.clip(np.asarray(values, dtype=float), 0.0, 1.0)
    if values.ndim != 2 or values.shape[0] < 1:
        raise ValueError("betting_bounds needs values as [n >= 1, columns]")
    # a curve's columns repeat wherever it is flat: bound each distinct column once
    values, inverse = np.unique(values, axis=1, return_inverse=True)
    threshold = math.log(2.0 / (1.0 - confidence))
    mean = values.mean(axis=0)  # never rejected (each capital is <= 1 there), so each bound is on its side of it
    # lower bound: K+(m) >= threshold below it, < above; of its last bracket the rejected end (errs wide)
    lower = _boundary(values, +1, threshold, np.zeros_like(mean), mean.copy())[0]
    upper = _boundary(values, -1, threshold, mean.copy(), np.ones_like(mean))[1]
    inverse = inverse.ravel()
    return lower[inverse], upper[inverse]


def _boundary(values: np.ndarray, side: int, threshold: float, low: np.ndarray,
              high: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Narrow each column's bracket [low, high] around the candidate mean where the side's log capital crosses
    `threshold` (rejected below it for side +1, above it for side -1) to 2^-_BET_BISECTIONS: each pass tries
    2^k - 1 evenly spaced candidates per column at once (k up to 6 when there are few columns), a bisection when
    there are many."""
    columns = values.shape[1]
    bits = max(1, min(6, int(math.log2(max(1.0, _CANDIDATES / columns)))))
    tried = 2 ** bits - 1
    repeated = np.repeat(values, tried, axis=1)  # [n, columns * tried]
    fractions = np.arange(1, tried + 1) / (tried + 1)
    for _ in range(math.ceil(_BET_BISECTIONS / bits)):
        candidates = low[:, None] + (high - low)[:, None] * fractions[None, :]  # [columns, tried], ascending
        rejected = (_log_capital(repeated, candidates.ravel(), side) >= threshold).reshape(columns, tried)
        if side < 0:
            rejected = ~rejected  # flip so that "below the boundary" reads True for both sides
        below = rejected.sum(axis=1)  # candidates on the low side of the boundary (monotone in m)
        low = np.where(below > 0, candidates[np.arange(columns), np.maximum(below - 1, 0)], low)
        high = np.where(below < tried, candidates[np.arange(columns), np.minimum(below, tried - 1)], high)
    return low, high


def mean_interval(values: np.ndarray, confidence: float = 0.95,
                  value_range: tuple[float, float] = (0.0, 1.0)) -> Interval:
    """The mean of `values` (one per seed, or per problem) with the betting interval (`betting_bounds`).

    Values are scaled from `value_range` to [0, 1] first. Guarantee: coverage >= confidence for independent
    values inside the range, whatever their distributions (equal means or not), at every n >= 1; never zero width.
    A value outside the range widens the range to hold it and is counted in `out_of_range` (the report flags it)."""
    values = np.asarray(values, dtype=float).ravel()
    if values.size == 0:
        raise ValueError("mean_interval needs at least one value")
    low_end, high_end = value_range
    outside = int(np.sum((values < low_end) | (values > high_end)))
    low_end, high_end = min(low_end, float(values.min())), max(high_end, float(values.max()))
    span = high_end - low_end
    low, high = betting_bounds(((values - low_end) / span)[:, None], confidence)
    return Interval(float(values.mean()), low_end + span * float(low[0]), low_end + span * float(high[0]),
                    int(values.size), outside)


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
    low, high = betting_bounds((matrix - low_end) / span, confidence)
    return matrix.mean(axis=0), low_end + span * low, low_end + span * high, outside


def sign_test(differences: np.ndarray) -> float:
    """Two-sided exact sign test: p-value of as many or more problems on one side, ties (zero) dropped.

    Exact under the null that each nonzero difference is as likely positive as negative, independently."""
    differences = snap_ties(differences)
    positive, negative = int(np.sum(differences > 0)), int(np.sum(differences < 0))
    n = positive + negative
    if n == 0:
        return 1.0
    return min(1.0, 2.0 * binomial_cdf(min(positive, negative), n, 0.5))


@dataclass(frozen=True)
class PairedDifference:
    """Policy a minus policy b over the problems both ran: per problem, then the mean with interval and tests.

    The raw p-values test this comparison alone; the `_holm` ones are adjusted over every comparison of the report
    (`holm_correct`; `family` counts them), and `significant` (Holm-adjusted permutation p <= alpha) is the only
    verdict a report should print."""

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
    alpha: float = 0.05  # 1 - confidence: the level of the interval and of `significant`
    sign_p_holm: float = 1.0
    permutation_p_holm: float = 1.0
    family: int = 1  # comparisons adjusted together
    significant: bool = False


def paired_difference(metric: str, policy_a: str, policy_b: str, problems: tuple[str, ...], a: np.ndarray,
                      b: np.ndarray, confidence: float = 0.95,
                      value_range: tuple[float, float] = (0.0, 1.0), samples: int = 100_000) -> PairedDifference:
    """The paired per-problem difference a - b (each a per-problem value in `value_range`).

    Interval: the differences live in [-(hi - lo), hi - lo]; rescaled to [0, 1] they go through `mean_interval`
    (the betting interval), whose guarantee holds for independent, non-identically distributed values: it covers
    the average over these problems of the true per-problem difference with at least `confidence`, whatever the
    distributions. Tests: `sign_test` and `permutation_test` over problems; alone, the comparison is a family of
    one (Holm-adjusted = raw); `holm_correct` adjusts a report's comparisons together."""
    differences = snap_ties(np.asarray(a, dtype=float) - np.asarray(b, dtype=float))
    width = value_range[1] - value_range[0]
    interval = mean_interval(differences, confidence, (-width, width))
    permutation_p, exact = permutation_test(differences, samples=samples)
    sign_p, alpha = sign_test(differences), 1.0 - confidence
    return PairedDifference(metric, policy_a, policy_b, problems, tuple(map(float, differences)), interval,
                            sign_p, permutation_p, exact, int(np.sum(differences > 0)),
                            int(np.sum(differences < 0)), int(np.sum(differences == 0)), alpha, sign_p,
                            permutation_p, 1, permutation_p <= alpha)


def holm(p_values: np.ndarray | list[float]) -> np.ndarray:
    """Holm's (1979) step-down adjusted p-values, in the order given.

    Sorted ascending p_(1) <= ... <= p_(k), the adjusted p_(i) is max over j <= i of min(1, (k - j + 1) p_(j)).
    Rejecting every hypothesis whose adjusted p is <= alpha keeps the chance of any false rejection among the k
    at most alpha, whatever the dependence between the tests."""
    p = np.asarray(p_values, dtype=float).ravel()
    k = p.size
    if k == 0:
        return p
    order = np.argsort(p, kind="stable")
    stepped = np.minimum(1.0, np.maximum.accumulate((k - np.arange(k)) * p[order]))
    adjusted = np.empty(k)
    adjusted[order] = stepped
    return adjusted


def holm_correct(differences: tuple[PairedDifference, ...] | list[PairedDifference],
                 family: int | None = None) -> tuple[PairedDifference, ...]:
    """Every comparison of one report, its sign and permutation p-values Holm-adjusted over all of them (each
    test's p-values a family of their own), and `significant` set from the adjusted permutation p. `family`: the
    size of a family fixed in advance (a study's registered comparisons), when some of it could not be computed:
    those count with p = 1, so the family is not smaller for them."""
    differences = tuple(differences)
    missing = [1.0] * max(0, (family or 0) - len(differences))
    signs = holm([d.sign_p for d in differences] + missing)[:len(differences)]
    permutations = holm([d.permutation_p for d in differences] + missing)[:len(differences)]
    return tuple(replace(d, sign_p_holm=float(s), permutation_p_holm=float(q), family=len(differences) + len(missing),
                         significant=bool(q <= d.alpha))
                 for d, s, q in zip(differences, signs, permutations, strict=True))


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
