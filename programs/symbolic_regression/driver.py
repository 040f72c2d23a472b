"""Runs inside the sandbox: evaluates the candidate's f at the given points (None where it fails)."""

import math


def drive(candidate, xs):
    ys = []
    for x in xs:
        try:
            y = float(candidate.f(x))
        except Exception:  # a failure at one point costs that point, not the whole program
            y = None
        ys.append(y if y is not None and math.isfinite(y) else None)
    return ys
