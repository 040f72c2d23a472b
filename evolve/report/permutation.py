"""The paired sign-flip permutation test over problems, exact wherever it is cheap: enumeration or a lattice count.

Under the null that each problem's difference is symmetric about 0, every sign pattern of the differences is equally
likely; the p-value is the share of patterns whose |sum| reaches the observed one. Two exact routes, then sampling:

- up to `exact_up_to` non-zero differences, every pattern is enumerated;
- beyond, when the differences lie on a lattice (each an integer multiple k_i of one unit 1/q, as cracked shares
  over a few seeds always do: multiples of 1/seeds), the number of patterns reaching each integer sum of +-k_i is
  counted exactly by convolution, one difference at a time, in Python integers: n x (sum k_i) additions, so 100
  problems x 5 seeds take milliseconds where enumeration would take 2^100 patterns;
- otherwise (real-valued scores), seeded Monte Carlo.
"""

from __future__ import annotations

from itertools import product

import numpy as np

LATTICE_DENOMINATORS = 2520  # 1/q for q up to lcm(1..10): shares over up to 10 seeds, and their differences
LATTICE_STEPS = 20_000  # sum of k_i above which the count would be slow; such differences are sampled instead
_ON_LATTICE = 1e-11  # |d q - round(d q)| below this (x q): d is a multiple of 1/q up to float noise


def snap_ties(differences: np.ndarray) -> np.ndarray:
    """`differences` with float noise around 0 set to 0 (|d| <= 1e-12 of the largest, or of 1): two per-problem values
    equal on paper but summed in another order (0.1 + 0.2 against 0.3) differ by ~6e-17, which is a tie, not a win
    (the CPU study's report counted two such wins before issue 58)."""
    differences = np.asarray(differences, dtype=float).ravel()
    scale = max(1.0, float(np.abs(differences).max(initial=0.0)))
    return np.where(np.abs(differences) <= 1e-12 * scale, 0.0, differences)


def lattice_steps(differences: np.ndarray, denominators: int = LATTICE_DENOMINATORS) -> np.ndarray | None:
    """Non-zero `differences` as integer multiples of the coarsest unit 1/q (q <= `denominators`) they all lie on:
    the multiples' absolute values (int64 [n]), or None where no such q exists."""
    magnitudes = np.abs(np.asarray(differences, dtype=float))
    if magnitudes.size > LATTICE_STEPS:  # every step is at least 1: more of them than a count would take
        return None
    denominators_tried = np.arange(1, denominators + 1, dtype=float)[:, None]  # [q, 1]
    scaled = magnitudes[None, :] * denominators_tried  # [q, n]
    steps = np.rint(scaled)
    fits = np.all((np.abs(scaled - steps) <= _ON_LATTICE * denominators_tried) & (steps > 0), axis=1)  # [q]
    if not fits.any():
        return None
    return steps[int(np.argmax(fits))].astype(np.int64)


def lattice_p_value(steps: np.ndarray, observed: int) -> float:
    """P(|sum of +-steps_i| >= observed) over the 2^n equally likely sign patterns, counted exactly.

    `counts[s + total]` is the number of patterns of the differences so far whose signed sum is s (Python integers:
    up to 2^n); each difference k moves every count to s - k and to s + k. Only the final division is rounded."""
    steps = [int(k) for k in steps]
    total = sum(steps)
    counts = np.zeros(2 * total + 1, dtype=object)
    counts[total] = 1
    for k in steps:
        moved = np.zeros_like(counts)
        moved[:-k] += counts[k:]
        moved[k:] += counts[:-k]
        counts = moved
    reaching = np.abs(np.arange(-total, total + 1)) >= observed
    return int(counts[reaching].sum()) / 2 ** len(steps)


def permutation_test(differences: np.ndarray, exact_up_to: int = 20, samples: int = 100_000,
                     seed: int = 0) -> tuple[float, bool]:
    """Two-sided paired permutation (sign-flip) test of mean difference 0: (p-value, exact?).

    A zero difference adds nothing to the sum under either sign, so only the k non-zero differences are flipped: the
    share of the 2^k patterns is the same as the share of all 2^n. Exact (enumerated, or counted on a lattice: the
    module's docstring) whenever it is cheap; otherwise `samples` seeded random patterns give the Monte Carlo p-value
    (hits + 1) / (samples + 1), itself a valid p-value, whose standard error against the exact one is at most
    sqrt(p (1 - p) / samples): 0.0016 at p = 0.5 and the default 100,000 samples."""
    differences = snap_ties(differences)
    tolerance = 1e-12 * max(1.0, float(np.abs(differences).sum()))
    differences = differences[differences != 0.0]
    n = differences.size
    if n == 0:
        return 1.0, True
    observed = abs(differences.sum())
    if n <= exact_up_to:
        hits = 0
        chunk_bits = min(n, 16)
        low_signs = np.array(list(product((1.0, -1.0), repeat=chunk_bits)))  # [2^chunk, chunk]
        low_sums = low_signs @ differences[:chunk_bits]
        for high_signs in product((1.0, -1.0), repeat=n - chunk_bits):
            rest = float(np.dot(high_signs, differences[chunk_bits:])) if high_signs else 0.0
            hits += int(np.sum(np.abs(low_sums + rest) >= observed - tolerance))
        return hits / 2 ** n, True
    steps = lattice_steps(differences)
    if steps is not None and int(steps.sum()) <= LATTICE_STEPS:
        signed = np.where(differences > 0, steps, -steps)
        return lattice_p_value(steps, abs(int(signed.sum()))), True
    rng = np.random.default_rng(seed)
    hits = 0
    for start in range(0, samples, 10_000):
        signs = rng.choice((-1.0, 1.0), size=(min(10_000, samples - start), n))
        hits += int(np.sum(np.abs(signs @ differences) >= observed - tolerance))
    return (hits + 1) / (samples + 1), False
