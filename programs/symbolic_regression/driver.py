"""Runs inside the sandbox: the candidate's f at each point, None where it raises or is not a finite number."""

import math


def value_at(f, x):
    try:
        y = float(f(x))
    except (ArithmeticError, ValueError, TypeError):  # a failure at one point costs that point's region
        return None
    return y if math.isfinite(y) else None


def drive(candidate, xs):
    f = getattr(candidate, "f", None)
    if not callable(f):
        raise TypeError("the program defines no function f(x)")
    return [value_at(f, x) for x in xs]
