"""MAP-Elites grid: the best program per cell of a grid over behaviour features (code length, scalar, objectives).

Binning, chosen so that cells stay stable and the grid stays bounded:

* ``code_length``: log2 of the code's length in characters over a fixed range, 64 to 16,384 characters
  spread over the bins (shorter code falls in the first bin, longer in the last).
* ``scalar`` and objective names: equal-width bins over a range that starts as [0, 1] (so scores that
  already live in [0, 1] are simply quantised) and, when a value falls outside, doubles its width
  away from the edge the value did not cross. Doubling keeps the old bins nested inside the new
  ones (every new bin is exactly two old bins), so re-binning merges cells and keeps the best of
  each merge: the grid then equals what binning every program ever added in the new range would
  give. A range grows at most about 50 times (values beyond +-1e15, NaN and infinities are clamped
  to the edge bins instead of growing it), and a re-bin touches only the occupied cells.
"""

from __future__ import annotations

import bisect
import math
import random
from collections.abc import Iterable

from evolve.records import Program, code_length_of

BUILTIN_FEATURES = ("code_length", "scalar")
CODE_LENGTH_LOG2_RANGE = (6.0, 14.0)  # 64 .. 16,384 characters
_LARGEST_TRACKED = 1e15  # beyond this a value is clamped to an edge bin rather than growing the range

Cell = tuple[int, ...]


def rank(program: Program) -> tuple[float, int]:
    """The total order used for 'better' everywhere: higher scalar first, then the older (lower) id."""
    scalar = program.scalar if not math.isnan(program.scalar) else -math.inf
    return scalar, -program.id


class FeatureRange:
    """The [low, high] interval one value feature is binned over; grows by doubling (see module docstring)."""

    def __init__(self, low: float = 0.0, high: float = 1.0, growable: bool = True) -> None:
        self.low = low
        self.high = high
        self.growable = growable

    def cover(self, value: float) -> bool:
        """Grow the range until it holds `value`; True when it changed."""
        if not self.growable or not math.isfinite(value) or abs(value) > _LARGEST_TRACKED:
            return False
        changed = False
        while value > self.high:
            self.high = self.low + 2 * (self.high - self.low)
            changed = True
        while value < self.low:
            self.low = self.high - 2 * (self.high - self.low)
            changed = True
        return changed

    def bin(self, value: float, bins: int) -> int:
        if math.isnan(value):
            return 0
        position = (value - self.low) / (self.high - self.low) if math.isfinite(value) else math.copysign(2, value)
        position = min(2.0, max(-1.0, position))  # a finite value near the float limit can still overflow to inf
        return min(bins - 1, max(0, int(position * bins)))


class MapElitesGrid:
    """Keeps the best program (by `rank`) in each occupied cell of a grid over the chosen features."""

    def __init__(self, features: Iterable[str], objectives: Iterable[str], bins: int) -> None:
        self.features = tuple(features)
        allowed = BUILTIN_FEATURES + tuple(objectives)
        for feature in self.features:
            if feature not in allowed:
                raise ValueError(f"unknown MAP-Elites feature '{feature}' (allowed: {', '.join(allowed)})")
        self.bins = bins
        self.ranges = {
            feature: FeatureRange(*CODE_LENGTH_LOG2_RANGE, growable=False) if feature == "code_length"
            else FeatureRange()
            for feature in self.features
        }
        self.cells: dict[Cell, Program] = {}
        self.occupied: list[Cell] = []  # sorted, so draws do not depend on the order cells filled

    def value(self, feature: str, program: Program) -> float:
        if feature == "code_length":
            return math.log2(max(code_length_of(program), 1))
        if feature == "scalar":
            return program.scalar
        return program.scores.get(feature, math.nan)

    def cell_of(self, program: Program) -> Cell:
        return tuple(self.ranges[f].bin(self.value(f, program), self.bins) for f in self.features)

    def add(self, program: Program) -> bool:
        """Place `program`; True when it is now its cell's elite. O(features), or O(cells) on a re-bin."""
        values = [self.value(feature, program) for feature in self.features]
        grew = False
        for feature, value in zip(self.features, values, strict=True):
            grew = self.ranges[feature].cover(value) or grew
        if grew:
            self._rebin()
        return self._place(program, tuple(self.ranges[feature].bin(value, self.bins)
                                          for feature, value in zip(self.features, values, strict=True)))

    def _place(self, program: Program, cell: Cell | None = None) -> bool:
        """Make `program` its cell's elite unless the incumbent ranks higher; `cell`: cell_of(program), if known."""
        cell = self.cell_of(program) if cell is None else cell
        incumbent = self.cells.get(cell)
        if incumbent is None:
            bisect.insort(self.occupied, cell)
        elif incumbent.id != program.id and rank(incumbent) >= rank(program):
            return False
        self.cells[cell] = program
        return True

    def _rebin(self) -> None:
        elites = list(self.cells.values())
        self.cells, self.occupied = {}, []
        for program in elites:
            self._place(program)

    def materialize(self, whole: dict[int, Program]) -> None:
        """Put the whole program in place of each elite whose id `whole` holds (see Selector.materialize)."""
        self.cells = {cell: whole.get(elite.id, elite) for cell, elite in self.cells.items()}

    def draw(self, rng: random.Random) -> Program | None:
        """One elite, uniform over the occupied cells."""
        return self.cells[self.occupied[rng.randrange(len(self.occupied))]] if self.occupied else None

    def draw_distinct(self, rng: random.Random, count: int) -> list[Program]:
        """Elites of up to `count` distinct cells, in random order; O(count)."""
        picks = rng.sample(range(len(self.occupied)), min(count, len(self.occupied)))
        return [self.cells[self.occupied[index]] for index in picks]
