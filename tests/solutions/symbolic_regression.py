"""Known-good solution for symbolic_regression (the Nguyen-1 target itself); never shown to the policy."""


# EVOLVE-BLOCK-START
def f(x: float) -> float:
    return x * (x * (x + 1) + 1)
# EVOLVE-BLOCK-END
