"""Redoing evolution cells: cells whose runs a defect touched (a policy setting that refused some of one arm's
requests, say) are taken out of the study, their runs kept in the store under a new name, so the evolve stage runs
them again; each redo is recorded in the study's state file, with its reason, and named by the report."""

from __future__ import annotations

import time
from collections.abc import Sequence
from typing import Any

from evolve.report.cell_status import cell_statuses
from evolve.study.plan import StudyPaths, StudySpec, experiment_spec
from evolve.study.state import StudyError, StudyState


def evolution_store(spec: StudySpec, paths: StudyPaths, piece: int | None) -> Any:
    """The store whose run ids --redo names: the study's own, or piece `piece`'s of a study in pieces (which run ids
    alone would not tell apart). StudyError when the one is given without the other."""
    from evolve.engine.experiment_pieces import piece_db
    from evolve.store.program_store import ProgramStore

    experiment = experiment_spec(spec, paths)
    if experiment.pieces == 1:
        if piece is not None:
            raise StudyError(f"study {spec.name} evolves in one store: --piece is for a study in pieces")
        return ProgramStore(paths.db)
    if piece is None:
        raise StudyError(f"study {spec.name} evolves in {experiment.pieces} pieces, each store with its own run ids: "
                         "say whose with --piece K")
    return ProgramStore(piece_db(experiment, piece), mode="existing")


def redo_cells(spec: StudySpec, paths: StudyPaths, store: Any, run_ids: Sequence[int],
               reason: str, piece: int | None = None) -> list[dict[str, Any]]:
    """Take the runs `run_ids` (cells of the study's evolution) out of the study so `evolve study` runs those cells
    again; the records appended to the state file's "redone" list. StudyError, with nothing changed, while the
    study runs, without a reason, or for a run id that is not one of its evolution cells."""
    if not reason.strip():
        raise StudyError("say why the cells are redone (--reason): the study's state file and report keep it")
    state = StudyState(paths, read_only=True)
    pid = state.runs_elsewhere()
    if pid is not None:
        raise StudyError(f"study {spec.name} runs (pid {pid}): stop it before redoing cells "
                         "(bash scripts/study/study.sh save)")
    experiment = experiment_spec(spec, paths)
    cells = {cell.run_id: cell for cell in store.experiment_cells(experiment.name)}
    planned = set(experiment.cells())
    unknown = [run_id for run_id in run_ids if run_id not in cells
               or (cells[run_id].problem, cells[run_id].policy, cells[run_id].seed) not in planned]
    if unknown:
        raise StudyError(f"run{'s' * (len(unknown) != 1)} {', '.join(map(str, unknown))}: not a cell of study "
                         f"{spec.name}'s evolution (`evolve runs --db {paths.db}` lists the runs)")
    statuses = cell_statuses(store, experiment)
    when = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
    state = StudyState(paths)
    redone = state.redone
    records = []
    for run_id in dict.fromkeys(run_ids):
        cell = cells[run_id]
        key = (cell.problem, cell.policy, cell.seed)
        store.detach_cell(run_id, f"redone-{len(redone) + 1}")
        record = {"run_id": run_id, "problem": cell.problem, "policy": cell.policy, "seed": cell.seed,
                  "status": statuses.get(key, "?"), "reason": reason.strip(), "at": when}
        if piece is not None:  # run ids repeat across a study's pieces
            record["piece"] = piece
        redone.append(record)
        records.append(record)
        state.save()  # after each: a crash between two leaves the file saying what was done
    return records
