"""Online bin packing: a priority function decides which bin each arriving item goes into."""

import math

# EVOLVE-BLOCK-START
def priority(item: float, bins: list[float]) -> list[float]:
    """Score each bin that can hold the item (bins are remaining capacities); the highest score wins."""
    return [-i for i in range(len(bins))]
# EVOLVE-BLOCK-END
