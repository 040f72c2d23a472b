"""Issue 60's power check: can a study on the calibrated generated pool detect a 0.12 difference in crack share
between two arms, at the planned sizes, with Holm across the comparisons? Simulated from the pilot's own rates.

Each test problem's crack rate within the budget is drawn, in every simulated study, from its posterior given its pilot
cells (Beta(c + 1/2, n - c + 1/2): c of n cells cracked, Jeffreys' prior), so the simulation carries how little two
cells say about a rate. Arm A takes those rates; arm B the same shifted on the logit scale by the amount that makes
B - A average `--difference` over the test list (by default an effect on every problem, smaller near 0 and 1, as a crack
share allows; `--affected 0.5`: on a random half of the problems in each simulated study, shifted further so the average
is the same, as when a method helps some problems only). Each arm has two training seeds (checkpoints) whose own effect
is normal on the logit scale (sd `tau`), and `seeds` evolution cells per problem split between them (the registered
design of the CPU study). The test is the report's: per problem the difference of the two arms' crack shares, the
sign-flip permutation test (evolve.report.permutation.permutation_test), significant with the right sign at 0.05 / K:
Holm's threshold for the smallest of K p-values, the binding case when the other comparisons show nothing. The null
column counts the same right-sign rejections with no difference, so its nominal rate is 0.05 / 2K (a two-sided test at
0.05 / K rejects with either sign); with `tau` > 0 it shows how far checkpoints alone make the arms differ.

The test list is selection.tsv's (`--selection`, written by calibration_select.py), or while the pilot runs every
in-band problem of the finished pieces (`--stores`), drawn with replacement up to `--problems` (interim).

    .venv/bin/python scripts/study/generated_power.py --stores experiments/generated/calibration/piece_*.db
    .venv/bin/python scripts/study/generated_power.py --selection experiments/generated/calibration/selection.tsv \
        --stores experiments/generated/calibration/piece_*.db
"""

from __future__ import annotations

import argparse
import itertools
from pathlib import Path

import numpy as np
from calibration_select import Band, PilotCell, cells_by_task, in_band, read_pilot

from evolve.report.permutation import permutation_test

REGISTERED = Band(0.1, 0.9, 43.9, 0.8)  # experiments/generated/calibration/README.md
ALPHA = 0.05
CHECKPOINTS = 2


def cracks_by_task(cells: list[PilotCell]) -> dict[str, tuple[int, int]]:
    """(cracked cells, cells) of each task whose cells have all finished and which the registered rule puts in band."""
    by_task = cells_by_task(cells)
    return {task: (sum(cell.first_crack is not None for cell in group), len(group))
            for task, group in by_task.items() if in_band(group, REGISTERED)}


def test_list(selection: Path | None, band: dict[str, tuple[int, int]], problems: int,
              rng: np.random.Generator) -> tuple[list[tuple[int, int]], str]:
    """Each test problem's (cracked, cells) and a line saying where the list came from."""
    if selection is not None:
        rows = [line.split("\t") for line in selection.read_text().splitlines()[1:] if line.strip()]
        listed = [row[0] for row in rows if row[3].startswith("test")]
        missing = [task for task in listed if task not in band]
        if missing:  # a top-up from near the band ("test (nearest)"), or a task whose pilot store was not given
            raise SystemExit(f"{len(missing)} test problems of {selection} are not in band in the stores given, "
                             f"e.g. {missing[0]}: give every pilot store its tasks came from (HumanEval's: "
                             "experiments/calibration/pilot.db); a list topped up from outside the band has no "
                             "in-band rate to draw from")
        return [band[task] for task in listed], f"the {len(listed)} test problems of {selection}"
    if not band:
        raise SystemExit("no problem in band among the finished cells yet")
    tasks = sorted(band)
    drawn = rng.choice(len(tasks), size=problems, replace=len(tasks) < problems)
    return [band[tasks[i]] for i in drawn], (f"interim: {problems} drawn from the {len(tasks)} in-band problems "
                                             "found so far" + (" (with replacement)" if len(tasks) < problems else ""))


def logit(p: np.ndarray) -> np.ndarray:
    p = np.clip(p, 1e-9, 1 - 1e-9)
    return np.log(p / (1 - p))


def expit(x: np.ndarray) -> np.ndarray:
    return 1 / (1 + np.exp(-x))


def logit_shift(rates: np.ndarray, difference: float) -> float:
    """The logit shift d with mean(expit(logit(rates) + d) - rates) = difference (bisection; 0 for no difference)."""
    if difference == 0:
        return 0.0
    if difference >= float(np.mean(1 - rates)):
        raise ValueError(f"no shift raises these rates by {difference} on average (at most {np.mean(1 - rates):.3f})")
    low, high = 0.0, 20.0
    for _ in range(60):
        middle = (low + high) / 2
        if np.mean(expit(logit(rates) + middle) - rates) < difference:
            low = middle
        else:
            high = middle
    return (low + high) / 2


def arm_shares(rng: np.random.Generator, rates: np.ndarray, seeds: int, tau: float) -> np.ndarray:
    """One arm's per-problem crack share: `seeds` cells split between its checkpoints, each with its own effect."""
    cracked = np.zeros(len(rates))
    for checkpoint in range(CHECKPOINTS):
        own = expit(logit(rates) + rng.normal(0, tau)) if tau else rates
        cracked += rng.binomial(len(range(checkpoint, seeds, CHECKPOINTS)), own)
    return cracked / seeds


def shifted_rates(rng: np.random.Generator, rates: np.ndarray, difference: float, affected: float) -> np.ndarray:
    """Arm B's rates: a random `affected` share of the problems (at least one) shifted on the logit scale so that B - A
    averages `difference` over all of them; ValueError when no shift of that share reaches it."""
    if affected >= 1.0:
        return expit(logit(rates) + logit_shift(rates, difference))
    chosen = rng.permutation(len(rates))[:max(1, round(affected * len(rates)))]
    shifted = rates.copy()
    shifted[chosen] = expit(logit(rates[chosen]) + logit_shift(rates[chosen], difference * len(rates) / len(chosen)))
    return shifted


def power(listed: list[tuple[int, int]], seeds: int, difference: float, tau: float, families: tuple[int, ...],
          studies: int, samples: int, affected: float = 1.0) -> dict[int, float]:
    """Per family size K, the share of simulated studies whose test finds B ahead at 0.05 / K."""
    rng = np.random.default_rng(12345)
    cracked = np.array([c for c, _ in listed], dtype=float)
    cells = np.array([n for _, n in listed], dtype=float)
    hits = dict.fromkeys(families, 0)
    for study in range(studies):
        rates = rng.beta(cracked + 0.5, cells - cracked + 0.5)
        shifted = shifted_rates(rng, rates, difference, affected)
        differences = arm_shares(rng, shifted, seeds, tau) - arm_shares(rng, rates, seeds, tau)
        p, _ = permutation_test(differences, samples=samples, seed=study)
        for k in families:
            hits[k] += p <= ALPHA / k and differences.mean() > 0
    return {k: hit / studies for k, hit in hits.items()}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--stores", type=Path, nargs="+", required=True, help="the calibration pieces' stores")
    parser.add_argument("--selection", type=Path, help="selection.tsv: its test list (default: interim draw)")
    parser.add_argument("--problems", type=int, default=100, help="interim: test problems drawn (default 100)")
    parser.add_argument("--seeds", type=int, nargs="+", default=[1, 2, 3, 4], help="evolution cells per problem")
    parser.add_argument("--difference", type=float, default=0.12)
    parser.add_argument("--families", type=int, nargs="+", default=[3, 7], help="comparisons Holm runs over")
    parser.add_argument("--taus", type=float, nargs="+", default=[0.0, 0.5], help="training-seed sd (logit)")
    parser.add_argument("--affected", type=float, nargs="+", default=[1.0],
                        help="share of the problems the difference falls on (default 1: every problem)")
    parser.add_argument("--studies", type=int, default=400)
    parser.add_argument("--samples", type=int, default=4000, help="sign patterns per permutation test")
    args = parser.parse_args()
    if not 0 < args.difference < 1:
        raise SystemExit(f"--difference {args.difference}: a difference in crack share, between 0 and 1")
    if not all(0 < share <= 1 for share in args.affected):
        raise SystemExit(f"--affected {args.affected}: shares of the problems, each above 0 and at most 1")
    cells = [cell for store in args.stores for cell in read_pilot(store)]
    band = cracks_by_task(cells)
    listed, source = test_list(args.selection, band, args.problems, np.random.default_rng(0))
    print(f"test list: {source}; per problem a rate drawn from Beta(c + 1/2, n - c + 1/2) of its pilot cells; "
          f"B - A = {args.difference} on average (logit shift); {CHECKPOINTS} training seeds per arm; "
          f"{args.studies} studies per row")
    first = args.families[0]
    print("seeds  tau  affected  " + "  ".join(f"power (0.05/{k})" for k in args.families)
          + f"  null (B ahead at 0.05/{first}; nominal {ALPHA / (2 * first):.4f})")
    for seeds, tau, affected in itertools.product(args.seeds, args.taus, args.affected):
        try:
            found = power(listed, seeds, args.difference, tau, tuple(args.families), args.studies, args.samples,
                          affected)
        except ValueError as exc:
            raise SystemExit(f"--affected {affected}: {exc}") from None
        null = power(listed, seeds, 0.0, tau, (first,), args.studies, args.samples)
        print(f"{seeds:5d}  {tau:3.1f}  {affected:8.2f}  " + "  ".join(f"{found[k]:15.3f}" for k in args.families)
              + f"  {null[first]:13.3f}")


if __name__ == "__main__":
    main()
