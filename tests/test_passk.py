"""pass@k and best@k against brute-force enumeration of every k-subset of the answers."""

from __future__ import annotations

import itertools
import random

import pytest

from evolve.stats.passk import EstimatorError, best_at_k, parse_ks, pass_at_k


def brute_pass(solved: list[bool], k: int) -> float:
    subsets = list(itertools.combinations(range(len(solved)), k))
    return sum(any(solved[i] for i in subset) for subset in subsets) / len(subsets)


def brute_best(scores: list[float], k: int) -> float:
    subsets = list(itertools.combinations(scores, k))
    return sum(max(subset) for subset in subsets) / len(subsets)


def test_pass_at_k_equals_the_share_of_k_subsets_holding_a_solving_answer() -> None:
    rng = random.Random(7)
    for _ in range(200):
        n = rng.randint(1, 9)
        solved = [rng.random() < 0.3 for _ in range(n)]
        for k in range(1, n + 1):
            assert pass_at_k(n, sum(solved), k) == pytest.approx(brute_pass(solved, k), abs=1e-12)


def test_best_at_k_equals_the_mean_best_of_every_k_subset_ties_and_zeros_included() -> None:
    rng = random.Random(11)
    for _ in range(200):
        n = rng.randint(1, 9)
        scores = [rng.choice([0.0, 0.0, 0.25, 0.5, rng.random(), -rng.random()]) for _ in range(n)]
        for k in range(1, n + 1):
            assert best_at_k(scores, k) == pytest.approx(brute_best(scores, k), abs=1e-12)


def test_hand_checked_values() -> None:
    assert pass_at_k(10, 0, 10) == 0.0
    assert pass_at_k(10, 1, 1) == pytest.approx(0.1)
    assert pass_at_k(4, 1, 2) == pytest.approx(0.5)  # 3 of the 6 pairs hold the solving answer
    assert pass_at_k(5, 3, 3) == 1.0  # any 3 of 5 include one of the 3 solving answers
    assert best_at_k([0.0, 1.0], 1) == pytest.approx(0.5)
    assert best_at_k([0.2, 0.4, 0.9], 2) == pytest.approx((0.4 + 0.9 + 0.9) / 3)
    assert best_at_k([0.0] * 30, 30) == 0.0
    assert best_at_k([0.3, 0.1, 0.7], 3) == pytest.approx(0.7)  # k = n: the best answer


def test_k_beyond_n_or_below_one_is_an_error_line() -> None:
    with pytest.raises(EstimatorError, match="k = 5 is more than the n = 4 answers"):
        pass_at_k(4, 1, 5)
    with pytest.raises(EstimatorError, match="k = 3 is more than the n = 2 answers"):
        best_at_k([0.1, 0.2], 3)
    with pytest.raises(EstimatorError, match="at least 1"):
        best_at_k([0.1], 0)


def test_parse_ks_sorts_and_refuses_garbage() -> None:
    assert parse_ks("10,1, 10") == (1, 10)
    for bad in ("", "0,1", "one", "1.5"):
        with pytest.raises(EstimatorError):
            parse_ks(bad)
