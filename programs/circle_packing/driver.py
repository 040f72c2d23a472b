"""Runs inside the sandbox: calls the candidate's construct_packing() and returns its circles as plain floats. The
values go back raw: whether they are finite, inside the square and apart is judged by the evaluator, outside the
candidate's process, since anything checked here (math.isfinite, float) the candidate can replace."""

from types import ModuleType

CIRCLES = 26


def as_circles(packing: object) -> list[list[float]] | str:
    """The packing as [[x, y, r], ...] of floats, or a one-line reason why it is not one."""
    try:
        rows = [list(row) for row in packing]  # type: ignore[union-attr]
    except TypeError:
        return f"construct_packing must return a sequence of (x, y, r) triples, not {type(packing).__name__}"
    if len(rows) != CIRCLES:
        return f"construct_packing must return {CIRCLES} circles, got {len(rows)}"
    circles = []
    for number, row in enumerate(rows):
        if len(row) != 3:
            return f"circle {number} has {len(row)} values instead of 3 (x, y, r)"
        try:
            values = [float(value) for value in row]
        except (TypeError, ValueError, OverflowError):
            return f"circle {number} holds something that is not a number: {row!r}"[:300]
        circles.append(values)
    return circles


def drive(candidate: ModuleType, payload: dict) -> dict:
    construct = getattr(candidate, "construct_packing", None)
    if not callable(construct):
        raise TypeError("the program defines no function construct_packing()")
    circles = as_circles(construct())
    return {"bad_output": circles} if isinstance(circles, str) else {"circles": circles}
