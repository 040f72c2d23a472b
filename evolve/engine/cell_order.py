"""The order a batch's cells start in: the ones expected to run longest first, so the batch ends on quick ones.

A batch of an experiment (an arm's cells, or its cells of one seed) runs `parallel_cells` at a time and its model
is loaded once for it; the next batch starts only when the batch's last cell has finished. Cells started in file
order leave the batch's end to whichever cells happen to come last, and when those are problems no cell cracks
(each runs its whole iteration budget) most slots stand empty for that long. Longest first (the classic rule
for filling parallel machines) starts them early and keeps the quick cracks for the end. Only when a cell starts
changes: each cell's streams come from its problem and seed, not from when it runs.

The estimates are not fixed when the batch starts: `CellSlots` hands each slot that frees to the waiting cell then
expected longest, with what the cells finished meanwhile have taught (a batch of several seeds learns from its first
seed which problems run their whole budget, and starts their later seeds early).
"""

from __future__ import annotations

import asyncio
import contextlib
from collections import defaultdict
from collections.abc import AsyncIterator, Callable
from statistics import fmean

from evolve.engine.cells import CellProgress
from evolve.store.program_store import ProgramStore


def iterations_by_problem(store: ProgramStore, experiment: str) -> dict[str, float]:
    """Per problem, the mean iterations the experiment's finished cells of it ran: to their first solved program,
    or their whole budget when none was solved."""
    return {problem: fmean(iterations) for problem, iterations in spent_by_problem(store, experiment).items()}


def spent_by_problem(store: ProgramStore, experiment: str) -> dict[str, list[int]]:
    """Per problem, the iterations each of the experiment's finished cells of it ran (cell_spent)."""
    runs = {info.id: info for info in store.list_runs()}
    spent: dict[str, list[int]] = defaultdict(list)
    for cell in store.experiment_cells(experiment):
        info = runs.get(cell.run_id)
        if info is not None and info.status == "finished":
            spent[cell.problem].append(cell_spent(store, cell.run_id, info.iterations_target))
    return spent


def cell_spent(store: ProgramStore, run_id: int, budget: int) -> int:
    """The iterations a finished cell ran: to its first solved program, or its whole budget."""
    solved = store.first_solved(run_id)
    return solved.iteration if solved is not None else budget


class CellSlots:
    """`count` slots for a batch's cells (parallel_cells). A cell waits for one in `slot`; each slot that frees
    goes to the waiting cell that `order` puts first at that moment (longest_first on the estimates as they are
    then), and the first `count` cells take one as they come."""

    def __init__(self, count: int, order: Callable[[list[CellProgress]], list[CellProgress]]) -> None:
        self._free = count
        self._order = order
        self._waiting: list[tuple[CellProgress, asyncio.Future[None]]] = []

    def locked(self) -> bool:
        return self._free == 0

    @contextlib.asynccontextmanager
    async def slot(self, cell: CellProgress) -> AsyncIterator[None]:
        await self._acquire(cell)
        try:
            yield
        finally:
            self._release()

    async def _acquire(self, cell: CellProgress) -> None:
        if self._free > 0 and not self._waiting:
            self._free -= 1
            return
        future: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self._waiting.append((cell, future))
        try:
            await future
        except asyncio.CancelledError:
            if any(waiting is future for _, waiting in self._waiting):
                self._waiting = [(c, f) for c, f in self._waiting if f is not future]
            elif future.done() and not future.cancelled():  # handed a slot as it was cancelled: pass it on
                self._release()
            raise

    def _release(self) -> None:
        while self._waiting:
            chosen = self._order([cell for cell, _ in self._waiting])[0]
            index = next(i for i, (cell, _) in enumerate(self._waiting) if cell is chosen)
            _, future = self._waiting.pop(index)
            if not future.done():
                future.set_result(None)
                return
        self._free += 1


def longest_first(todo: list[CellProgress], expected: dict[str, float]) -> list[CellProgress]:
    """`todo` in the order to start it: cells resumed from an interruption first (their work is under way), then
    by the iterations their problem is `expected` to take, most first; a problem with no estimate counts as the
    longest. Ties keep `todo`'s order, so an experiment with no finished cell starts in file order."""
    longest = max(expected.values(), default=0.0)

    def rank(cell: CellProgress) -> tuple[bool, float]:
        problem = cell.key[0]
        return cell.run_id is None, -expected.get(problem, longest)

    return sorted(todo, key=rank)
