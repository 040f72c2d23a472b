"""Known-good solution for bin_packing: the OR-instance heuristic reported in the FunSearch paper."""

import numpy as np


# EVOLVE-BLOCK-START
def priority(item: float, bins: np.ndarray) -> np.ndarray:
    score = 1000 * np.ones(bins.shape)
    score -= bins * (bins - item)  # penalise bins with a lot of room left
    index = np.argmin(bins)  # the fullest bin that still fits
    score[index] *= item
    score[index] -= (bins[index] - item) ** 4  # unless the fit is loose
    return score
# EVOLVE-BLOCK-END
