"""Trusted evaluator for symbolic_regression: per-region fit of the candidate's f to the hidden target."""

from pathlib import Path

from evolve.evaluator_api import CandidateFailure, EvaluationResult, Sandbox, fail_unless_ok

REGIONS = 8
POINTS_PER_REGION = 25
LOW, HIGH = -2.0, 2.0
MISS_PENALTY = 1e6  # squared error charged for a point where f fails or is not finite


def target(x: float) -> float:
    return x**3 + x**2 + x


def grid() -> list[list[float]]:
    width = (HIGH - LOW) / REGIONS
    return [[LOW + width * (r + (i + 0.5) / POINTS_PER_REGION) for i in range(POINTS_PER_REGION)]
            for r in range(REGIONS)]


def evaluate(program_path: str, sandbox: Sandbox) -> EvaluationResult:
    regions = grid()
    xs = [x for region in regions for x in region]
    ys = fail_unless_ok(sandbox.run_driver(program_path, Path(__file__).with_name("driver.py"), xs)).value
    if not isinstance(ys, list) or len(ys) != len(xs):
        raise CandidateFailure("bad_output", "the driver did not return one value per point")
    scores, misses, worst = {}, 0, (0.0, 0.0)
    for r, region in enumerate(regions):
        errors = []
        for x, y in zip(region, ys[r * POINTS_PER_REGION:(r + 1) * POINTS_PER_REGION]):
            if not isinstance(y, (int, float)):
                misses += 1
                errors.append(MISS_PENALTY)
                continue
            error = (y - target(x)) ** 2
            errors.append(min(error, MISS_PENALTY))
            worst = max(worst, (error, x))
        scores[f"region_{r}"] = 1.0 / (1.0 + sum(errors) / len(errors))
    feedback = f"largest error near x={worst[1]:.2f}"
    if misses:
        feedback += f"; f failed or was not finite at {misses} points"
    return EvaluationResult(scores=scores, artifacts={"feedback": feedback})
