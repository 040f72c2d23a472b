"""Trusted evaluator for circle_packing: verifies the 26 circles itself and scores sum, containment, separation.

The candidate's child only returns circles; every check happens here, so a forged driver or a claimed
sum cannot raise a score. Invalid packings are repaired by shrinking (see `repaired_radii`), which gives
partial credit while keeping the radii sum that is scored the sum of a packing that really is valid.
"""

import math
from pathlib import Path

from evolve.evaluator_api import CandidateFailure, EvaluationResult, Sandbox, fail_unless_ok

CIRCLES = 26
BEST_KNOWN = 2.635  # AlphaEvolve (2025); previous best 2.634
TOLERANCE = 1e-9
DRIVER = Path(__file__).with_name("driver.py")

Circle = tuple[float, float, float]


def parse_circles(reply: object) -> list[Circle]:
    """The driver's reply as 26 finite (x, y, r) with r >= 0; CandidateFailure('bad_output') otherwise."""
    if isinstance(reply, dict) and isinstance(reply.get("bad_output"), str):
        raise CandidateFailure("bad_output", reply["bad_output"])
    rows = reply.get("circles") if isinstance(reply, dict) else None
    if not isinstance(rows, list):
        raise CandidateFailure("bad_output", "expected a list of circles")
    if len(rows) != CIRCLES:
        raise CandidateFailure("bad_output", f"expected {CIRCLES} circles, got {len(rows)}")
    circles = []
    for number, row in enumerate(rows):
        if (not isinstance(row, list) or len(row) != 3
                or not all(isinstance(v, (int, float)) and not isinstance(v, bool) for v in row)):
            raise CandidateFailure("bad_output", f"circle {number} is not three numbers (x, y, r)")
        try:
            x, y, r = (float(v) for v in row)
        except OverflowError:  # an int past the largest float
            raise CandidateFailure("bad_output", f"circle {number} is not finite") from None
        if not all(math.isfinite(v) for v in (x, y, r)):  # checked here: the driver's own check is the candidate's
            raise CandidateFailure("bad_output", f"circle {number} is not finite")
        if r < 0:
            raise CandidateFailure("bad_output", f"circle {number} has a negative radius {r!r}")
        circles.append((x, y, r))
    return circles


def wall_room(x: float, y: float) -> float:
    """How far the centre is from the nearest side of the square (negative outside it)."""
    return min(x, 1.0 - x, y, 1.0 - y)


def inside(circle: Circle) -> bool:
    x, y, r = circle
    return r <= wall_room(x, y) + TOLERANCE


def overlap(a: Circle, b: Circle) -> bool:
    return math.hypot(a[0] - b[0], a[1] - b[1]) < a[2] + b[2] - TOLERANCE


def repaired_radii(circles: list[Circle]) -> list[float]:
    """Radii after shrinking violators: a valid packing, identical to the input when nothing is violated.

    A circle that pokes out of the square is clipped to the distance from its centre to the nearest side
    (0 if the centre is outside); then every pair that still overlaps, in index order, is scaled by
    distance / (r_i + r_j). Radii only ever shrink, so a pair fixed earlier stays fixed.
    """
    radii = [r if inside((x, y, r)) else max(0.0, wall_room(x, y)) for x, y, r in circles]
    for i in range(CIRCLES):
        for j in range(i + 1, CIRCLES):
            distance = math.hypot(circles[i][0] - circles[j][0], circles[i][1] - circles[j][1])
            if distance < radii[i] + radii[j] - TOLERANCE:
                scale = distance / (radii[i] + radii[j])
                radii[i] *= scale
                radii[j] *= scale
    return radii


def evaluate(program_path: str, sandbox: Sandbox) -> EvaluationResult:
    circles = parse_circles(fail_unless_ok(sandbox.run_driver(program_path, DRIVER, {})).value)
    outside = [number for number, circle in enumerate(circles) if not inside(circle)]
    pairs = [(i, j) for i in range(CIRCLES) for j in range(i + 1, CIRCLES) if overlap(circles[i], circles[j])]
    overlapping = sorted({number for pair in pairs for number in pair})
    try:
        claimed = math.fsum(r for _, _, r in circles)
    except OverflowError:  # finite radii whose sum is past the largest float
        claimed = math.inf
    valid_sum = math.fsum(repaired_radii(circles))
    scores = {
        "sum_ratio": min(1.0, valid_sum / BEST_KNOWN),
        "containment": (CIRCLES - len(outside)) / CIRCLES,
        "separation": (CIRCLES - len(overlapping)) / CIRCLES,
    }
    notes = [f"sum of radii {claimed:.6f}"]
    if outside or pairs:
        notes.append(f"invalid: circles {outside[:8]} leave the square, {len(pairs)} overlapping pairs "
                     f"{pairs[:6]}; after shrinking the violators the sum is {valid_sum:.6f}")
    else:
        notes.append(f"valid packing (best known {BEST_KNOWN})")
    return EvaluationResult(scores=scores, artifacts={"feedback": "; ".join(notes)})
