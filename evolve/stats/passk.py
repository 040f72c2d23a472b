"""Unbiased pass@k and best@k from n sampled answers (Chen et al. 2021), as pure functions.

pass@k is the chance that at least one of k answers drawn without replacement from the n solves the problem:
1 - C(n - c, k) / C(n, k), with c the answers that solved. best@k is the expected best score of k answers drawn
without replacement: with the scores sorted ascending x_(1) <= ... <= x_(n), the i-th is the best of a k-subset in
C(i - 1, k - 1) of the C(n, k) subsets, so best@k = sum_i C(i - 1, k - 1) / C(n, k) * x_(i). Both are exact
expectations over the k-subsets of the n answers, not resampling estimates.
"""

from __future__ import annotations

from collections.abc import Sequence
from math import comb


class EstimatorError(ValueError):
    """k does not fit the number of answers; the message is one line for the user."""


def check_k(n: int, k: int) -> None:
    """EstimatorError unless 1 <= k <= n."""
    if k < 1:
        raise EstimatorError(f"k = {k}: k must be at least 1")
    if k > n:
        raise EstimatorError(f"k = {k} is more than the n = {n} answers sampled; ask for k <= n or sample more")


def pass_at_k(n: int, c: int, k: int) -> float:
    """The chance that k of n answers, c of which solve, include a solving one: 1 - C(n - c, k) / C(n, k)."""
    check_k(n, k)
    if not 0 <= c <= n:
        raise EstimatorError(f"c = {c} solving answers is not between 0 and n = {n}")
    return 1.0 - comb(n - c, k) / comb(n, k)  # exact integers, one correctly rounded division


def best_at_k(scores: Sequence[float], k: int) -> float:
    """The expected maximum of k scores drawn without replacement from `scores` (unbiased best@k)."""
    n = len(scores)
    check_k(n, k)
    ordered = sorted(float(score) for score in scores)
    total = comb(n, k)
    # x_(i) (1-based) is the best of C(i - 1, k - 1) subsets; only i >= k can be a subset's best
    return sum(comb(i - 1, k - 1) / total * ordered[i - 1] for i in range(k, n + 1))


def parse_ks(text: str) -> tuple[int, ...]:
    """'1,10' -> (1, 10): distinct positive ks, ascending; EstimatorError on anything else."""
    try:
        ks = {int(part) for part in text.split(",") if part.strip()}
    except ValueError:
        raise EstimatorError(f"-k {text!r}: write comma-separated whole numbers, e.g. -k 1,10") from None
    if not ks or min(ks) < 1:
        raise EstimatorError(f"-k {text!r}: every k must be at least 1, e.g. -k 1,10")
    return tuple(sorted(ks))
