import numpy as np


def solve(x):
    return float(np.ones(1 << 40).sum())
