"""An experiment in pieces: the problems cut into consecutive groups, each with its own store, and a report over the
pieces that equals the report of one store holding the same cells."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest

from evolve.config import ConfigError
from evolve.engine.experiment import ExperimentRunner
from evolve.engine.experiment_pieces import (
    piece_db,
    piece_problems,
    piece_stores,
    piece_view,
    stored_design,
)
from evolve.engine.experiment_spec import ExperimentSpec, load_experiment
from evolve.problems.check import new_problem
from evolve.report.results import ExperimentResults, collect
from evolve.store.program_store import ProgramStore
from tests.test_experiment import SEED_ROUNDS
from tests.test_results import ITERATIONS, SCRIPTS, SEEDS, _write_cell

POLICIES = [{"name": "A", "answers": 3, "max_new_tokens": 64}, {"name": "B"}]


def _spec(tmp_path: Path, **keys: object) -> ExperimentSpec:
    data = {"name": "ab", "db": str(tmp_path / "ab.db"), "problems": ["alpha", "beta", "gone"],
            "seeds": list(SEEDS), "iterations": ITERATIONS, "run": {"programs_dir": str(tmp_path / "programs")},
            "policies": POLICIES}
    return ExperimentSpec.model_validate({**data, **keys})


def test_pieces_are_consecutive_groups_of_the_problems_differing_in_size_by_one_at_most(tmp_path: Path) -> None:
    problems = [f"p{i:02d}" for i in range(11)]
    spec = _spec(tmp_path, problems=problems, pieces=4, db=str(tmp_path / "x_{piece}.db"))
    groups = [piece_problems(spec, piece) for piece in range(1, 5)]
    assert [len(group) for group in groups] == [3, 3, 3, 2]
    assert [problem for group in groups for problem in group] == problems
    assert piece_db(spec, 3) == str(tmp_path / "x_03.db")
    view = piece_view(spec, 2)
    assert (view.problems, view.db, view.pieces) == (tuple(problems[3:6]), str(tmp_path / "x_02.db"), 1)
    every_cell = [key for piece in range(1, 5) for key in piece_view(spec, piece).cells()]
    assert sorted(every_cell) == sorted(spec.cells())
    with pytest.raises(ConfigError, match="no piece 5; it has pieces 1-4"):
        piece_view(spec, 5)


@pytest.mark.parametrize(("keys", "fragment"), [
    ({"pieces": 4}, "more pieces than problems (3)"),
    ({"pieces": 2}, "needs db to be a SQLite file whose name holds {piece}"),
    ({"pieces": 2, "db": "postgresql://127.0.0.1/x_{piece}"}, "needs db to be a SQLite file"),
    ({"db": "ab_{piece}.db"}, "which only an experiment of several pieces has"),
])
def test_a_store_that_cannot_hold_the_pieces_is_refused_in_one_line(tmp_path: Path, keys: dict[str, object],
                                                                   fragment: str) -> None:
    with pytest.raises(ValueError, match=fragment.replace("(", r"\(").replace(")", r"\)")):
        _spec(tmp_path, **keys)


def test_the_default_store_of_an_experiment_in_pieces_names_each_piece(tmp_path: Path) -> None:
    path = tmp_path / "big.toml"
    path.write_text('problems = ["a", "b"]\npieces = 2\niterations = 1\n[[policies]]\nname = "p"\n')
    spec = load_experiment(path)
    assert spec.db == str(tmp_path / "big_{piece}.db") and piece_db(spec, 1) == str(tmp_path / "big_01.db")


def test_the_runner_refuses_a_whole_experiment_of_several_pieces(tmp_path: Path) -> None:
    spec = _spec(tmp_path, pieces=2, db=str(tmp_path / "ab_{piece}.db"))
    with pytest.raises(ConfigError, match="has 2 pieces: run them with run_pieces"):
        ExperimentRunner(spec)


@pytest.fixture(scope="module")
def whole_and_pieces(tmp_path_factory: pytest.TempPathFactory) -> tuple[ExperimentResults, ExperimentSpec, Path]:
    """test_results' cells written once into one store, once into the two pieces' stores."""
    root = tmp_path_factory.mktemp("pieces")
    for name in ("alpha", "beta"):
        new_problem(name, root / "programs")
    whole = _spec(root)
    pieced = _spec(root, pieces=2, db=str(root / "ab_{piece}.db"))
    store = ProgramStore(whole.db)
    store.save_experiment(whole.name, whole.model_dump_json())
    for key, script in SCRIPTS.items():
        _write_cell(store, whole, key, script)
    results = collect(store, whole)
    store.close()
    for piece in (1, 2):
        view = piece_view(pieced, piece)
        piece_store = ProgramStore(view.db)
        piece_store.save_experiment(pieced.name, pieced.model_dump_json())
        for key, script in SCRIPTS.items():
            if key[0] in view.problems:
                _write_cell(piece_store, view, key, script)
        piece_store.close()
    return results, pieced, root


def _numbers(results: ExperimentResults) -> tuple[object, ...]:
    cells = tuple(dataclasses.replace(cell, run_id=None) for cell in results.cells)  # run ids differ by store
    return cells, results.table, results.curves, results.differences, results.budgets, results.objectives


def test_a_report_over_the_pieces_equals_the_report_of_one_store_with_the_same_cells(
        whole_and_pieces: tuple[ExperimentResults, ExperimentSpec, Path]) -> None:
    whole, pieced, root = whole_and_pieces
    stores = piece_stores(pieced)
    assert [store.url.rsplit("/", 1)[-1] for store in stores] == ["ab_01.db", "ab_02.db"]
    assert stored_design(pieced) == pieced.model_dump_json()
    over_pieces = collect(stores, pieced)
    # a report that lists the problems in another order (another split) still finds every cell where it ran
    reordered = collect(stores, _spec(root, pieces=2, db=str(root / "ab_{piece}.db"),
                                     problems=["gone", "alpha", "beta"]))
    for store in stores:
        store.close()
    assert _numbers(over_pieces) == _numbers(whole)
    assert over_pieces.notes == whole.notes
    assert {cell.status for cell in reordered.cells} == {cell.status for cell in whole.cells} == {"finished"}
    assert reordered.row("beta", "A").cracked == whole.row("beta", "A").cracked == 2


def test_the_cells_of_a_piece_not_begun_are_not_run(
        whole_and_pieces: tuple[ExperimentResults, ExperimentSpec, Path]) -> None:
    _, pieced, root = whole_and_pieces
    second = Path(piece_db(pieced, 2))
    moved = second.rename(root / "aside.db")
    try:
        stores = piece_stores(pieced)
        assert len(stores) == 1
        results = collect(stores, pieced)
        for store in stores:
            store.close()
    finally:
        moved.rename(second)
    assert {cell.status for cell in results.cells if cell.problem == "gone"} == {"not_run"}
    assert results.row("alpha", "A").cracked == 3 and results.row("gone", "A").seeds_run == 0


PIECED = SEED_ROUNDS.replace('problems = ["number", "other_number"]',
                             'problems = ["number", "other_number", "third_number"]\npieces = 2')


def test_the_command_runs_a_piece_into_its_own_store_then_the_rest_and_reports_them_together(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from evolve.cli.main import main
    from tests.scripted_policy_server import EVALUATOR, ScriptedPolicyServer, number_problem, write_problem

    programs = tmp_path / "programs"
    number_problem(programs)
    for name in ("other_number", "third_number"):
        write_problem(programs, name, "Set x to a number too.", EVALUATOR)
    with ScriptedPolicyServer("climber") as server:
        path = tmp_path / "pieced.toml"
        path.write_text(PIECED.replace("{programs}", str(programs)).replace("{url}", server.url))
        assert main(["experiment", str(path), "--plain", "--piece", "2"]) == 0
        assert not (tmp_path / "pieced_01.db").exists()
        second = ProgramStore(str(tmp_path / "pieced_02.db"), mode="read")
        assert {(c.problem, c.seed) for c in second.experiment_cells("pieced")} == {("third_number", 0),
                                                                                   ("third_number", 1)}
        assert {c.policy for c in second.experiment_cells("pieced")} == {"a", "b"}
        second.close()
        assert main(["experiment", str(path), "--plain"]) == 0  # piece 1 runs, piece 2 is finished already
        capsys.readouterr()
        assert main(["experiment", str(path), "--plain", "--set", "iterations=3"]) == 2  # another design: refused
        assert "pieced_01.db ran with another design (ran -> now: iterations 2 -> 3)" in capsys.readouterr().out
    whole = load_experiment(path).model_dump_json()
    for piece in ("01", "02"):  # every piece's store keeps the whole design, which the report then follows
        store = ProgramStore(str(tmp_path / f"pieced_{piece}.db"), mode="read")
        assert store.experiment_spec("pieced") == whole
        store.close()
    first = ProgramStore(str(tmp_path / "pieced_01.db"), mode="read")
    assert {c.problem for c in first.experiment_cells("pieced")} == {"number", "other_number"}
    assert len(first.list_runs()) == 8
    first.close()
    second = ProgramStore(str(tmp_path / "pieced_02.db"), mode="read")
    assert len(second.list_runs()) == 4  # its finished cells were not run again
    second.close()
    assert main(["report", str(path), "--out", str(tmp_path / "report")]) == 0
    assert "warning" not in capsys.readouterr().out
    rows = (tmp_path / "report" / "table.csv").read_text().splitlines()[1:]
    assert sorted({row.split(",")[0] for row in rows}) == ["number", "other_number", "third_number"]
    assert len(rows) == 3 * 2 and all(",ok," in row for row in rows)
    assert main(["report", str(path), "--arms", "b", "--out", str(tmp_path / "b_only")]) == 0
    rows = (tmp_path / "b_only" / "table.csv").read_text().splitlines()[1:]
    assert len(rows) == 3 and {row.split(",")[1] for row in rows} == {"b"}


def test_a_broken_problem_in_a_later_piece_stops_the_command_before_the_first_piece_runs(tmp_path: Path) -> None:
    from evolve.cli.main import main
    from tests.scripted_policy_server import number_problem

    number_problem(tmp_path / "programs")
    path = tmp_path / "pieced.toml"
    path.write_text(PIECED.replace("{programs}", str(tmp_path / "programs")).replace("{url}", "http://127.0.0.1:9"))
    assert main(["experiment", str(path), "--plain"]) != 0
    assert not list(tmp_path.glob("pieced_*.db"))



def test_the_web_view_serves_each_begun_piece_of_an_experiment_in_pieces(tmp_path: Path) -> None:
    from evolve.cli.serve import experiment_stores

    (tmp_path / "big.toml").write_text('problems = ["a", "b", "c"]\npieces = 3\niterations = 1\n'
                                       '[[policies]]\nname = "p"\n')
    for piece in ("01", "03"):  # piece 2 not begun
        (tmp_path / f"big_{piece}.db").write_bytes(b"")
    assert experiment_stores(tmp_path) == (str(tmp_path / "big_01.db"), str(tmp_path / "big_03.db"))
