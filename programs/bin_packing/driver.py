"""Runs inside the sandbox: packs each instance online with the candidate's priority function.

For each arriving item the candidate sees the remaining capacities of the open bins that can hold
it (in the order they were opened) followed by one fresh empty bin, and returns one score per bin;
the item goes into the highest-scoring bin (the first one on ties; NaN counts as lowest).
"""

from types import ModuleType

import numpy as np


class BadOutput(Exception):
    """The candidate's priority function returned something that is not one score per bin."""


def pack(priority, items: list[int], capacity: int) -> list[int]:
    """The bin index of each item, bins numbered in the order they were opened."""
    remaining = np.zeros(0)
    assignment = []
    for item in items:
        fits = np.flatnonzero(remaining >= item)
        options = np.append(remaining[fits], float(capacity))
        scores = np.asarray(priority(float(item), options.copy()), dtype=float)
        if scores.shape != options.shape:
            raise BadOutput(f"priority must return one score per bin: got shape {scores.shape} "
                            f"for {len(options)} bins")
        choice = int(np.argmax(np.where(np.isnan(scores), -np.inf, scores)))
        if choice == len(fits):
            remaining = np.append(remaining, float(capacity))
            index = len(remaining) - 1
        else:
            index = int(fits[choice])
        remaining[index] -= item
        assignment.append(index)
    return assignment


def drive(candidate: ModuleType, payload: dict) -> dict:
    priority = getattr(candidate, "priority", None)
    if not callable(priority):
        raise TypeError("the program defines no function priority(item, bins)")
    try:
        return {"packings": [pack(priority, items, payload["capacity"]) for items in payload["instances"]]}
    except BadOutput as problem:
        return {"bad_output": str(problem)}
