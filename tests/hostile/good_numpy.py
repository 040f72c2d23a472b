import numpy as np


def solve(x):
    return np.arange(x) * 2.0
