"""`evolve study` between and during its pieces: `--status` (each stage to do, partial or done, a moved folder, the
time left at the pace kept, the seeds every arm has finished and the batches under way), a partly trained
algorithm resumed only with its own settings, interim reports, and `--redo` of evolution cells with their reason."""

from __future__ import annotations

import csv
import json
from datetime import UTC, datetime
from pathlib import Path

import pytest
from study_helpers import STUDY, started_study, write

from evolve.study.plan import load_study


def test_a_fresh_study_has_every_stage_to_do_and_keeps_to_its_store(tmp_path: Path,
                                                                    capsys: pytest.CaptureFixture[str]) -> None:
    from evolve.cli.main import main

    path = write(tmp_path, STUDY)
    folder = tmp_path / "study"
    assert main(["study", str(path), "--out", str(folder), "--status"]) == 0
    out = capsys.readouterr().out
    for line in ("1. train   to do    0/6 training runs (3 algorithms x 2 training seeds): vpo-t0 0/1 steps, vpo-t1 "
                 "0/1 steps, grpo-t0 0/1 steps, grpo-t1 0/1 steps, multi-rlvr-t0 0/1 steps, multi-rlvr-t1 0/1 steps",
                 "2. sample  to do    0/7 (policy, problem) runs of 2 answers",
                 "3. evolve  to do    0/7 cells finished (0 started)", "4. report  to do",
                 "left: no pace yet for train, sample, evolve"):
        assert line in out
    assert not folder.exists()  # --status only reads: no folder, state file or store is made
    folder.mkdir()
    (folder / "study_state.json").write_text(json.dumps({"db": str(folder / "study.db"), "seconds": {}}))  # as a run
    assert main(["study", str(path), "--out", str(folder), "--db", str(tmp_path / "other.db"), "--status"]) == 1
    assert f"this study's store is {folder / 'study.db'}" in capsys.readouterr().out
    assert main(["study", str(path), "--out", str(folder), "--report-so-far"]) == 1
    out = capsys.readouterr().out
    assert "no interim report before its training and sampling are done" in out and len(out.splitlines()) == 1
    assert not (folder / "report").exists()


def test_a_study_moved_from_where_it_started_says_where_to_put_it_back(tmp_path: Path,
                                                                       capsys: pytest.CaptureFixture[str]) -> None:
    from evolve.cli.main import main

    path = write(tmp_path, STUDY)
    folder = tmp_path / "elsewhere" / "study"  # a lease's pack unpacked here; it ran in tmp_path/stage/study
    folder.mkdir(parents=True)
    (folder / "study.db").touch()
    started = tmp_path / "stage" / "study"
    (folder / "study_state.json").write_text(json.dumps({"db": str(started / "study.db"), "seconds": {}}))
    assert main(["study", str(path), "--out", str(folder), "--status"]) == 1
    assert f"this study was moved from {started}" in capsys.readouterr().out


def test_the_time_left_of_a_stage_follows_the_pace_it_has_kept() -> None:
    from evolve.study.pipeline import format_duration, time_left

    assert time_left(600.0, 0.25) == pytest.approx(1800.0)  # a quarter done in 10 min: 30 min to go
    assert time_left(None, 0.5) is None and time_left(600.0, 0.0) is None and time_left(600.0, 1.0) is None
    assert (format_duration(1800.0), format_duration(5400.0), format_duration(20.0)) == ("30 min", "1 h 30 min",
                                                                                         "1 min")


def test_training_time_left_is_the_steps_to_go_at_the_median_of_the_latest_steps(tmp_path: Path) -> None:
    import os
    from types import SimpleNamespace

    from evolve.study.training_stage import training_seconds_left

    def run(name: str, seconds: list[float], steps: int = 10, written: float = 0.0) -> SimpleNamespace:
        out = tmp_path / name
        out.mkdir()
        log = out / "train_log.jsonl"
        log.write_text("".join(json.dumps({"step": i + 1, "seconds": s}) + "\n" for i, s in enumerate(seconds))
                       + '{"step": 99, "seco')  # a torn last line, as a kill mid-write leaves it
        os.utime(log, (written, written))
        return SimpleNamespace(out=str(out), steps=steps)

    assert training_seconds_left([run("fresh", [])]) is None
    # a finished run (older log) and one under way: its slow first steps and the older run's pace do not count
    done = run("vpo-t0", [900.0] * 10, written=1_000.0)
    under_way = run("vpo-t1", [1500.0, 700.0, 400.0, 380.0, 420.0, 390.0, 410.0, 400.0], written=2_000.0)
    todo = run("grpo-t0", [], written=3_000.0)
    seconds, steps_timed = training_seconds_left([done, under_way, todo])  # type: ignore[misc]
    assert (seconds, steps_timed) == (pytest.approx((2 + 10) * 400.0), 5)
    started = run("grpo-t1", [600.0, 500.0], written=4_000.0)
    assert training_seconds_left([started]) == (pytest.approx(8 * 550.0), 2)


def test_the_status_says_how_many_steps_the_training_pace_is_the_median_of(tmp_path: Path) -> None:
    import io

    from rich.console import Console

    from evolve.policies.provenance import TRAIN_CONFIG_FILE
    from evolve.rl.checkpoints import STATE_FILE
    from evolve.study.pipeline import Study
    from evolve.study.plan import StudyPaths

    path = write(tmp_path, STUDY.replace("steps = 1\n", "steps = 10\n"))
    spec = load_study(path)
    text = io.StringIO()
    reader = Study(spec, StudyPaths.of(spec, tmp_path / "study"), Console(file=text, width=300), source=str(path),
                   read_only=True)
    config = reader.train_configs["vpo-t0"]  # two steps in, as a stopped piece leaves it
    out = Path(config.out)
    (out / STATE_FILE).parent.mkdir(parents=True)
    (out / STATE_FILE).touch()
    (out / TRAIN_CONFIG_FILE).write_text(config.model_dump_json())
    (out / "train_log.jsonl").write_text("".join(json.dumps({"step": i, "seconds": s}) + "\n"
                                                 for i, s in ((1, 600.0), (2, 500.0))))
    reader.print_statuses(reader.statuses())
    printed = text.getvalue()
    # 58 steps to go (vpo-t0 8, five runs 10 each) at 550 s
    assert "vpo-t0 2/10 steps, vpo-t1 0/10 steps" in printed, printed
    assert "about 8 h 52 min left at the median of the latest 2 steps" in printed, printed


def test_a_partly_trained_algorithm_is_partial_and_resumes_only_with_its_own_settings(tmp_path: Path) -> None:
    from evolve.policies.provenance import TRAIN_CONFIG_FILE
    from evolve.rl.checkpoints import STATE_FILE
    from evolve.study.plan import train_configs
    from evolve.study.state import StudyError
    from evolve.study.training_stage import TrainingRunStatus, refuse_changed_training, training_status

    spec = load_study(write(tmp_path, STUDY.replace("steps = 1", "steps = 4")))
    config = train_configs(spec, tmp_path / "study")["vpo-t0"]
    out = Path(config.out)
    assert training_status(config) == TrainingRunStatus("to do", 0, 4)
    (out / STATE_FILE).parent.mkdir(parents=True)
    (out / STATE_FILE).write_bytes(b"")  # what a run killed after step 2 leaves: its state and 2 log lines
    (out / "train_log.jsonl").write_text('{"step": 1}\n{"step": 2}\n')
    with pytest.raises(StudyError, match=f"holds a partial training but not its {TRAIN_CONFIG_FILE}"):
        training_status(config)  # a state whose settings were lost is refused, not resumed blind
    (out / TRAIN_CONFIG_FILE).write_text(config.model_copy(update={"threads": 7}).model_dump_json())
    assert training_status(config) == TrainingRunStatus("partial", 2, 4)
    refuse_changed_training(config)  # threads may change between pieces
    (out / TRAIN_CONFIG_FILE).write_text(config.model_copy(update={"lr": 0.5}).model_dump_json())
    with pytest.raises(StudyError, match=r"other settings \(lr 0.5 -> 0.0001\); restore the study file"):
        training_status(config)
    (out / "final").mkdir()  # finished: a changed study file is refused too, not served the old checkpoint
    (out / "final" / "evolve_training.json").write_text('{"problems": ["fizzbuzz"], "algo": "vpo", "steps": 4}')
    with pytest.raises(StudyError, match="other settings"):
        training_status(config)
    (out / TRAIN_CONFIG_FILE).write_text(config.model_dump_json())
    assert training_status(config) == TrainingRunStatus("done", 4, 4)


def test_an_interim_report_never_passes_for_the_report_stage_done(tmp_path: Path) -> None:
    from evolve.study.pipeline import _final_report

    report = tmp_path / "study_report.json"
    assert not _final_report(report)  # none yet
    report.write_text(json.dumps({"study": "s", "interim": {"seeds": [0], "cells_counted": 90, "cells": 450}}))
    assert not _final_report(report)  # --report-so-far wrote it: the report stage still has its turn
    report.write_text(json.dumps({"study": "s", "interim": None}))
    assert _final_report(report)
    report.write_text("{")
    assert not _final_report(report)


def test_status_says_which_evolution_seeds_every_arm_has_finished_and_which_batch_is_under_way(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from evolve.cli.main import main

    path, folder, _ = started_study(tmp_path, cells=8)  # seed 0 of all 7 arms, then the base's seed 1, under way
    assert main(["study", str(path), "--out", str(folder), "--status"]) == 0
    assert ("3. evolve  partial  7/14 cells finished (8 started); every arm has finished seed 0 (1 of 2 seeds); "
            "under way: base seed 1 (0/1 cells)" in capsys.readouterr().out)


def test_a_study_in_pieces_keeps_each_pieces_cells_in_its_own_store_and_its_status_counts_them_all(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from evolve.cli.main import main
    from evolve.store.program_store import ProgramStore

    path, folder, _ = started_study(tmp_path, cells=16, test_problems=("run_length", "lis"), pieces=2)
    assert main(["study", str(path), "--out", str(folder), "--status"]) == 0
    out = capsys.readouterr().out
    assert "evolution in 2 pieces" in out
    assert ("3. evolve  partial  14/28 cells finished (16 started); every arm has finished pieces 1 and 2 (seed 0): "
            "2 of 4 (piece, seed) parts") in out
    for piece, problem in (("01", "run_length"), ("02", "lis")):
        store = ProgramStore(str(folder / f"evolution_{piece}.db"), mode="read")
        assert {cell.problem for cell in store.experiment_cells("tiny")} == {problem}
        store.close()
    assert main(["study", str(path), "--out", str(folder), "--redo", "1", "--reason", "x"]) != 0
    assert "say whose with --piece K" in capsys.readouterr().out  # run id 1 is in both pieces' stores
    second = ProgramStore(str(folder / "evolution_02.db"), mode="read")
    lis_base = next(c.run_id for c in second.experiment_cells("tiny") if c.policy == "base" and c.seed == 0)
    second.close()
    assert main(["study", str(path), "--out", str(folder), "--redo", str(lis_base), "--piece", "2", "--reason",
                 "a defect"]) == 0
    for piece, cells in (("01", 8), ("02", 7)):  # 8 cells made in each (7 arms' seed 0, the base's seed 1)
        store = ProgramStore(str(folder / f"evolution_{piece}.db"), mode="read")
        assert len(store.experiment_cells("tiny")) == cells, piece  # only piece 2's cell left the study
        store.close()
    redone = json.loads((folder / "study_state.json").read_text())["redone"]
    assert [(r["run_id"], r["problem"], r["piece"]) for r in redone] == [(lis_base, "lis", 2)]


def test_evolution_time_left_reckons_each_cell_at_its_arms_machine_time_on_its_problem_less_what_it_has_had(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from store_backends import execute

    from evolve.cli.main import main
    from evolve.store.program_store import ProgramStore

    path, folder, run_ids = started_study(tmp_path, cells=28, test_problems=("run_length", "lis"))
    db = str(folder / "study.db")
    store = ProgramStore(db)

    def generated(run_id: int, start: float, seconds: float) -> None:
        """A policy request of the run in flight from `start` (POSIX seconds) for `seconds`."""
        attempt = store.record_attempt(run_id, 0, "policy_call", latency_s=seconds)
        end = datetime.fromtimestamp(start + seconds, UTC).strftime("%Y-%m-%d %H:%M:%S.%f")
        execute(db, "UPDATE attempts SET created_at = :end WHERE id = :id", end=end, id=attempt)

    # machine seconds of seed 0 (finished, one cell at a time), per policy and problem; an algorithm's two
    # checkpoints are one arm
    ran = {"base": (100, 300), "vpo-t0": (400, 800), "vpo-t1": (600, 1200)}
    clock = 1.7e9
    for run_id in run_ids:
        run = store.get_run(run_id)
        if run.seed == 0:
            generated(run_id, clock, ran.get(run.policy, (10, 20))[("run_length", "lis").index(run.problem)])
            clock += 10_000
    # seed 1: base on run_length has had 30 s of the machine and vpo-t0 on it 840 s: 60 s side by side, each
    # credited half, then vpo-t0 alone
    seed_1 = {(run.policy, run.problem): run.id for run in map(store.get_run, run_ids) if run.seed == 1}
    generated(seed_1["base", "run_length"], clock, 60)
    generated(seed_1["vpo-t0", "run_length"], clock, 870)
    # left: base 100 - 30 + 300; vpo-t0 0 (past its arm's 500) + 1000; vpo-t1 500 + 1000; grpo and multi-rlvr
    # (10 + 20) each x 2 checkpoints
    assert main(["study", str(path), "--out", str(folder), "--status"]) == 0
    assert ("about 50 min left at each arm's machine time per cell and problem"  # 2,990 s
            in capsys.readouterr().out)
    from evolve.study.evolution_stage import evolution_seconds_left
    from evolve.study.plan import StudyPaths, experiment_spec

    spec = load_study(path)
    experiment = experiment_spec(spec, StudyPaths.of(spec, folder))
    statuses = {(r.problem, r.policy, r.seed): r.status for r in map(store.get_run, run_ids)}
    assert evolution_seconds_left(spec, experiment, [store], statuses) == pytest.approx(2990.0)
    unrun = {key: status for key, status in statuses.items() if key[1] != "grpo-t0" or key[2] != 0}
    assert evolution_seconds_left(spec, experiment, [store], unrun) == pytest.approx(2990.0 + 10 + 20)  # grpo-t1's pace
    unrun = {key: status for key, status in statuses.items() if not key[1].startswith("grpo") or key[2] != 0}
    assert evolution_seconds_left(spec, experiment, [store], unrun) is None  # no grpo cell finished: no pace yet


def test_machine_shares_split_each_stretch_among_the_runs_generating_in_it() -> None:
    from evolve.study.evolution_stage import machine_shares

    shares = machine_shares({1: [(0.0, 100.0)], 2: [(50.0, 150.0)],  # side by side from 50 to 100
                             3: [(200.0, 210.0), (205.0, 215.0)],  # its own requests overlap: counted once
                             4: [(300.0, 300.0)], 5: []})
    assert shares == pytest.approx({1: 75.0, 2: 75.0, 3: 15.0, 4: 0.0, 5: 0.0})
    assert sum(shares.values()) == pytest.approx(165.0)  # the time in which any run was generating


def test_redone_cells_leave_the_study_keep_their_runs_and_are_named_with_their_reason(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from evolve.cli.main import main
    from evolve.engine.experiment import ExperimentRunner
    from evolve.report.study_markdown import results_markdown
    from evolve.store.program_store import ProgramStore
    from evolve.study.plan import StudyPaths, experiment_spec
    from evolve.study.report_stage import redone_cells
    from evolve.study.state import StudyState

    path, folder, run_ids = started_study(tmp_path)
    redo = run_ids[1]
    assert main(["study", str(path), "--out", str(folder), "--redo", str(redo), "--reason", "refused requests"]) == 0
    assert "1 cell to run again" in capsys.readouterr().out
    assert main(["study", str(path), "--out", str(folder), "--status"]) == 0
    assert "3. evolve  partial  6/14 cells finished (6 started); no seed finished by every arm yet" in \
        capsys.readouterr().out
    spec = load_study(path)
    experiment = experiment_spec(spec, StudyPaths.of(spec, folder))
    store = ProgramStore(experiment.db)
    kept = store.get_run(redo)
    assert kept.status == "finished" and kept.name.endswith("~redone-1")  # the first run stays, renamed
    runner = ExperimentRunner(experiment)
    runner.load_stored_cells()
    again = [cell for cell in runner.cells.values() if cell.key[2] == 0 and cell.run_id is None]
    assert [(cell.key, cell.status) for cell in again] == [((kept.problem, kept.policy, 0), "waiting")]
    records = redone_cells(StudyPaths.of(spec, folder))
    assert [(r["run_id"], r["policy"], r["status"], r["reason"]) for r in records] == [
        (redo, kept.policy, "finished", "refused requests")]
    assert f"1 evolution cell run again ({kept.policy} seed 0; the first runs kept in the store as NAME~redone-K): " \
        "refused requests" in results_markdown({"redone": records})
    StudyState(StudyPaths.of(spec, folder)).save()  # a study run later keeps the record in its state file
    assert redone_cells(StudyPaths.of(spec, folder)) == records


@pytest.mark.parametrize(("arguments", "refusal"), [
    (["--redo", "999", "--reason", "x"], "run 999: not a cell of study tiny's evolution"),
    (["--redo", "FIRST"], "say why the cells are redone (--reason)"),
    (["--redo", "FIRST", "--reason", "x"], "stop it before redoing cells")])
def test_redo_is_refused_in_one_line_for_another_run_without_a_reason_or_while_the_study_runs(
        tmp_path: Path, capsys: pytest.CaptureFixture[str], arguments: list[str], refusal: str) -> None:
    from evolve.cli.main import main
    from evolve.store.program_store import ProgramStore
    from evolve.study.state import this_process

    path, folder, run_ids = started_study(tmp_path)
    arguments = [str(run_ids[0]) if a == "FIRST" else a for a in arguments]
    if arguments[-1] == "x" and arguments[1] != "999":  # the study runs: this (live) process holds its state file
        (folder / "study_state.json").write_text(json.dumps(
            {"db": str(folder / "study.db"), "seconds": {}, "running": {"owner": this_process(), "since": {}}}))
    assert main(["study", str(path), "--out", str(folder), *arguments]) == 1
    error = capsys.readouterr().out
    assert len(error.strip().splitlines()) == 1 and error.startswith("error: ")
    assert refusal in error
    assert len(ProgramStore(str(folder / "study.db")).experiment_cells("tiny")) == 7  # nothing was taken out


def test_the_report_of_a_study_names_its_redone_cells_with_their_reason(tmp_path: Path) -> None:
    from rich.console import Console

    from evolve.cli.main import main
    from evolve.study.pipeline import Study
    from evolve.study.plan import StudyPaths
    from evolve.study.report_stage import write_study_report

    path, folder, run_ids = started_study(tmp_path)
    assert main(["study", str(path), "--out", str(folder), "--redo", str(run_ids[1]), "--reason", "slot too small"]) == 0
    spec = load_study(path)
    study = Study(spec, StudyPaths.of(spec, folder), Console(), source=str(path), read_only=True)
    written = write_study_report(spec, study.paths, study.store, study.train_configs, {}, Console(quiet=True),
                                 interim=True)
    assert [(r["run_id"], r["reason"]) for r in json.loads(written.read_text())["redone"]] == [
        (run_ids[1], "slot too small")]
    line = "1 evolution cell run again (vpo-t0 seed 0; the first runs kept in the store as NAME~redone-K): slot too small"
    assert line in (study.paths.report / "report.html").read_text()
    assert line in (study.paths.report / "results.md").read_text()


def test_the_report_of_a_study_in_pieces_reads_every_pieces_cells(tmp_path: Path) -> None:
    from rich.console import Console

    from evolve.study.pipeline import Study
    from evolve.study.plan import StudyPaths
    from evolve.study.report_stage import write_study_report

    path, folder, _ = started_study(tmp_path, cells=28, test_problems=("run_length", "lis"), pieces=2)
    spec = load_study(path)
    study = Study(spec, StudyPaths.of(spec, folder), Console(), source=str(path), read_only=True)
    written = write_study_report(spec, study.paths, study.store, study.train_configs, {}, Console(quiet=True),
                                 interim=True)
    report = json.loads(written.read_text())
    assert report["interim"] is not None
    cells = [row for row in csv.DictReader((study.paths.report / "cells.csv").open())]
    assert {(row["problem"], row["status"]) for row in cells if row["seed"] == "0"} == {
        ("run_length", "finished"), ("lis", "finished")}
