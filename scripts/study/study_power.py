"""The power of the CPU study's sizes (docs/study_cpu.md, issue 28 item 3), by simulation with the report's own tests.

Per simulated study: `problems` test problems whose base crack rate within the budget is drawn uniformly from the
calibration band; GRPO adds `grpo_gain` to it and VPO another `difference`; each checkpoint (one per training seed)
moves its algorithm's rate by a training-seed effect (normal on the logit scale, sd `tau`). Cells are Bernoulli
draws: the base gets `seeds` cells per problem, a trained algorithm `seeds` cells per checkpoint ("all") or `seeds`
split between its checkpoints ("split", the registered design since 2026-11-26). The primary comparison is the
report's: per problem the difference of the pooled crack shares of VPO and GRPO, the sign-flip permutation test
(evolve.report.stats.permutation_test) Holm-adjusted over the three pairs of arms, significant at 0.05; its betting
interval's width is the median of `widths` studies. Prints one row per setting.

With `--selection experiments/calibration/selection.tsv` (written by scripts/study/calibration_select.py when the pilot
ends) the base rates follow the test list as selected: an in-band task's from the band, a task topped up from the
ceiling side (cracked in both pilot cells, early) from CEILING, one from the floor side from FLOOR; the power of the
sizes as they turned out, not as planned.

    .venv/bin/python scripts/study/study_power.py [--studies 400] [--problems 30] [--seeds 5] [--selection TSV]
"""

from __future__ import annotations

import argparse
import itertools
from pathlib import Path

import numpy as np

from evolve.report.permutation import permutation_test
from evolve.report.stats import holm, mean_interval

BAND = (0.1, 0.7)
CEILING = (0.8, 1.0)  # cracked in both pilot cells within 30 iterations on average
FLOOR = (0.0, 0.1)  # cracked in neither pilot cell
SIDES = {"in band": BAND, "ceiling": CEILING, "floor": FLOOR}


def test_list_sides(selection: Path) -> list[str]:
    """The side of the band (in band, ceiling, floor) of each task selection.tsv puts on the test list."""
    rows = [line.split("\t") for line in selection.read_text().splitlines()[1:] if line.strip()]
    return [side for _, _, side, listed in rows if listed.startswith("test")]


def draw_base(rng: np.random.Generator, sides: list[str] | int) -> np.ndarray:
    """Base crack rates: uniform in the band for `sides` problems, or per side of the selected test list."""
    if isinstance(sides, int):
        return rng.uniform(*BAND, size=sides)
    return np.array([rng.uniform(*SIDES[side]) for side in sides])


def simulate(rng: np.random.Generator, problems: int | list[str], seeds: int, design: str, difference: float,
             grpo_gain: float, tau: float, training_seeds: int = 2) -> dict[str, np.ndarray]:
    """One study's pooled per-problem crack shares per arm (base, grpo, vpo); `problems` a count (rates from the
    band) or the sides of the selected test list."""
    base = draw_base(rng, problems)
    rates = {"base": base, "grpo": np.clip(base + grpo_gain, 0, 1), "vpo": np.clip(base + grpo_gain + difference, 0, 1)}
    shares = {"base": rng.binomial(seeds, base) / seeds}
    for arm in ("grpo", "vpo"):
        logit = np.log(np.clip(rates[arm], 1e-6, 1 - 1e-6) / np.clip(1 - rates[arm], 1e-6, 1))
        cracked, cells = np.zeros(len(base)), 0
        for checkpoint in range(training_seeds):
            own = 1 / (1 + np.exp(-(logit + rng.normal(0, tau)))) if tau else rates[arm]
            n = seeds if design == "all" else len(range(checkpoint, seeds, training_seeds))
            cracked += rng.binomial(n, own)
            cells += n
        shares[arm] = cracked / cells
    return shares


def primary(shares: dict[str, np.ndarray], samples: int, seed: int) -> tuple[float, np.ndarray]:
    """(Holm-adjusted p of vpo - grpo over the three pairs, the vpo - grpo differences)."""
    pairs = [("base", "vpo"), ("base", "grpo"), ("vpo", "grpo")]
    p = [permutation_test(shares[a] - shares[b], samples=samples, seed=seed)[0] for a, b in pairs]
    return float(holm(p)[2]), shares["vpo"] - shares["grpo"]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--studies", type=int, default=400)
    parser.add_argument("--problems", type=int, default=30)
    parser.add_argument("--seeds", type=int, default=5)
    parser.add_argument("--widths", type=int, default=40, help="studies whose interval width is computed")
    parser.add_argument("--samples", type=int, default=2000, help="sign patterns per permutation test")
    parser.add_argument("--selection", type=Path, help="selection.tsv: base rates per side of the test list")
    args = parser.parse_args()
    problems: int | list[str] = args.problems
    rates = f"base rates uniform in {BAND}"
    designs: tuple[str, ...] = ("split", "all")
    if args.selection:
        problems = test_list_sides(args.selection)
        rates = ", ".join(f"{problems.count(side)} {side} (base rate uniform in {SIDES[side]})" for side in SIDES)
        designs = ("split",)
    count = problems if isinstance(problems, int) else len(problems)
    print(f"{count} problems: {rates}; {args.seeds} evolution seeds per arm, 2 training seeds per algorithm, "
          f"grpo = base + 0.1, {args.studies} studies per row")
    print("design  vpo-grpo  tau  power(Holm p<=0.05, right sign)  median 95% interval width")
    for design, difference, tau in itertools.product(designs, (0.0, 0.1, 0.2, 0.3), (0.0, 0.5)):
        rng = np.random.default_rng(12345)
        hits, widths = 0, []
        for study in range(args.studies):
            p, differences = primary(simulate(rng, problems, args.seeds, design, difference, 0.1, tau),
                                     args.samples, study)
            hits += p <= 0.05 and (difference == 0 or differences.mean() > 0)
            if study < args.widths:
                widths.append(mean_interval(differences, 0.95, (-1.0, 1.0)).width)
        print(f"{design:6}  {difference:8.2f}  {tau:3.1f}  {hits / args.studies:31.3f}  {np.median(widths):.3f}")


if __name__ == "__main__":
    main()
