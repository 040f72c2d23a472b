"""The betting interval (coverage at n = 30, width against Hoeffding's) and Holm's correction (seeded simulations)."""

from __future__ import annotations

from collections.abc import Callable
from itertools import combinations

import numpy as np
import pytest

from evolve.report.stats import (
    betting_bounds,
    curve_bands,
    holm,
    holm_correct,
    kl_bounds,
    mean_interval,
    paired_difference,
)

DATASETS = 400
N = 30
LEVEL = 0.95

Sampler = Callable[[np.random.Generator, tuple[int, int]], np.ndarray]


def _shares(rng: np.random.Generator, crack: np.ndarray, seeds: int = 5) -> np.ndarray:
    """Per problem (rows), the share of `seeds` seeds that cracked it, each seed cracking with its problem's rate."""
    return rng.binomial(seeds, crack) / seeds


RISING = np.linspace(0.02, 0.98, N)[:, None]  # unequal means in the worst order for a bet learned from the past
# name -> (sampler of [N, DATASETS] values, value range, true mean: the average of the values' expectations)
TRUTHS: dict[str, tuple[Sampler, tuple[float, float], float]] = {
    "bernoulli p=0.5": (lambda rng, size: (rng.random(size) < 0.5).astype(float), (0.0, 1.0), 0.5),
    "bernoulli p=0.1": (lambda rng, size: (rng.random(size) < 0.1).astype(float), (0.0, 1.0), 0.1),
    "beta(2, 5)": (lambda rng, size: rng.beta(2.0, 5.0, size), (0.0, 1.0), 2.0 / 7.0),
    "beta(0.5, 0.5)": (lambda rng, size: rng.beta(0.5, 0.5, size), (0.0, 1.0), 0.5),
    "uniform(0.45, 0.55)": (lambda rng, size: rng.uniform(0.45, 0.55, size), (0.0, 1.0), 0.5),
    "unequal means, rising": (lambda rng, size: (rng.random(size) < RISING).astype(float), (0.0, 1.0), 0.5),
    "two halves, 0.1 then 0.9": (lambda rng, size: rng.beta(np.where(np.arange(N) < N // 2, 1.0, 9.0)[:, None],
                                                            np.where(np.arange(N) < N // 2, 9.0, 1.0)[:, None], size),
                                 (0.0, 1.0), 0.5),
    # a - b of crack shares over 5 seeds each, on [-1, 1]: rates differ by problem, a ahead by 0.2 on average
    "paired crack shares": (lambda rng, size: _shares(rng, np.clip(RISING + 0.2, 0, 1) * np.ones(size))
                            - _shares(rng, RISING * np.ones(size)), (-1.0, 1.0),
                            float(np.mean(np.clip(RISING + 0.2, 0, 1) - RISING))),
}


@pytest.mark.parametrize("truth", list(TRUTHS))
def test_betting_interval_covers_the_true_mean_in_at_least_95_percent_of_400_datasets(truth: str) -> None:
    sampler, value_range, mean = TRUTHS[truth]
    rng = np.random.default_rng(28_000 + len(truth))
    values = sampler(rng, (N, DATASETS))  # a column per dataset; curve_bands gives each mean_interval's interval
    _, low, high, outside = curve_bands(values, LEVEL, value_range)
    coverage = float(np.mean((low <= mean + 1e-12) & (mean - 1e-12 <= high)))
    assert outside == 0 and coverage >= LEVEL, (truth, coverage)
    assert np.all(high - low > 0), "an interval of zero width reads as certainty"
    single = mean_interval(values[:, 0], LEVEL, value_range)
    assert (single.low, single.high) == (pytest.approx(low[0]), pytest.approx(high[0]))
    assert single.width == pytest.approx(single.high - single.low)


def _paired_study(rng: np.random.Generator, problems: int = 20) -> tuple[np.ndarray, np.ndarray]:
    """Crack shares over 5 seeds of two policies on `problems` problems of spread-out difficulty, a ahead of b."""
    crack_a = rng.beta(0.5, 0.5, problems)
    crack_b = np.clip(crack_a - 0.15 + 0.1 * rng.standard_normal(problems), 0.0, 1.0)
    return _shares(rng, crack_a), _shares(rng, crack_b)


def test_betting_interval_of_20_paired_differences_is_far_narrower_than_hoeffding() -> None:
    rng = np.random.default_rng(2024)
    studies = [_paired_study(rng) for _ in range(200)]
    differences = np.column_stack([a - b for a, b in studies])  # [20 problems, 200 studies]
    # paired_difference's interval is mean_interval of the differences on [-1, 1]; curve_bands: one per column
    mean, low, high, _ = curve_bands(differences, LEVEL, (-1.0, 1.0))
    betting = high - low
    first = paired_difference("cracked_share", "A", "B", tuple(f"p{i}" for i in range(20)), *studies[0]).mean
    assert first.width == pytest.approx(betting[0])
    kl_low, kl_high = kl_bounds((mean + 1) / 2, 20, LEVEL)  # the interval the report printed before
    hoeffding = 2 * (kl_high - kl_low)
    # measured: betting median 0.45 (0.41 to 0.56), Hoeffding 1.10 (1.07 to 1.11), both on [-1, 1]
    assert np.median(betting) < 0.6 and betting.max() < 0.8, (np.median(betting), betting.max())
    assert np.median(hoeffding) > 1.05 and np.all(betting < 0.6 * hoeffding)


def test_betting_interval_excludes_zero_for_a_clear_lead_that_hoeffding_could_not_show() -> None:
    # a ahead on 18 of 20 problems by one to four seeds in five, tied on one, behind by one seed on one: +0.32
    per_problem = np.array([0.2, 0.4, 0.6, 0.2, 0.4, 0.8, 0.2, 0.4, 0.2, 0.6, 0.2, 0.4, 0.2, 0.6, 0.2, 0.4, 0.2,
                            0.0, 0.4, -0.2])
    result = paired_difference("cracked_share", "A", "B", tuple(f"p{i}" for i in range(20)), per_problem,
                               np.zeros(20))
    assert result.mean.estimate == pytest.approx(0.32) and result.permutation_p < 0.001
    assert result.mean.low > 0.0 and result.mean.width < 0.5, result.mean
    low, _ = kl_bounds(np.array([(0.32 + 1) / 2]), 20, LEVEL)
    assert 2 * low[0] - 1 < 0.0  # Hoeffding's interval held 0 beside p < 0.001


def test_betting_interval_is_deterministic_and_ignores_the_order_of_the_values() -> None:
    values = np.random.default_rng(7).beta(2.0, 3.0, 25)
    first = mean_interval(values)
    assert mean_interval(values) == first
    shuffled = mean_interval(values[::-1])
    assert (shuffled.low, shuffled.high) == (pytest.approx(first.low, abs=1e-9), pytest.approx(first.high, abs=1e-9))
    low, high = betting_bounds(np.column_stack([values, values[::-1], np.sort(values)]))
    assert np.ptp(low) < 1e-9 and np.ptp(high) < 1e-9
    assert low[0] < values.mean() < high[0]


def test_holm_adjusts_a_known_vector_as_the_textbook_does() -> None:
    # R: p.adjust(c(0.01, 0.02, 0.03, 0.04, 0.05), "holm") = 0.05 0.08 0.09 0.09 0.09
    assert holm([0.01, 0.02, 0.03, 0.04, 0.05]) == pytest.approx([0.05, 0.08, 0.09, 0.09, 0.09])
    # given out of order: sorted 0.005, 0.01, 0.03, 0.04 times 4, 3, 2, 1 = 0.02, 0.03, 0.06, 0.04, then the
    # running maximum 0.02, 0.03, 0.06, 0.06, put back in the given order
    assert holm([0.01, 0.04, 0.03, 0.005]) == pytest.approx([0.03, 0.06, 0.06, 0.02])
    assert holm([0.3, 0.6]) == pytest.approx([0.6, 0.6]) and holm([0.9, 0.8, 0.7]) == pytest.approx([1.0, 1.0, 1.0])
    assert holm([0.04]) == pytest.approx([0.04]) and holm([]).size == 0


def test_holm_correct_keeps_raw_p_values_and_judges_significance_on_the_adjusted_ones() -> None:
    problems = tuple(f"p{i}" for i in range(8))
    zeros = np.zeros(8)
    lead = paired_difference("cracked_share", "A", "B", problems, np.full(8, 0.6), zeros)  # p = 2 / 256
    slight = paired_difference("cracked_share", "A", "C", problems,
                               np.array([0.6, 0.6, 0.4, 0.4, 0.4, 0.2, 0.2, -0.2]), zeros)  # p = 8 / 256
    none = paired_difference("cracked_share", "B", "C", problems, np.array([0.4] * 6 + [-0.2] * 2), zeros)
    assert slight.family == 1 and slight.permutation_p_holm == slight.permutation_p == pytest.approx(0.03125)
    assert slight.significant and slight.sign_p_holm == slight.sign_p  # alone, a family of one
    corrected = holm_correct([lead, slight, none])
    raw = [lead.permutation_p, slight.permutation_p, none.permutation_p]
    assert [d.permutation_p for d in corrected] == raw
    assert [d.permutation_p_holm for d in corrected] == pytest.approx([3 * raw[0], 2 * raw[1], max(2 * raw[1], raw[2])])
    assert [d.sign_p_holm for d in corrected] == pytest.approx(list(holm([lead.sign_p, slight.sign_p,
                                                                          none.sign_p])))
    assert all(d.family == 3 for d in corrected)
    # 0.031 raw: significant alone, not once adjusted over three comparisons (2 x 0.031 > 0.05)
    assert [d.significant for d in corrected] == [True, False, False]


def test_holm_keeps_the_family_wise_false_positive_rate_of_four_identical_policies_at_alpha() -> None:
    rng = np.random.default_rng(2805)
    studies, problems, seeds = 200, 10, 5
    names = tuple(f"p{i}" for i in range(problems))
    raw_any = adjusted_any = 0
    for _ in range(studies):
        crack = rng.beta(0.5, 0.5, problems)  # each problem's crack rate, the same for every policy
        shape = rng.uniform(0.5, 4.0, (problems, 2))  # and its distribution of best scalars
        share = [rng.binomial(seeds, crack) / seeds for _ in range(4)]
        best = [rng.beta(shape[:, :1], shape[:, 1:], (problems, seeds)).mean(axis=1) for _ in range(4)]
        compared = [paired_difference(metric, str(a), str(b), names, values[a], values[b])
                    for a, b in combinations(range(4), 2)
                    for metric, values in (("cracked_share", share), ("mean_best", best))]
        corrected = holm_correct(compared)  # 6 pairs x 2 metrics, as the report adjusts them
        raw_any += any(d.permutation_p <= 0.05 for d in corrected)
        adjusted_any += any(d.significant for d in corrected)
    # measured: some raw permutation p <= 0.05 in 27% of studies, some Holm-significant comparison in 3.5%
    assert raw_any / studies > 0.1, raw_any / studies
    assert adjusted_any / studies <= 0.05 + 0.02, adjusted_any / studies
