"""The sign-flip permutation test against a brute-force enumeration of every sign pattern, ties included."""

from __future__ import annotations

import numpy as np
import pytest

from evolve.report.permutation import lattice_steps, permutation_test
from evolve.report.stats import paired_difference, sign_test

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


def test_permutation_test_samples_beyond_twenty_nonzero_differences_off_any_lattice() -> None:
    differences = np.concatenate([np.sqrt(np.arange(2.0, 23.0)), np.zeros(5)])  # 21 non-zero, irrational
    assert lattice_steps(differences[differences != 0]) is None
    p, exact = permutation_test(differences)
    assert not exact and p == pytest.approx(1 / 100_001)


@pytest.mark.parametrize("unit", [1.0, 1 / 2, 1 / 3, 1 / 5, 1 / 24])
def test_lattice_count_matches_brute_force_enumeration(unit: float) -> None:
    # shares over a few seeds (multiples of 1/seeds) or best scores over 12 tests and 2 seeds (1/24), ties included
    rng = np.random.default_rng(int(1 / unit))
    differences = rng.integers(-4, 5, size=18) * unit
    p, exact = permutation_test(differences, exact_up_to=0)  # enumeration off: the lattice count alone
    assert exact
    assert p == pytest.approx(_brute_force_p(differences), abs=1e-15)


def test_permutation_test_is_exact_for_a_hundred_problems_of_cracked_shares() -> None:
    # the second study's size: 100 problems, 2 cells an arm, shares in {0, 0.5, 1}; 2^80 patterns, counted
    rng = np.random.default_rng(63)
    a, b = rng.integers(0, 3, size=100) / 2, rng.integers(0, 3, size=100) / 2
    differences = a - b
    p, exact = permutation_test(differences)
    assert exact and int(np.sum(differences != 0)) > 20
    sampled = _sampled_p(differences, samples=400_000)
    assert abs(p - sampled) < 5 * np.sqrt(p * (1 - p) / 400_000) + 1e-6


def _sampled_p(differences: np.ndarray, samples: int) -> float:
    rng = np.random.default_rng(0)
    hits = 0
    for _ in range(samples // 20_000):
        signs = rng.choice((-1.0, 1.0), size=(20_000, differences.size))
        hits += int(np.sum(np.abs(signs @ differences) >= abs(differences.sum()) - 1e-9))
    return hits / samples


def test_float_noise_around_zero_is_a_tie_not_a_win() -> None:
    a, b = np.array([0.1 + 0.2, 0.8, 0.6]), np.array([0.3, 0.2, 0.4])
    assert a[0] - b[0] != 0.0  # equal on paper, 5.6e-17 apart in floats
    result = paired_difference("mean_best", "A", "B", ("p", "q", "r"), a, b)
    assert (result.wins, result.losses, result.ties) == (2, 0, 1) and result.per_problem[0] == 0.0
    assert sign_test(a - b) == pytest.approx(2 / 4)
    assert permutation_test(a - b) == (pytest.approx(2 / 4), True)
