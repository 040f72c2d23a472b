"""Curves of an experiment against five cost axes: iterations, answers, programs evaluated, generated tokens and
wall time.

A cell (one run) is a list of `Step`s, one per committed iteration in the order they were committed, each with
the run's cumulative cost when it was committed and the best scalar / solved flag of that iteration's programs.
A cell's curve at x is a step function: the best scalar (or "cracked") over the steps whose coordinate is <= x.
On the iterations axis the coordinate is the iteration number (programs of iterations <= t); on the cost axes it
is the cumulative cost, so what a run had found after spending x is what it had committed by then.

Seeds are compared on a common grid: from 0 to the smallest total that every complete cell of the policy reached
(no seed is extrapolated past its budget). A cell a stop rule ended before its budget (stop_when_solved, a target
score) is left out of that smallest total: it holds its last value to the grid's end, as a finished search does;
were it counted, one problem solved at the first iteration would end every cost axis there. Bands are
`evolve.report.stats.curve_bands`: pointwise intervals with at least nominal coverage for values in the declared
range.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Literal

import numpy as np

from evolve.report.charts import Series
from evolve.report.stats import curve_bands

Axis = Literal["iterations", "answers", "evaluations", "tokens", "wall_s"]
AXES: tuple[Axis, ...] = ("iterations", "answers", "evaluations", "tokens", "wall_s")
AXIS_LABELS: dict[str, str] = {"iterations": "iteration", "answers": "answers", "evaluations": "programs evaluated",
                               "tokens": "generated tokens", "wall_s": "wall time (s)"}
Metric = Literal["cracked_share", "best_score"]
GRID_POINTS = 61  # points of a cost axis' grid (integer axes with a smaller total use every integer)


@dataclass(frozen=True)
class Step:
    """One committed iteration of a run, with the run's cumulative cost when it was committed."""

    iteration: int  # 0: the seed program
    evaluations: int  # programs evaluated so far (children sent to the evaluator), this iteration included
    tokens: int  # generated tokens so far
    wall_s: float | None  # the run's active wall clock at the commit; None where the store has no clock
    best: float | None  # the best scalar of this iteration's programs (current rule); None: no program
    solved: bool  # some program of this iteration solves the problem (current rule)
    answers: int = 0  # candidate answers asked so far (m per request, failed ones included), this iteration's too

    def coordinate(self, axis: Axis) -> float | None:
        return {"iterations": self.iteration, "answers": self.answers, "evaluations": self.evaluations,
                "tokens": self.tokens, "wall_s": self.wall_s}[axis]


@dataclass(frozen=True)
class Curve:
    """A metric against one axis for one policy (and one problem, for per-problem curves), mean over seeds."""

    policy: str
    metric: Metric
    problem: str | None  # None: averaged over every problem of the experiment (per seed, then over seeds)
    axis: Axis
    x: tuple[float, ...]
    mean: tuple[float, ...]
    low: tuple[float, ...]
    high: tuple[float, ...]
    seeds: int  # the band's n
    problems: int  # problems averaged per seed
    out_of_range: int = 0  # values outside the declared score range (the band then does not hold as stated)


def curve_series(curves: Sequence[Curve], colours: dict[str, str], unit: str) -> list[Series]:
    """The curves as step-drawn chart series, each labelled with its band's n in `unit`s (seed, run)."""
    return [Series(c.policy, colours[c.policy], c.x, c.mean, c.low, c.high,
                   f"n = {c.seeds} {unit}{'s' * (c.seeds != 1)}", steps=True) for c in curves]


def cell_total(steps: Sequence[Step], axis: Axis) -> float | None:
    """How far along `axis` the cell got: its largest coordinate (None when a step lacks it)."""
    coordinates = [step.coordinate(axis) for step in steps]
    if not coordinates or any(c is None for c in coordinates):
        return None
    return float(max(c for c in coordinates if c is not None))


def evaluate_cell(steps: Sequence[Step], axis: Axis, grid: np.ndarray, metric: Metric) -> np.ndarray:
    """The cell's step function on `grid`: best scalar so far (0 before any program) or 1.0 once cracked."""
    coordinates = np.array([step.coordinate(axis) for step in steps], dtype=float)
    if metric == "best_score":
        values = np.array([-np.inf if step.best is None else step.best for step in steps])
    else:
        values = np.array([1.0 if step.solved else 0.0 for step in steps])
    reached = coordinates[None, :] <= grid[:, None] + 1e-9  # [points, steps]
    out = np.where(reached, values[None, :], -np.inf).max(axis=1, initial=-np.inf)
    return np.where(np.isfinite(out), out, 0.0)


def horizon(totals: Sequence[float], stopped_early: Sequence[bool]) -> float:
    """Where a cost axis' grid ends: the smallest total among the cells that ran their whole budget; when every cell
    stopped early, the largest of theirs."""
    full = [total for total, early in zip(totals, stopped_early, strict=True) if not early]
    return min(full) if full else max(totals)


def grid(axis: Axis, upper: float, iterations: int) -> np.ndarray:
    """The points a policy's curves are drawn at: every iteration, else 0..upper evenly (integers when few)."""
    if axis == "iterations":
        return np.arange(iterations + 1, dtype=float)
    if axis in ("answers", "evaluations", "tokens") and upper < GRID_POINTS:
        return np.arange(int(upper) + 1, dtype=float)
    points = np.linspace(0.0, upper, GRID_POINTS)
    return np.round(points) if axis != "wall_s" else points


def policy_curves(policy: str, problems: Sequence[str], seeds_cells: Sequence[Sequence[Sequence[Step]]],
                  axis: Axis, iterations: int, confidence: float, value_range: tuple[float, float],
                  stopped_early: Sequence[Sequence[bool]] | None = None) -> list[Curve]:
    """Share cracked and best score against `axis`, averaged over problems per seed, then over seeds.

    `seeds_cells[s][p]` are the steps of seed s on problem p; only complete seeds are passed (every problem ran
    its budget or a stop rule ended it), so every point rests on the same seeds; `stopped_early[s][p]`: that cell
    was ended by a stop rule (`horizon`; None: none was). Returns [] when the axis is unknown for some cell."""
    if not seeds_cells:
        return []
    totals = [cell_total(steps, axis) for cells in seeds_cells for steps in cells]
    if any(total is None for total in totals):
        return []
    early = [e for row in stopped_early for e in row] if stopped_early is not None else [False] * len(totals)
    upper = iterations if axis == "iterations" else horizon([t for t in totals if t is not None], early)
    points = grid(axis, upper, iterations)
    curves = []
    for metric in ("cracked_share", "best_score"):
        rows = np.array([np.mean([evaluate_cell(steps, axis, points, metric) for steps in cells], axis=0)
                         for cells in seeds_cells])
        span = (0.0, 1.0) if metric == "cracked_share" else value_range
        mean, low, high, outside = curve_bands(rows, confidence, span)
        curves.append(Curve(policy, metric, None, axis, tuple(map(float, points)), tuple(map(float, mean)),
                            tuple(map(float, low)), tuple(map(float, high)), len(seeds_cells), len(problems),
                            outside))
    return curves


def problem_curve(policy: str, problem: str, cells: Sequence[Sequence[Step]], axis: Axis, iterations: int,
                  confidence: float, value_range: tuple[float, float],
                  stopped_early: Sequence[bool] | None = None) -> Curve | None:
    """The best score so far on one problem against `axis`, mean over the complete seeds in `cells`
    (`stopped_early`: as policy_curves')."""
    totals = [cell_total(steps, axis) for steps in cells]
    if not cells or any(total is None for total in totals):
        return None
    early = list(stopped_early) if stopped_early is not None else [False] * len(totals)
    upper = iterations if axis == "iterations" else horizon([t for t in totals if t is not None], early)
    points = grid(axis, upper, iterations)
    rows = np.array([evaluate_cell(steps, axis, points, "best_score") for steps in cells])
    mean, low, high, outside = curve_bands(rows, confidence, value_range)
    return Curve(policy, "best_score", problem, axis, tuple(map(float, points)), tuple(map(float, mean)),
                 tuple(map(float, low)), tuple(map(float, high)), len(cells), 1, outside)
