"""evolve.report.stats against hand-checked values: exact intervals, tests over problems, censored first-crack times."""

from __future__ import annotations

import math

import numpy as np
import pytest

from evolve.report.permutation import permutation_test
from evolve.report.stats import (
    binomial_cdf,
    clopper_pearson,
    kaplan_meier,
    mean_interval,
    paired_difference,
    sign_test,
)


def test_clopper_pearson_bounds_solve_the_exact_binomial_tails() -> None:
    low, high = clopper_pearson(1, 3)
    assert 1 - binomial_cdf(0, 3, low) == pytest.approx(0.025)  # P(X >= 1; low) = alpha / 2
    assert binomial_cdf(1, 3, high) == pytest.approx(0.025)  # P(X <= 1; high) = alpha / 2
    assert (round(low, 4), round(high, 4)) == (0.0084, 0.9057)  # R: binom.test(1, 3)$conf.int
    assert clopper_pearson(5, 10) == pytest.approx((0.1871, 0.8129), abs=1e-4)
    with pytest.raises(ValueError, match="0 <= k <= n"):
        clopper_pearson(4, 3)


def test_mean_interval_flags_values_outside_the_declared_range_and_widens_it() -> None:
    inside = mean_interval(np.array([0.2, 0.4, 0.6]))
    assert inside.out_of_range == 0 and inside.estimate == pytest.approx(0.4) and 0 < inside.low < 0.4 < inside.high
    outside = mean_interval(np.array([1.5, 0.5, 0.5]))
    assert outside.out_of_range == 1 and outside.high > 1.0  # widened to [0, 1.5], never silently clipped


def test_sign_and_permutation_tests_give_the_exact_p_values() -> None:
    assert sign_test(np.array([0.1, 0.2, 0.3, 0.4, 0.5])) == pytest.approx(2 / 32)
    assert sign_test(np.array([0.1, -0.2, 0.0])) == 1.0  # the tie is dropped, one each way
    p, exact = permutation_test(np.array([1.0, 2.0, 3.0, 4.0, 5.0]))
    assert exact and p == pytest.approx(2 / 32)  # only all-plus and all-minus reach |sum| = 15
    p, exact = permutation_test(np.array([1.0, -1.0]))
    assert exact and p == 1.0
    p, exact = permutation_test(np.arange(1.0, 23.0))  # 22 problems on the lattice of integers: counted
    assert exact and p == pytest.approx(2 / 2 ** 22)
    uneven = np.sqrt(np.arange(2.0, 24.0))  # 22 problems off any lattice: Monte Carlo, seeded
    p, exact = permutation_test(uneven)
    assert not exact and p == pytest.approx(1 / 100_001)
    assert permutation_test(uneven) == (p, exact)


def test_permutation_and_sign_tests_reject_at_most_alpha_under_the_null() -> None:
    rng = np.random.default_rng(3)
    differences = rng.normal(size=(400, 8))  # symmetric about 0: the null holds
    rejections = [permutation_test(row)[0] <= 0.05 for row in differences]
    signs = [sign_test(row) <= 0.05 for row in differences]
    assert np.mean(rejections) <= 0.07 and np.mean(signs) <= 0.05


def test_paired_difference_counts_wins_losses_and_ties_per_problem() -> None:
    result = paired_difference("cracked_share", "A", "B", ("p", "q", "r", "s"), np.array([1.0, 2 / 3, 0.0, 0.5]),
                               np.array([0.0, 1 / 3, 0.0, 1.0]))
    assert result.per_problem == pytest.approx((1.0, 1 / 3, 0.0, -0.5))
    assert (result.wins, result.losses, result.ties, result.mean.n) == (2, 1, 1, 4)
    assert result.mean.estimate == pytest.approx(5 / 24) and -1 <= result.mean.low < 5 / 24 < result.mean.high <= 1
    assert result.permutation_exact and 0 < result.permutation_p <= 1 and result.sign_p == 1.0


def test_kaplan_meier_counts_seeds_that_never_cracked_as_censored_not_dropped() -> None:
    # cracked at 2 and 4; two seeds never cracked in their 10 iterations. Dropping them gave a median of 3.
    survival = kaplan_meier([2, 4, 10, 10], [True, True, False, False])
    assert survival.cracked_by == pytest.approx((0.25, 0.5)) and survival.median == 4.0
    assert (survival.events, survival.censored, survival.longest_budget) == (2, 2, 10)
    never = kaplan_meier([2, 10, 10, 10], [True, False, False, False])
    assert never.median is None and never.cracked_by == pytest.approx((0.25,))
    # a seed cut short (censored at 3) leaves the risk set: the crack at 5 counts for 1 of the 2 still running
    early = kaplan_meier([1, 3, 5, 10], [True, False, True, False])
    assert early.cracked_by == pytest.approx((0.25, 1 - 0.75 * 0.5)) and early.median == 5.0
    assert kaplan_meier([0, 0, 7], [True, True, True]).median == 0.0  # the seed program already solved it


def test_clopper_pearson_holds_for_thousands_of_cells_where_the_exact_terms_would_overflow() -> None:
    low, high = clopper_pearson(500, 1100)  # math.comb(1100, i) alone is past the largest float
    assert 0.42 < low < 500 / 1100 < high < 0.49
    assert 1 - binomial_cdf(499, 1100, low) == pytest.approx(0.025, rel=1e-6)
    assert binomial_cdf(500, 1100, high) == pytest.approx(0.025, rel=1e-6)
    # the log-space terms agree with the exact ones where both can still be computed (n = 1001)
    exact = math.fsum(math.comb(1001, i) * 0.3 ** i * 0.7 ** (1001 - i) for i in range(301))
    assert binomial_cdf(300, 1001, 0.3) == pytest.approx(exact, rel=1e-9)
