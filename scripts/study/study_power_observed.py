"""The power the finished CPU study had at its own observed crack rates (issue 58 item 16), beside the planned power
of docs/study_cpu.md (scripts/study/study_power.py: an effect on every test problem, floor ones included).

Redrawn: each arm's per-problem crack share in STUDY/report/cells.csv taken as that problem's true rate, 5 cells a
problem and arm drawn again, then the report's primary test (per problem the difference of the pooled crack shares,
the sign-flip permutation test, Holm over the three pairs of arms, significant at 0.05 with the right sign). A
problem no arm cracked stays uncracked, so only the problems where the arms differed carry an effect. Post hoc: the
usual approximation from the observed mean difference and its spread (a t statistic with 29 degrees of freedom),
which puts the same effect on every problem.

    .venv/bin/python scripts/study/study_power_observed.py [studies/study_cpu/report] [--studies 2000]
"""

from __future__ import annotations

import argparse
import csv
from collections import defaultdict
from pathlib import Path

import numpy as np

from evolve.report.permutation import permutation_test
from evolve.report.stats import holm

ARMS = ("base", "vpo", "grpo")
PAIRS = (("base", "vpo"), ("base", "grpo"), ("vpo", "grpo"))
ALPHA = 0.05


def observed_rates(cells_csv: Path) -> dict[str, np.ndarray]:
    """Per arm (a checkpoint's policy less its -tSEED), each problem's share of cracked cells (cells.csv holds the
    cells the report counts: a redone cell's first run is not among them)."""
    cracked: dict[tuple[str, str], int] = defaultdict(int)
    cells: dict[tuple[str, str], int] = defaultdict(int)
    with cells_csv.open() as handle:
        for row in csv.DictReader(handle):
            key = (row["policy"].split("-t")[0], row["problem"])
            cells[key] += 1
            cracked[key] += bool(row["first_solved_iteration"])
    problems = sorted({problem for _, problem in cells})
    return {arm: np.array([cracked[arm, p] / cells[arm, p] for p in problems]) for arm in ARMS}


def redrawn_power(rates: dict[str, np.ndarray], studies: int, seeds: int = 5) -> tuple[float, float]:
    """(raw, Holm-adjusted) power of vpo - grpo when each problem's cells are drawn again from its observed rate."""
    rng = np.random.default_rng(58)
    raw = adjusted = 0
    for study in range(studies):
        shares = {arm: rng.binomial(seeds, rates[arm]) / seeds for arm in ARMS}
        p = [permutation_test(shares[a] - shares[b], samples=2000, seed=study)[0] for a, b in PAIRS]
        right_sign = (shares["vpo"] - shares["grpo"]).mean() > 0
        raw += p[2] <= ALPHA and right_sign
        adjusted += holm(p)[2] <= ALPHA and right_sign
    return raw / studies, adjusted / studies


def post_hoc_power(differences: np.ndarray, level: float, draws: int = 1_000_000) -> float:
    """P(|T| beats the two-sided `level` critical value) for T noncentral t with the observed t as its noncentrality
    (df = problems - 1), both by seeded simulation: the textbook "observed power"."""
    n = differences.size
    observed_t = differences.mean() / (differences.std(ddof=1) / np.sqrt(n))
    rng = np.random.default_rng(58)
    null = rng.standard_normal(draws) / np.sqrt(rng.chisquare(n - 1, draws) / (n - 1))
    critical = np.quantile(np.abs(null), 1 - level)
    shifted = (rng.standard_normal(draws) + observed_t) / np.sqrt(rng.chisquare(n - 1, draws) / (n - 1))
    return float(np.mean(np.abs(shifted) >= critical))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("report", type=Path, nargs="?", default=Path("studies/study_cpu/report"))
    parser.add_argument("--studies", type=int, default=2000)
    args = parser.parse_args()
    rates = observed_rates(args.report / "cells.csv")
    differences = rates["vpo"] - rates["grpo"]
    p = [permutation_test(rates[a] - rates[b])[0] for a, b in PAIRS]
    rank = int(np.argsort(p, kind="stable").tolist().index(2))  # Holm's level for vpo - grpo: alpha / (3 - rank)
    print(f"{differences.size} problems; vpo - grpo observed {differences.mean():+.3f}, "
          f"{int(np.sum(differences != 0))} problems differ; p {p[2]:.3f}, Holm {holm(p)[2]:.3f}")
    raw, adjusted = redrawn_power(rates, args.studies)
    print(f"redrawn from the observed rates ({args.studies} studies): power {raw:.2f}, under Holm {adjusted:.2f}")
    print(f"post hoc (t approximation): power {post_hoc_power(differences, ALPHA):.2f}, "
          f"at Holm's level {ALPHA / (3 - rank):.4f} {post_hoc_power(differences, ALPHA / (3 - rank)):.2f}")


if __name__ == "__main__":
    main()
