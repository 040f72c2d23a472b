"""Trusted evaluator for symbolic_regression: per-region fit of the candidate's f to a hidden target.

The target is computed here, in the trusted process, and never sent to the candidate's child; the
child only receives the sample points and returns f at each of them.
"""

import math
from pathlib import Path

from evolve.evaluator_api import CandidateFailure, EvaluationResult, Sandbox, fail_unless_ok

LOW, HIGH = -3, 3
POINTS_PER_REGION = 50
DRIVER = Path(__file__).with_name("driver.py")


def target(x: float) -> float:
    return x**3 + x**2 + x  # Nguyen-1


def regions() -> dict[str, list[float]]:
    """Objective name -> its sample points: the midpoints of 50 equal steps across each unit region."""
    return {
        f"region_{start}_{start + 1}": [start + (i + 0.5) / POINTS_PER_REGION for i in range(POINTS_PER_REGION)]
        for start in range(LOW, HIGH)
    }


def finite(y: object) -> float | None:
    """The driver's value for a point as a float if it is a finite number, else None (a failed point). Checked here:
    the driver runs in the candidate's process, which can make it return anything (NaN, huge ints, strings)."""
    if isinstance(y, bool) or not isinstance(y, (int, float)):
        return None
    try:
        value = float(y)
    except OverflowError:  # an int past the largest float
        return None
    return value if math.isfinite(value) else None


def mean(values: list[float]) -> float:
    """The mean, exact where it fits in a float; inf (or nan) rather than an error where the sum overflows."""
    try:
        return math.fsum(values) / len(values)
    except OverflowError:
        return sum(values) / len(values)


def region_score(xs: list[float], ys: list[object]) -> tuple[float, float | None]:
    """1 / (1 + MSE) and the mean signed error; (0, None) if any point failed or is not a finite number."""
    errors = []
    for x, y in zip(xs, ys, strict=True):
        value = finite(y)
        if value is None:
            return 0.0, None
        errors.append(value - target(x))
    return 1.0 / (1.0 + mean([e * e for e in errors])), mean(errors)


def evaluate(program_path: str, sandbox: Sandbox) -> EvaluationResult:
    grid = regions()
    xs = [x for points in grid.values() for x in points]
    ys = fail_unless_ok(sandbox.run_driver(program_path, DRIVER, xs)).value
    if not isinstance(ys, list) or len(ys) != len(xs):
        raise CandidateFailure("bad_output", "the driver did not return one value per point")
    scores, notes, start = {}, [], 0
    for name, points in grid.items():
        scores[name], bias = region_score(points, ys[start:start + len(points)])
        start += len(points)
        fit = "f failed or was not finite" if bias is None else f"mean(f - target) = {bias:+.3g}"
        notes.append(f"{name}: {fit}")
    return EvaluationResult(scores=scores, artifacts={"feedback": "; ".join(notes)})
