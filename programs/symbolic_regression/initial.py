"""Symbolic regression: f(x) should match a hidden function on [-2, 2]."""

import math

# EVOLVE-BLOCK-START
def f(x: float) -> float:
    """Approximate the hidden function."""
    return x
# EVOLVE-BLOCK-END
