"""The lazy schedule of a run: the budget's iterations not yet completed, in order, handed out one at a time.

The workers of a run share one schedule; it holds a counter, not a list, so a budget of ten million iterations
costs what a budget of ten does (the completed set comes from the store and is as large as the run so far).
"""

from __future__ import annotations

from collections.abc import Iterator, Set


class IterationSchedule(Iterator[int]):
    """Iterations 1..budget, skipping those in `done`; safe to share between asyncio workers (no await inside)."""

    def __init__(self, budget: int, done: Set[int]) -> None:
        self.budget, self._done, self._next = budget, done, 1

    @property
    def completed(self) -> int:
        """How many iterations of the budget were already done when the schedule was made."""
        return sum(1 for iteration in self._done if 1 <= iteration <= self.budget)

    def __next__(self) -> int:
        while self._next <= self.budget and self._next in self._done:
            self._next += 1
        if self._next > self.budget:
            raise StopIteration
        self._next += 1
        return self._next - 1
