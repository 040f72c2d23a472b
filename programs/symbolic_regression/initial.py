"""Symbolic regression: f(x) should match a hidden function of x on [-3, 3]."""

import math  # noqa: F401 - for f


# EVOLVE-BLOCK-START
def f(x: float) -> float:
    """Approximate the hidden function at x."""
    return x
# EVOLVE-BLOCK-END
