"""The sign-flip permutation test against a brute-force enumeration of every sign pattern, ties included."""

from __future__ import annotations

import numpy as np
import pytest

from evolve.report.stats import paired_difference, permutation_test, sign_test

_CHUNK_BITS = 16  # sign patterns enumerated 2^16 at a time


def _brute_force_p(differences: np.ndarray) -> float:
    """Share of all 2^n sign patterns of ALL n differences (zeros flipped too) whose |sum| reaches the observed."""
    n = differences.size
    observed = abs(differences.sum()) - 1e-12 * max(1.0, float(np.abs(differences).sum()))
    bits = np.arange(n)
    hits = 0
    for start in range(0, 2 ** n, 2 ** _CHUNK_BITS):
        patterns = np.arange(start, min(start + 2 ** _CHUNK_BITS, 2 ** n))
        signs = 1.0 - 2.0 * ((patterns[:, None] >> bits[None, :]) & 1)
        hits += int(np.sum(np.abs(signs @ differences) >= observed))
    return hits / 2 ** n


def test_permutation_test_is_exact_for_many_problems_with_few_nonzero_differences() -> None:
    # 22 problems, 12 of them ties: the 10 non-zero differences carry the whole statistic
    rng = np.random.default_rng(58)
    nonzero = rng.choice(np.arange(-5, 6)[np.arange(-5, 6) != 0], size=10) / 5
    differences = np.concatenate([nonzero, np.zeros(12)])
    rng.shuffle(differences)
    p, exact = permutation_test(differences)
    assert exact
    assert p == pytest.approx(_brute_force_p(differences), abs=1e-15)


def test_permutation_test_counts_patterns_of_nonzero_differences_only() -> None:
    # +0.2 on 3 problems, none behind, 25 ties: only all-plus and all-minus of the three reach |sum| = 0.6
    p, exact = permutation_test(np.array([0.2, 0.2, 0.2] + [0.0] * 25))
    assert exact and p == pytest.approx(2 / 8)
    assert permutation_test(np.zeros(30)) == (1.0, True)


def test_permutation_test_samples_beyond_twenty_nonzero_differences() -> None:
    differences = np.concatenate([np.arange(1.0, 22.0), np.zeros(5)])  # 21 non-zero
    p, exact = permutation_test(differences)
    assert not exact and p == pytest.approx(1 / 100_001)


def test_float_noise_around_zero_is_a_tie_not_a_win() -> None:
    a, b = np.array([0.1 + 0.2, 0.8, 0.6]), np.array([0.3, 0.2, 0.4])
    assert a[0] - b[0] != 0.0  # equal on paper, 5.6e-17 apart in floats
    result = paired_difference("mean_best", "A", "B", ("p", "q", "r"), a, b)
    assert (result.wins, result.losses, result.ties) == (2, 0, 1) and result.per_problem[0] == 0.0
    assert sign_test(a - b) == pytest.approx(2 / 4)
    assert permutation_test(a - b) == (pytest.approx(2 / 4), True)
