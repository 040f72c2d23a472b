"""The order a batch's cells start in: the ones expected to run longest first, so the batch ends on quick ones.

A batch of an experiment (an arm's cells, or its cells of one seed) runs `parallel_cells` at a time and its model
is loaded once for it; the next batch starts only when the batch's last cell has finished. Cells started in file
order leave the batch's end to whichever cells happen to come last, and when those are problems no cell cracks
(each runs its whole iteration budget) most slots stand empty for that long. Longest first (the classic rule
for filling parallel machines) starts them early and keeps the quick cracks for the end. Only when a cell starts
changes: each cell's streams come from its problem and seed, not from when it runs.
"""

from __future__ import annotations

from collections import defaultdict
from statistics import fmean

from evolve.engine.cells import CellProgress
from evolve.store.program_store import ProgramStore


def iterations_by_problem(store: ProgramStore, experiment: str) -> dict[str, float]:
    """Per problem, the mean iterations the experiment's finished cells of it ran: to their first solved program,
    or their whole budget when none was solved."""
    runs = {info.id: info for info in store.list_runs()}
    spent: dict[str, list[int]] = defaultdict(list)
    for cell in store.experiment_cells(experiment):
        info = runs.get(cell.run_id)
        if info is None or info.status != "finished":
            continue
        solved = store.first_solved(cell.run_id)
        spent[cell.problem].append(solved.iteration if solved is not None else info.iterations_target)
    return {problem: fmean(iterations) for problem, iterations in spent.items()}


def longest_first(todo: list[CellProgress], expected: dict[str, float]) -> list[CellProgress]:
    """`todo` in the order to start it: cells resumed from an interruption first (their work is under way), then
    by the iterations their problem is `expected` to take, most first; a problem with no estimate counts as the
    longest. Ties keep `todo`'s order, so an experiment with no finished cell starts in file order."""
    longest = max(expected.values(), default=0.0)

    def rank(cell: CellProgress) -> tuple[bool, float]:
        problem = cell.key[0]
        return cell.run_id is None, -expected.get(problem, longest)

    return sorted(todo, key=rank)
