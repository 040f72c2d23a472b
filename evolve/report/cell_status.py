"""Which of an experiment's cells have run and finished, and the (piece, seed) parts every arm has finished: the
unit an interim report counts (a study's `--report-so-far` and `--status`).

The cells finished first are the quick cracks, so an interim report that counted every finished cell would flatter
the arm ahead, and one that read an unfinished cell as a failure would not be fair either: it counts whole parts
only, every arm's cells of a piece's problems for one evolution seed. An experiment of one piece: whole seeds.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from evolve.engine.experiment_pieces import problem_pieces
from evolve.engine.experiment_spec import CellKey, ExperimentSpec
from evolve.store.program_store import ProgramStore


def cell_statuses(store: ProgramStore, spec: ExperimentSpec) -> dict[CellKey, str]:
    """The run status of each of the experiment's cells that has a run in the store, by (problem, policy, seed)."""
    status = {info.id: info.status for info in store.list_runs()}
    planned = set(spec.cells())
    return {key: status[cell.run_id] for cell in store.experiment_cells(spec.name)
            if (key := (cell.problem, cell.policy, cell.seed)) in planned and cell.run_id in status}


def cell_statuses_in(stores: Sequence[ProgramStore], spec: ExperimentSpec) -> dict[CellKey, str]:
    """cell_statuses over several stores (an experiment's pieces), a cell's status from the first store holding it."""
    statuses: dict[CellKey, str] = {}
    for store in stores:
        for key, status in cell_statuses(store, spec).items():
            statuses.setdefault(key, status)
    return statuses


Part = tuple[int, int]  # (piece, seed): the unit an interim report counts


def planned_parts(spec: ExperimentSpec) -> dict[Part, list[CellKey]]:
    """Each (piece, seed) part some arm runs, with its cells, piece by piece in `spec.seeds` order."""
    piece_of = problem_pieces(spec)
    cells: dict[Part, list[CellKey]] = {}
    for key in spec.cells():
        cells.setdefault((piece_of[key[0]], key[2]), []).append(key)
    return {part: cells[part] for part in sorted(cells, key=lambda part: (part[0], spec.seeds.index(part[1])))}


def whole_parts(spec: ExperimentSpec, statuses: Mapping[CellKey, str], whole_pieces: bool = False) -> tuple[Part, ...]:
    """The (piece, seed) parts whose every cell (every arm that runs the seed, every problem of the piece) has finished
    (`statuses`: from cell_statuses), piece by piece in `spec.seeds` order. An experiment of one piece: (1, seed) per
    seed finished on every problem. Pieces run one after another, so with several a seed is whole on every problem
    only near the end: the finished pieces' problems are what an interim report can compare the arms on.
    `whole_pieces`: a piece's parts count only once all of them are whole. A design whose checkpoints split the seeds
    (checkpoint_seeds = "split") needs it: there a seed's part holds only some of an arm's checkpoints, so the
    per-checkpoint shares would rest on different problems."""
    planned = planned_parts(spec)
    whole = [part for part, cells in planned.items() if all(statuses.get(key) == "finished" for key in cells)]
    if whole_pieces:
        done = {piece for piece, _ in planned} - {piece for piece, seed in planned if (piece, seed) not in whole}
        whole = [part for part in whole if part[0] in done]
    return tuple(whole)


def parts_text(parts: Sequence[Sequence[int]], pieces: int) -> str:
    """'evolution seeds 0, 1' (one piece), or 'pieces 1 and 2 (seeds 0, 1), piece 3 (seed 0)'; 'no evolution seed'
    / 'no (piece, seed)' when none."""
    if pieces == 1:
        seeds = [seed for _piece, seed in parts]
        return (f"evolution seed{'s' * (len(seeds) != 1)} {', '.join(map(str, seeds))}" if seeds
                else "no evolution seed")
    if not parts:
        return "no (piece, seed)"
    by_piece: dict[int, list[int]] = {}
    for piece, seed in parts:
        by_piece.setdefault(piece, []).append(seed)
    groups: dict[tuple[int, ...], list[int]] = {}
    for piece, seeds in by_piece.items():
        groups.setdefault(tuple(seeds), []).append(piece)
    return ", ".join(f"piece{'s' * (len(numbers) != 1)} {_numbers_text(numbers)} (seed{'s' * (len(seeds) != 1)} "
                     f"{', '.join(map(str, seeds))})" for seeds, numbers in groups.items())


def _numbers_text(numbers: list[int]) -> str:
    """[1, 2, 3, 5, 7, 8] -> '1-3, 5, 7 and 8': runs of three or more as a range."""
    runs: list[list[int]] = []
    for number in numbers:
        if runs and number == runs[-1][-1] + 1:
            runs[-1].append(number)
        else:
            runs.append([number])
    named: list[str] = []
    for run in runs:
        named += [f"{run[0]}-{run[-1]}"] if len(run) >= 3 else [str(number) for number in run]
    return ", ".join(named[:-1]) + f" and {named[-1]}" if len(named) > 1 else named[0]
