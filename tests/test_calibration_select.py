"""scripts/study/calibration_select.py: the pre-registered selection of docs/study_cpu.md, applied to real stores' rows."""

from __future__ import annotations

from pathlib import Path
from types import ModuleType

import pytest

from tests.script_modules import SCRIPTS, load_script


@pytest.fixture(scope="module")
def select() -> ModuleType:
    return load_script("calibration_select")


def test_the_screen_leaves_out_easy_and_floor_tasks_and_orders_the_rest_by_promise(select: ModuleType) -> None:
    sample = select.TaskSample
    groups = select.screen([sample("he_001", 20, 3, 1.0, True), sample("he_002", 20, 0, 0.0, True),
                            sample("he_003", 20, 0, 0.6, True), sample("he_004", 20, 1, 1.0, True),
                            sample("he_005", 20, 2, 1.0, True), sample("he_006", 7, 0, 0.9, False)])
    assert [task.problem for task in groups["too_easy"]] == ["he_001"]
    assert [task.problem for task in groups["floor"]] == ["he_002"]
    assert [task.problem for task in groups["candidates"]] == ["he_005", "he_004", "he_003"]
    assert [task.problem for task in groups["pending"]] == ["he_006"]


def test_a_task_is_in_band_when_one_cell_cracks_a_late_crack_or_a_near_miss(select: ModuleType) -> None:
    def cells(*outcomes: tuple[int | None, float]) -> list[object]:
        return [select.PilotCell("he_010", seed, True, crack, best) for seed, (crack, best) in enumerate(outcomes)]

    assert select.in_band(cells((12, 1.0), (None, 0.5))) is True  # one of two cracked
    assert select.in_band(cells((40, 1.0), (50, 1.0))) is True  # both, late
    assert select.in_band(cells((3, 1.0), (9, 1.0))) is False  # both, early: too easy within the budget
    assert select.in_band(cells((None, 0.85), (None, 0.9))) is True  # neither, both near misses
    assert select.in_band(cells((None, 0.85), (None, 0.3))) is False
    assert select.in_band([select.PilotCell("he_010", 0, False, None, 0.0)] * 2) is None  # not finished


def pilot_cells(select: ModuleType, in_band: int) -> list[object]:
    cell = select.PilotCell
    cells = []
    for number in range(in_band):  # in band: one cell of two cracked
        task = f"humaneval/he_{number:03d}"
        cells += [cell(task, 0, True, 5, 1.0), cell(task, 1, True, None, 0.4)]
    for number, crack in ((100, 20), (101, 28), (102, 2)):  # cracked twice, early: out of band
        cells += [cell(f"humaneval/he_{number}", seed, True, crack, 1.0) for seed in (0, 1)]
    return cells


def test_with_enough_tasks_in_band_every_second_one_is_a_test_problem(select: ModuleType) -> None:
    test, train, pending = select.split_lists(pilot_cells(select, 70))
    assert pending == [] and len(test) == 30 and test[:3] == ["humaneval/he_000", "humaneval/he_002", "humaneval/he_004"]
    assert len(train) == 40 and not set(test) & set(train) and "humaneval/he_100" not in train


def test_with_too_few_in_band_the_test_list_keeps_30_and_the_train_list_takes_the_nearest(select: ModuleType) -> None:
    test, train, _ = select.split_lists(pilot_cells(select, 40))
    assert len(test) == 30 and not set(test) & set(train)
    assert len(train) == 13 and train[-3:] == ["humaneval/he_101", "humaneval/he_100", "humaneval/he_102"]


def test_far_too_few_in_band_fill_the_test_list_then_the_train_list_from_both_sides_of_the_band_nearest_first(
        select: ModuleType) -> None:
    cell = select.PilotCell
    cells = pilot_cells(select, 24)  # and he_101 (cracked at 28 twice), he_100 (20), he_102 (2): the ceiling side
    for number, best in ((110, (0.7, 0.75)), (111, (0.5, 0.79)), (112, (0.2, 0.9)), (113, (0.0, 0.1))):
        cells += [cell(f"humaneval/he_{number}", seed, True, None, score) for seed, score in enumerate(best)]
    test, train, pending = select.split_lists(cells)
    assert pending == [] and len(test) == 30 and not set(test) & set(train)
    assert set(test) - {f"humaneval/he_{n:03d}" for n in range(24)} == {  # the 6 nearest, sides in turn
        "humaneval/he_101", "humaneval/he_110", "humaneval/he_100", "humaneval/he_111", "humaneval/he_102",
        "humaneval/he_112"}
    assert test == sorted(test, key=select.task_number)
    assert train == ["humaneval/he_113"]  # what is left of the nearest; the plan's 20 are not there: README says so
    rows = {row.split("\t")[0]: row.split("\t")[1:] for row in select.selection_table(cells, test, train).splitlines()}
    assert rows["humaneval/he_000"] == ["0: 5, 1.000, 1: -, 0.400", "in band", "test"]
    assert rows["humaneval/he_101"] == ["0: 28, 1.000, 1: 28, 1.000", "ceiling", "test (nearest)"]
    assert rows["humaneval/he_113"] == ["0: -, 0.000, 1: -, 0.100", "floor", "train (nearest)"]
    assert list(rows)[1:4] == ["humaneval/he_000", "humaneval/he_001", "humaneval/he_002"]  # by task number


def test_the_power_of_the_selected_sizes_draws_each_test_task_from_its_side_of_the_band(select: ModuleType,
                                                                                       tmp_path: Path) -> None:
    import numpy as np

    power = load_script("study_power")
    cell = select.PilotCell
    cells = pilot_cells(select, 24)
    cells += [cell("humaneval/he_112", seed, True, None, score) for seed, score in enumerate((0.2, 0.9))]
    test, train, _ = select.split_lists(cells)
    selection = tmp_path / "selection.tsv"
    selection.write_text(select.selection_table(cells, test, train))
    sides = power.test_list_sides(selection)
    assert len(test) == len(sides) == 28  # every task of this pilot: 24 in band, 3 ceiling, he_112 floor
    assert (sides.count("in band"), sides.count("ceiling"), sides.count("floor")) == (24, 3, 1)
    rates = power.draw_base(np.random.default_rng(0), sides)
    for side, rate in zip(sides, rates, strict=True):
        low, high = power.SIDES[side]
        assert low <= rate <= high, (side, rate)
    shares = power.simulate(np.random.default_rng(1), sides, 5, "split", 0.2, 0.1, 0.0)
    assert all(len(share) == 28 for share in shares.values())


def test_the_study_file_written_from_the_template_is_a_valid_study_with_the_lists(select: ModuleType,
                                                                                  tmp_path: Path) -> None:
    from evolve.study.plan import load_study

    test, train, _ = select.split_lists(pilot_cells(select, 70))
    programs = tmp_path / "programs" / "humaneval"
    for task in test + train:  # problem folders the study's checks look up (each a copy of a shipped one)
        (programs / task.removeprefix("humaneval/")).mkdir(parents=True)
    out = tmp_path / "study_cpu.toml"
    select.write_study(SCRIPTS.parent / "experiments/calibration/study_cpu.template.toml", out, test, train)
    text = out.read_text()
    assert "TEST_PROBLEMS" not in text and "TRAIN_PROBLEMS" not in text and "Written from" in text
    spec = load_study(out)
    assert spec.test_problems == tuple(f"programs/{task}" for task in test)
    assert spec.training.problems == tuple(f"programs/{task}" for task in train)
    assert (spec.evolution.iterations, len(spec.evolution.seeds), spec.evolution.answers_per_iteration) == (100, 5, 3)
    assert spec.training.algorithms == ("vpo", "grpo") and spec.training.seeds == (0, 1) and spec.claim == "methods"
    assert spec.policy["weights"] == "q8_0" and spec.evolution.run.stop_when_solved


def test_the_pilot_is_read_from_a_real_store_with_its_problems_named_once_under_programs(select: ModuleType,
                                                                                         tmp_path: Path) -> None:
    from evolve.store.program_store import ProgramStore

    db = tmp_path / "pilot.db"
    store = ProgramStore(str(db))
    store.save_experiment("pilot", "{}")
    for seed, crack_at in ((100, 4), (101, None)):  # the experiment names its problems as its file does
        run = store.create_run(f"cell-{seed}", "programs/humaneval/he_007", "base", seed, "{}", 10, "pilot")
        for iteration in range(6):
            solved = iteration == crack_at
            store.add_program(run, "pass", None, 0, iteration, "base", "", {"t": float(solved)}, 0.5 + solved / 2,
                              solved)
        store.set_run_status(run, "finished")
    store.close()
    cells = select.read_pilot(db)
    assert [(cell.problem, cell.seed, cell.finished, cell.first_crack, cell.best) for cell in cells] == [
        ("humaneval/he_007", 100, True, 4, 1.0), ("humaneval/he_007", 101, True, None, 0.5)]
    test, _, _ = select.split_lists(cells)
    out = tmp_path / "study_cpu.toml"
    select.write_study(SCRIPTS.parent / "experiments/calibration/study_cpu.template.toml", out, test, [])
    assert '"programs/humaneval/he_007"' in out.read_text()


def test_the_band_is_a_parameter_judging_the_crack_share_of_tasks_cracked_in_some_cells(select: ModuleType) -> None:
    def cells(*cracks: int | None) -> list[object]:
        return [select.PilotCell("gl_d2e_0001", seed, True, crack, 1.0 if crack else 0.5)
                for seed, crack in enumerate(cracks)]

    wide = select.Band(0.1, 0.9)
    assert select.in_band(cells(5, 9, 40, None)) is False and select.in_band(cells(5, 9, 40, None), wide) is True
    assert select.in_band(cells(5, None, None, None), wide) is True  # 0.25
    assert select.in_band(cells(5, None)) is select.in_band(cells(5, None), wide) is True  # two cells: one crack
    assert select.in_band(cells(20, 20), select.Band(late_crack=10)) is True  # the stand-ins are parameters too
    assert select.HUMANEVAL_BAND == select.Band(0.1, 0.7, select.LATE_CRACK, select.NEAR_MISS)


def generated_pilot(select: ModuleType, in_band: int) -> list[object]:
    """Two cells per task, one cracked, at an iteration that makes the task easier as its number falls, then three
    tasks out of band (cracked early in both cells, nowhere near in both)."""
    cell = select.PilotCell
    cells = []
    for number in range(1, in_band + 1):
        task = f"generated/gl_d2e_{number:04d}"
        cells += [cell(task, 100, True, number % 97 + 1, 1.0), cell(task, 101, True, None, 0.5)]
    for number, crack, best in ((901, 2, 1.0), (902, None, 0.1), (903, 3, 1.0)):
        cells += [cell(f"generated/gl_d2_{number}", seed, True, crack, best) for seed in (100, 101)]
    return cells


def test_issue_60s_train_list_takes_its_50_from_both_sides_of_the_bands_median_in_turn_and_the_test_list_the_rest(
        select: ModuleType) -> None:
    cells = generated_pilot(select, 170)
    test, train, pending = select.split_lists(cells, select.Band(0.1, 0.9), 100, 50, train_spans_band=True)
    # the registered plan: "the train list (50) ..., the test list (100) the rest": an overshoot goes to the test list
    assert pending == [] and len(test) == 120 and len(train) == 50 and not set(test) & set(train)
    by_task: dict[str, list[object]] = {}
    for cell in cells:
        by_task.setdefault(cell.problem, []).append(cell)
    ordered = sorted(set(test) | set(train), key=lambda task: select.ease(by_task[task]))
    harder, easier = set(ordered[:85]), set(ordered[85:])
    assert train[0] in harder and train[1] in easier  # in turn, from below and above the median
    assert len(set(train) & harder) == len(set(train) & easier) == 25
    crack = [by_task[task][0].first_crack for task in train]
    assert min(crack) < 20 and max(crack) > 80  # the train list spans the band, not one end of it
    assert select.split_lists(cells, select.Band(0.1, 0.9), 100, 50)[1] != train  # the option changes the rule


def test_with_too_few_in_band_issue_60s_rule_fills_the_test_list_first_then_the_train_list_from_the_nearest(
        select: ModuleType) -> None:
    test, train, _ = select.split_lists(generated_pilot(select, 101), select.Band(0.1, 0.9), 100, 50,
                                        train_spans_band=True)
    assert len(test) == 100 and not set(test) & set(train)
    assert train[1:] == ["generated/gl_d2_903", "generated/gl_d2_902", "generated/gl_d2_901"]
    test, train, _ = select.split_lists(generated_pilot(select, 200), select.Band(0.1, 0.9), 100, 50,
                                        train_spans_band=True)
    assert len(test) == 150 and len(train) == 50  # the plan's first change: 200 in band hold a test list of 150


def test_the_pilot_only_selection_of_a_generated_pool_writes_the_lists_and_no_study(
        select: ModuleType, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from evolve.store.program_store import ProgramStore

    db = tmp_path / "pilot.db"
    store = ProgramStore(str(db))
    store.save_experiment("pilot", "{}")
    for number, cracks in ((1, (4, None)), (2, (60, None)), (3, (2, 3))):
        for seed, crack_at in zip((100, 101), cracks, strict=True):
            run = store.create_run(f"cell-{number}-{seed}", f"programs/generated/gl_d2e_{number:04d}", "base", seed,
                                   "{}", 100, "pilot")
            for iteration in range(1, 5 if crack_at is None else crack_at + 1):
                solved = iteration == crack_at
                store.add_program(run, "pass", None, 0, iteration, "base", "", {"t": float(solved)},
                                  0.5 + solved / 2, solved)
            store.set_run_status(run, "finished")
    store.close()
    out = tmp_path / "lists" / "candidates.txt"  # its folder is made
    monkeypatch.setattr("sys.argv", ["calibration_select.py", "--pilot-only", "--pilot", str(db), "--out", str(out),
                                     "--band", "0.1", "0.9", "--test-size", "1", "--train-size", "1",
                                     "--train-spans-band", "--no-study", "--study", str(tmp_path / "study.toml")])
    select.main()
    assert (out.parent / "test_problems.txt").read_text() == "programs/generated/gl_d2e_0001\n"
    assert (out.parent / "train_problems.txt").read_text() == "programs/generated/gl_d2e_0002\n"  # the harder
    assert "ceiling" in (out.parent / "selection.tsv").read_text() and not (tmp_path / "study.toml").exists()
    assert not out.exists()  # no screen: no candidates written


def pilot_store(db: Path, cells: dict[tuple[str, int], int | None | str]) -> Path:
    """A real store holding one pilot cell per (problem, seed): cracked at that iteration, not cracked (None) or still
    running ("running")."""
    from evolve.store.program_store import ProgramStore

    store = ProgramStore(str(db))
    store.save_experiment("piece", "{}")
    for (problem, seed), crack_at in cells.items():
        run = store.create_run(f"{problem}-{seed}", f"programs/generated/{problem}", "base", seed, "{}", 100, "piece")
        last = 4 if not isinstance(crack_at, int) else crack_at
        for iteration in range(1, last + 1):
            solved = iteration == crack_at
            store.add_program(run, "pass", None, 0, iteration, "base", "", {"t": float(solved)}, 0.5 + solved / 2,
                              solved)
        if crack_at != "running":
            store.set_run_status(run, "finished")
    store.close()
    return db


def test_the_rule_reads_the_stores_of_several_pieces_and_with_allow_pending_judges_the_finished_tasks(
        select: ModuleType, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    first = pilot_store(tmp_path / "piece_01.db", {("gl_d1_0001", 100): 5, ("gl_d1_0001", 101): None,
                                                    ("gl_d1_0002", 100): 2, ("gl_d1_0002", 101): 3})
    second = pilot_store(tmp_path / "piece_02.db", {("gl_d2ee_0001", 100): None, ("gl_d2ee_0001", 101): 70,
                                                     ("gl_d2ee_0002", 100): 9, ("gl_d2ee_0002", 101): "running"})
    out = tmp_path / "candidates.txt"
    argv = ["calibration_select.py", "--pilot-only", "--pilot", str(first), str(second), "--out", str(out),
            "--band", "0.1", "0.9", "--test-size", "1", "--train-size", "1", "--train-spans-band", "--no-study"]
    monkeypatch.setattr("sys.argv", argv)
    with pytest.raises(SystemExit, match="not finished"):
        select.main()
    monkeypatch.setattr("sys.argv", [*argv, "--allow-pending"])
    select.main()
    table = (tmp_path / "selection.tsv").read_text()
    assert "generated/gl_d2ee_0002\t100: 9, 1.000, 101: -, 0.500\tpending" in table  # its second cell runs
    assert "generated/gl_d1_0002\t100: 2, 1.000, 101: 3, 1.000\tceiling" in table
    listed = (tmp_path / "test_problems.txt").read_text() + (tmp_path / "train_problems.txt").read_text()
    assert sorted(listed.split()) == ["programs/generated/gl_d1_0001", "programs/generated/gl_d2ee_0001"]


def test_the_second_studys_draft_template_fills_into_a_valid_study_with_its_design(select: ModuleType,
                                                                                   tmp_path: Path) -> None:
    from evolve.study.plan import load_study

    test = [f"generated/gl_d2ee_{i:04d}" for i in range(1, 151)]
    train = [f"generated/gl_d1_{i:04d}" for i in range(1, 51)]
    out = tmp_path / "study_second.toml"
    template = SCRIPTS.parent / "experiments/generated/study_second.template.toml"
    select.write_study(template, out, test, train)
    assert "Written from " + template.as_posix() in out.read_text()
    spec = load_study(out)
    assert len(spec.test_problems) == 150 and len(spec.training.problems) == 50
    assert spec.comparisons[0] == ("vpo", "grpo") and len(spec.comparisons) == 5  # the primary first, a family of 5
    assert {name for pair in spec.comparisons for name in pair} == set(spec.arms())
    assert spec.training.algorithms == ("vpo", "grpo", "multi-rlvr") and spec.training.seeds == (0, 1)
    assert spec.evolution.sampling_arm and spec.evolution.pieces == 10 and spec.evolution.checkpoint_seeds == "split"
    assert (spec.evolution.iterations, spec.evolution.answers_per_iteration) == (100, 3)
    assert spec.policy["weights"] == "q8_0" and spec.evolution.run.stop_when_solved
