"""Online bin packing: a priority function decides which bin each arriving item goes into."""

import numpy as np


# EVOLVE-BLOCK-START
def priority(item: float, bins: np.ndarray) -> np.ndarray:
    """Score each bin that can hold the item (bins holds remaining capacities); the highest score wins."""
    return -np.arange(len(bins), dtype=float)
# EVOLVE-BLOCK-END
