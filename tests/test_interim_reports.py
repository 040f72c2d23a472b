"""Interim reports of an experiment or study under way: only the (piece, seed) parts every arm has finished count,
so the arms are compared on the same problems and seeds (a seed when the experiment is one piece)."""

from __future__ import annotations

import json
from pathlib import Path

from evolve.engine.experiment_spec import ExperimentSpec
from evolve.report.results import collect
from evolve.report.study_markdown import results_markdown
from evolve.report.study_report import study_json
from evolve.store.program_store import ProgramStore
from tests.test_study_report import FACTS, _split_study, _write_cell


def test_an_interim_report_counts_only_the_seeds_every_arm_has_finished(tmp_path: Path) -> None:
    """Seeds 0 and 1 whole; of seed 2 the base's cells and vpo-t0's p0 have finished (vpo-t0 cracked it: a quick
    crack, the kind that finishes first), grpo-t0's p0 is under way and the rest have not started."""
    from evolve.report.cell_status import cell_statuses, whole_parts

    spec, store = _split_study(tmp_path)
    for problem, policy, seed in spec.cells():
        if seed < 2 or policy == "base" or (problem, policy) in {("p0", "vpo-t0"), ("p0", "grpo-t0")}:
            _write_cell(store, spec, problem, policy, seed, cracks=policy.startswith("vpo") and problem == "p0")
    under_way = next(c.run_id for c in store.experiment_cells(spec.name) if (c.problem, c.policy, c.seed) == (
        "p0", "grpo-t0", 2))
    store.set_run_status(under_way, "interrupted")
    assert whole_parts(spec, cell_statuses(store, spec)) == ((1, 0), (1, 1))
    interim, everything = collect(store, spec, parts=whole_parts(spec, cell_statuses(store, spec))), collect(store, spec)
    assert (interim.row("p0", "vpo-t0").seeds_run, interim.row("p0", "vpo-t0").cracked) == (1, 1)
    assert (everything.row("p0", "vpo-t0").seeds_run, everything.row("p0", "vpo-t0").cracked) == (2, 2)
    assert interim.row("p1", "base").seeds_run == 2 and everything.row("p1", "base").seeds_run == 3
    assert interim.row("p0", "grpo-t0").seeds_run == 1
    assert any(note.startswith("Interim: evolution seeds 0, 1 finished for every arm (12 of 18 cells)")
               for note in interim.notes)
    document = study_json("study", {**FACTS, "interim": {"seeds": [0, 1], "cells_counted": 12, "cells": 18}},
                          [], [], {}, interim, {})
    assert results_markdown(document).startswith("**Interim results, the study under way: evolution seeds 0, 1 "
                                                 "finished for every arm (12 of 18 cells).**")
    assert "Interim" not in results_markdown(json.loads(json.dumps(study_json("study", FACTS, [], [], {},
                                                                                everything, {}))))


def _split_study_in_two_pieces(tmp_path: Path) -> tuple[ExperimentSpec, list[ProgramStore]]:
    """_split_study with pieces = 2 (p0 in piece 1, p1 in piece 2) and each piece's empty store."""
    from evolve.engine.experiment_pieces import piece_db

    spec, _ = _split_study(tmp_path)
    spec = spec.model_copy(update={"db": str(tmp_path / "study_{piece}.db"), "pieces": 2})
    stores = [ProgramStore(piece_db(spec, piece)) for piece in (1, 2)]
    for store in stores:
        store.save_experiment(spec.name, spec.model_dump_json())
    return spec, stores


def test_an_interim_report_of_a_study_in_pieces_counts_the_finished_pieces_problems(tmp_path: Path) -> None:
    """pieces = 2 (p0 in piece 1, p1 in piece 2): piece 1 has finished every arm's seeds, piece 2 only the base's
    seed 0. No seed is whole on every problem, yet the first piece's problems compare the arms on all three seeds."""
    from evolve.report.cell_status import cell_statuses_in, whole_parts
    from evolve.study.evolution_stage import evolution_counts

    spec, stores = _split_study_in_two_pieces(tmp_path)
    for problem, policy, seed in spec.cells():
        if problem == "p0" or (policy, seed) == ("base", 0):
            _write_cell(stores[problem == "p1"], spec, problem, policy, seed,
                        cracks=policy.startswith("vpo") and problem == "p0")
    statuses = cell_statuses_in(stores, spec)
    assert whole_parts(spec, statuses) == ((1, 0), (1, 1), (1, 2))
    interim = collect(stores, spec, parts=whole_parts(spec, statuses))
    assert (interim.row("p0", "vpo-t0").seeds_run, interim.row("p0", "vpo-t0").cracked) == (2, 2)
    assert interim.row("p0", "base").seeds_run == 3 and interim.row("p1", "base").state == "not_run"
    assert any(note.startswith("Interim: piece 1 (seeds 0, 1, 2) finished for every arm (9 of 18 cells)")
               for note in interim.notes)
    assert "every arm has finished piece 1 (seeds 0, 1, 2): 3 of 6 (piece, seed) parts" in \
        evolution_counts(spec, statuses).detail
    document = study_json("study", {**FACTS, "interim": {"seeds": [0, 1, 2], "parts": [[1, 0], [1, 1], [1, 2]],
                                                         "pieces": 2, "cells_counted": 9, "cells": 18}},
                          [], [], {}, interim, {})
    assert results_markdown(document).startswith("**Interim results, the study under way: piece 1 (seeds 0, 1, 2) "
                                                 "finished for every arm (9 of 18 cells).** Every evolution number "
                                                 "below compares the arms on those same problems and seeds only")


def test_parts_are_named_piece_by_piece_with_pieces_of_the_same_seeds_together() -> None:
    from evolve.report.cell_status import parts_text

    assert parts_text([(1, 0), (1, 1), (2, 0), (2, 1), (3, 0)], 10) == "pieces 1 and 2 (seeds 0, 1), piece 3 (seed 0)"
    whole = [(piece, seed) for piece in (1, 2, 3, 5, 7, 8) for seed in (0, 1)] + [(9, 0)]
    assert parts_text(whole, 10) == "pieces 1-3, 5, 7 and 8 (seeds 0, 1), piece 9 (seed 0)"
    assert parts_text([(1, 0), (1, 1)], 1) == "evolution seeds 0, 1"
    assert parts_text([], 1) == "no evolution seed" and parts_text([], 3) == "no (piece, seed)"


def test_with_checkpoints_splitting_the_seeds_a_pieces_parts_count_only_once_every_seed_of_it_is_whole(
        tmp_path: Path) -> None:
    """Split design in 2 pieces: piece 1 whole on seeds 0-2, piece 2 on seed 0 only. Seed 0's part of piece 2 holds
    vpo-t0 but not vpo-t1 (seed 1), so counting it would set vpo-t0's share on more problems than vpo-t1's."""
    from evolve.report.cell_status import cell_statuses_in, whole_parts

    spec, stores = _split_study_in_two_pieces(tmp_path)
    for problem, policy, seed in spec.cells():
        if problem == "p0" or seed == 0:
            _write_cell(stores[problem == "p1"], spec, problem, policy, seed)
    statuses = cell_statuses_in(stores, spec)
    assert whole_parts(spec, statuses) == ((1, 0), (1, 1), (1, 2), (2, 0))
    assert whole_parts(spec, statuses, whole_pieces=True) == ((1, 0), (1, 1), (1, 2))
