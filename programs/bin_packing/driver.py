"""Runs inside the sandbox: one priority() call of the candidate's, its arguments as numpy as the policy is told.

evaluator.py does the packing itself, in the trusted process, and sends one call per arriving item: the
item and the remaining capacities of the bins that can hold it (plus one fresh bin). So the candidate sees
each item only when it arrives, never the rest of the instance, and whatever this returns is re-checked.
"""

from types import ModuleType
from typing import Any

import numpy as np


def drive(candidate: ModuleType, call: list[Any]) -> Any:
    priority = getattr(candidate, "priority", None)
    if not callable(priority):
        raise TypeError("the program defines no function priority(item, bins)")
    item, bins = call
    return np.asarray(priority(float(item), np.asarray(bins, dtype=float)), dtype=float).tolist()
