"""An experiment in pieces (`pieces = N`): its problems cut into N consecutive groups, each group's cells in a SQLite
file of its own, run one after another.

A long experiment (an ablation or a study's evolution: hundreds of thousands of answers) then commits each piece
once, packed, when it ends, instead of one growing store recommitted every session. A piece is the experiment
restricted to its problems (`piece_view`): its cells are the experiment's own (a cell's streams derive from its
problem and seed, not from the problems beside it), and every piece's store keeps the whole design, so a report
reads the design from any of them and the cells from all (`piece_stores`).
"""

from __future__ import annotations

from pathlib import Path

from evolve.config import ConfigError
from evolve.engine.experiment_spec import PIECE_FIELD, ExperimentSpec
from evolve.store.program_store import ProgramStore


def piece_numbers(spec: ExperimentSpec) -> range:
    return range(1, spec.pieces + 1)


def piece_problems(spec: ExperimentSpec, piece: int) -> tuple[str, ...]:
    """Piece `piece`'s problems (1-based): consecutive in the file's order, the pieces' sizes differing by one at
    most, the larger ones first."""
    _check_piece(spec, piece)
    size, larger = divmod(len(spec.problems), spec.pieces)
    start = (piece - 1) * size + min(piece - 1, larger)
    return spec.problems[start:start + size + (piece - 1 < larger)]


def problem_pieces(spec: ExperimentSpec) -> dict[str, int]:
    """Each problem's piece (1-based); an experiment of one piece: 1 for every problem."""
    return {problem: piece for piece in piece_numbers(spec) for problem in piece_problems(spec, piece)}


def piece_db(spec: ExperimentSpec, piece: int) -> str:
    """Piece `piece`'s store: the experiment's db with its number (01, 02, ...) for {piece}."""
    _check_piece(spec, piece)
    return spec.db.replace(PIECE_FIELD, f"{piece:02d}")


def piece_view(spec: ExperimentSpec, piece: int) -> ExperimentSpec:
    """The experiment restricted to piece `piece`: its problems, its store (an experiment of one piece: itself)."""
    if spec.pieces == 1:
        _check_piece(spec, piece)
        return spec
    return spec.model_copy(update={"problems": piece_problems(spec, piece), "db": piece_db(spec, piece),
                                   "pieces": 1})


def begun_pieces(spec: ExperimentSpec) -> list[ExperimentSpec]:
    """The views of the pieces that have a store (a piece not begun has none); one piece: the experiment itself,
    whether its store exists or not (opening it says so)."""
    if spec.pieces == 1:
        return [spec]
    views = [piece_view(spec, piece) for piece in piece_numbers(spec)]
    return [view for view in views if Path(view.db).is_file()]


def piece_stores(spec: ExperimentSpec) -> list[ProgramStore]:
    """The store of each begun piece, opened read-only: what a report reads (each cell from the store holding it,
    so a report whose problems are split otherwise than the run's still finds every cell)."""
    return [ProgramStore(view.db, mode="read") for view in begun_pieces(spec)]


def stored_designs(spec: ExperimentSpec) -> list[tuple[str, str]]:
    """(store, the design it keeps) for each begun piece whose store keeps one."""
    designs = []
    for view in begun_pieces(spec):
        store = ProgramStore(view.db, mode="read")
        try:
            design = store.experiment_spec(spec.name)
        finally:
            store.close()
        if design is not None:
            designs.append((view.db, design))
    return designs


def stored_design(spec: ExperimentSpec) -> str | None:
    """The design the experiment ran with, as the first of its stores that has it keeps it; None when none does."""
    designs = stored_designs(spec)
    return designs[0][1] if designs else None


def _check_piece(spec: ExperimentSpec, piece: int) -> None:
    if piece not in piece_numbers(spec):
        raise ConfigError(f"experiment {spec.name}: no piece {piece}; it has "
                          + (f"pieces 1-{spec.pieces}" if spec.pieces > 1 else "one piece (pieces = 1)"))
