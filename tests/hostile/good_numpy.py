import numpy as np


def solve(x):
    values = np.arange(x) * 2.0
    return {"values": values, "total": values.sum(), "count": np.int64(x), "positive": values > 0}
