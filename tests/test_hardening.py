"""Hardening against hostile candidates and careless users: memory bombs through drivers, read-only commands,
damaged stores and absurd budgets each end in one clear outcome."""

from __future__ import annotations

import asyncio
import sqlite3
import time
import tracemalloc
from pathlib import Path

import pytest

from evolve.cli.main import main
from evolve.config import RunConfig, load_config
from evolve.engine.schedule import IterationSchedule
from evolve.problems.check import new_problem
from evolve.problems.evaluation import evaluate_program
from evolve.problems.problem import load_problem
from evolve.records import Evaluation
from evolve.sandbox.core import Sandbox, SandboxLimits
from evolve.store.program_store import AttemptRecord, ChildRecord, ProgramStore, RunStatus, StoreError

ROOT = Path(__file__).resolve().parents[1]
PROGRAMS = ROOT / "programs"
HOSTILE = ROOT / "tests" / "hostile"
HOARDER = """
def hoard(n):
    chunks = []
    while True:
        chunks.append(bytearray(50 * 1024 * 1024))

fizzbuzz = solve = encode = hoard
"""


def evaluate_timed(folder: Path, name: str, code: str) -> tuple[Evaluation, float]:
    problem = load_problem(name, folder)
    started = time.monotonic()
    evaluation = asyncio.run(evaluate_program(problem, code))
    return evaluation, time.monotonic() - started


# ---------------------------------------------------------------- memory bombs through drivers


@pytest.mark.parametrize("problem", ["fizzbuzz", "run_length"])
def test_a_memory_bomb_through_a_shipped_driver_is_scored_memory_not_timeout(problem: str) -> None:
    evaluation, _ = evaluate_timed(PROGRAMS, problem, HOARDER)
    # 'memory', not 'timeout': a driver that swallowed the error per input would let the bomb allocate again until
    # the wall limit, and the evaluation would be scored timeout
    assert evaluation.failure == "memory", evaluation


def test_a_memory_bomb_through_the_new_problem_scaffold_driver_is_scored_memory(tmp_path: Path) -> None:
    new_problem("stairs", tmp_path)
    evaluation, _ = evaluate_timed(tmp_path, "stairs", HOARDER)
    assert evaluation.failure == "memory", evaluation  # not timeout (see above)


def test_a_memory_bomb_through_any_driver_that_catches_exception_per_input_is_scored_memory() -> None:
    sandbox = Sandbox(SandboxLimits(wall_time_s=5.0, cpu_time_s=5.0, memory_mb=512))
    result = sandbox.run_driver(HOSTILE / "memory_bomb.py", HOSTILE / "driver_catches_exception.py", list(range(50)))
    assert result.status == "memory", result  # swallowed, each input would allocate again until the wall clock
    results = sandbox.run_driver_each(HOSTILE / "memory_bomb.py", HOSTILE / "driver_catches_exception.py",
                                      [[1, 2], [3, 4]], [4.0, 4.0])
    assert [result.status for result in results] == ["memory", "memory"], results


def test_a_driver_still_sees_the_candidates_functions_and_its_other_failures() -> None:
    program = HOSTILE / "raises.py"
    result = Sandbox().run_driver(program, HOSTILE / "driver_catches_exception.py", [1, 2])
    assert result.status == "ok" and result.value["outputs"] == ["raised ValueError"] * 2, result


def test_deeply_nested_json_on_the_result_pipe_is_the_candidates_bad_output_not_an_evaluator_error(
        tmp_path: Path) -> None:
    new_problem("stairs", tmp_path)
    evaluation, _ = evaluate_timed(tmp_path, "stairs", (HOSTILE / "deep_json.py").read_text())
    assert evaluation.failure == "bad_output", evaluation
    assert evaluation.detail


# ---------------------------------------------------------------- read-only commands never create a store


@pytest.fixture(autouse=True)
def wide_console(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("COLUMNS", "1000")  # rich wraps at 80 columns otherwise, and a line is what is checked


def one_line_error(capsys: pytest.CaptureFixture[str], code: int) -> str:
    out = capsys.readouterr()
    text = (out.out + out.err).strip()
    assert code != 0 and "Traceback" not in text and len(text.splitlines()) == 1, (code, text)
    return text


@pytest.mark.parametrize("command", [["runs"], ["show", "1"], ["show", "1", "--json"], ["lineage", "1"],
                                     ["export", "1"], ["run", "--resume", "1", "--plain"]])
def test_a_read_only_command_on_a_missing_store_says_so_and_creates_nothing(
        command: list[str], tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.chdir(tmp_path)  # no evolve.toml here: defaults, plus --db
    missing = tmp_path / "missing.db"
    text = one_line_error(capsys, main([*command, "--db", str(missing)]))
    assert f"no store at {missing}" in text
    assert list(tmp_path.iterdir()) == []


def test_report_on_a_missing_store_says_so_and_creates_nothing(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    missing = tmp_path / "missing.db"
    code = main(["report", str(ROOT / "experiments" / "default.toml"), "--db", str(missing),
                 "--out", str(tmp_path / "report")])
    assert f"no store at {missing}" in one_line_error(capsys, code)
    assert list(tmp_path.iterdir()) == []


def test_a_read_only_store_opens_an_existing_file_without_writing_its_schema(tmp_path: Path) -> None:
    db = tmp_path / "old.db"
    sqlite3.connect(db).close()  # an empty file: no tables
    store = ProgramStore(str(db), mode="read")
    with pytest.raises(StoreError, match="cannot read"):
        store.list_runs()
    with sqlite3.connect(db) as connection:
        assert connection.execute("SELECT name FROM sqlite_master").fetchall() == []


# ---------------------------------------------------------------- a damaged store is one line


def damaged_store(tmp_path: Path, config: RunConfig | None = None, status: RunStatus | None = None) -> Path:
    """A real store with a run of 300 programs (of `config`, by default the defaults), its middle pages then
    overwritten; with `status`, the run's status before the damage."""
    db = tmp_path / "damaged.db"
    store = ProgramStore(str(db))
    run = store.create_run("r", "fizzbuzz", "p", 1, (config or load_config(None, {})).model_dump_json(), 300)
    for iteration in range(300):
        child = ChildRecord(f"def fizzbuzz(n):\n    return {'x' * 300!r}  # {iteration}\n", None, 0, "p", "edit",
                            {"test_00": 0.5}, 0.5, False)
        store.record_iteration(run, iteration, [AttemptRecord("policy_call"), child], policy="p")
    if status is not None:
        store.set_run_status(run, status)
    store.close()  # the last connection checkpoints the WAL into the file
    size = db.stat().st_size
    assert size > 100_000 and not Path(f"{db}-wal").exists() or Path(f"{db}-wal").stat().st_size == 0
    with open(db, "r+b") as handle:
        handle.seek(size // 4)
        handle.write(b"\xab" * (size // 2))
    return db


@pytest.mark.parametrize("command", [["runs"], ["show", "1"]])
def test_reading_a_damaged_store_is_one_line_not_a_traceback(
        command: list[str], tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    db = damaged_store(tmp_path)
    monkeypatch.chdir(tmp_path)
    text = one_line_error(capsys, main([*command, "--db", str(db)]))
    assert "malformed" in text or "cannot read" in text, text


def small_store(tmp_path: Path, name: str = "small.db") -> Path:
    """A real store with one finished fizzbuzz run of a seed and two children, its WAL checkpointed into the file."""
    db = tmp_path / name
    store = ProgramStore(str(db))
    config = load_config(None, {"run.problem": "fizzbuzz", "run.programs_dir": str(PROGRAMS), "run.iterations": 2,
                                "policy.backend": "openai", "policy.url": "http://127.0.0.1:9/v1"})
    run = store.create_run("r", "fizzbuzz", config.policy.name, 0, config.model_dump_json(), 2)
    parent = None
    for iteration in range(3):  # scored on fizzbuzz's own objectives, so a resume of it goes on
        child = ChildRecord(f"def fizzbuzz(n):\n    return str(n)  # {iteration}\n", parent, 0, "p", "edit",
                            {f"test_{n:02d}": 0.5 for n in range(20)}, 0.5, False)
        (program,) = store.record_iteration(run, iteration, [AttemptRecord("policy_call"), child], policy="p")
        parent = program.id
    store.set_run_status(run, "finished")
    store.close()
    return db


READ_ONLY_COMMANDS = [["runs"], ["show", "1"], ["show", "1", "--json"], ["lineage", "1"], ["export", "1"]]


@pytest.mark.parametrize("kind", ["empty", "foreign", "store"])
def test_read_only_commands_never_change_a_byte_of_an_empty_a_foreign_or_a_real_sqlite_file(
        kind: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.chdir(tmp_path)
    db = tmp_path / "some.db"
    if kind == "empty":
        db.write_bytes(b"")
    elif kind == "foreign":  # another program's database, in the rollback journal mode SQLite starts in
        with sqlite3.connect(db) as connection:
            connection.execute("CREATE TABLE notes (text TEXT)")
            connection.execute("INSERT INTO notes VALUES ('mine')")
        connection.close()
    else:
        db = small_store(tmp_path)
    before = db.read_bytes()
    for command in READ_ONLY_COMMANDS:
        code = main([*command, "--db", str(db)])
        out = capsys.readouterr()
        if kind == "store":
            assert code == 0, (command, out.out[-500:])
        else:
            text = (out.out + out.err).strip()
            assert code == 1 and text == f"error: cannot read {db}: no such table: runs", (command, text)
        assert db.read_bytes() == before, command
    if kind == "foreign":
        with sqlite3.connect(db) as connection:
            assert connection.execute("PRAGMA journal_mode").fetchone() == ("delete",)
        connection.close()


@pytest.mark.parametrize(("column", "value", "says"), [
    ("created_at", "garbage", "a stored time is damaged: 'garbage' is not a time"),
    ("updated_at", "2024-13-45", "a stored time is damaged: '2024-13-45' is not a time"),
    ("iterations_target", "many", "runs.iterations_target of row 1 is damaged: 'many' is not int"),
])
@pytest.mark.parametrize("command", [*READ_ONLY_COMMANDS, ["run", "--plain", "--resume", "1"]])
def test_a_damaged_run_row_is_one_line_in_every_command_and_changes_nothing(
        column: str, value: str, says: str, command: list[str], tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
        capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.chdir(tmp_path)
    db = small_store(tmp_path)
    with sqlite3.connect(db) as connection:
        connection.execute(f"UPDATE runs SET {column} = ?", (value,))
    connection.close()
    before = db.read_bytes()
    text = one_line_error(capsys, main([*command, "--db", str(db)]))
    assert text == f"error: cannot read {db}: {says}", text
    assert db.read_bytes() == before


@pytest.mark.parametrize("command", [["show", "9223372036854775808"], ["lineage", "9223372036854775808"],
                                     ["export", "9223372036854775808"], ["lineage", "1", "99999999999999999999"],
                                     ["run", "--plain", "--resume", "9223372036854775808"]])
def test_an_id_no_64_bit_integer_holds_is_no_such_run_in_one_line(
        command: list[str], tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
        capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.chdir(tmp_path)
    db = small_store(tmp_path)
    text = one_line_error(capsys, main([*command, "--db", str(db)]))
    assert "no run 9223372036854775808" in text or "no program 1:99999999999999999999" in text, text


def test_resuming_a_damaged_store_is_one_error_line_and_leaves_the_runs_status_as_it_was(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.chdir(tmp_path)
    config = load_config(None, {"run.problem": "fizzbuzz", "run.programs_dir": str(PROGRAMS), "run.iterations": 300,
                                "policy.backend": "openai", "policy.url": "http://127.0.0.1:9/v1", "policy.name": "p"})
    db = damaged_store(tmp_path, config, "finished")
    code = main(["run", "--plain", "--resume", "1", "--db", str(db)])
    out = capsys.readouterr()
    lines = (out.out + out.err).strip().splitlines()
    assert code == 1 and "Traceback" not in out.out + out.err, lines
    errors = [line for line in lines if line.startswith("error:")]
    assert errors == lines[-1:] and "malformed" in errors[0], lines  # before it: "loading p (openai: ...) ..."
    with sqlite3.connect(db) as connection:
        assert connection.execute("SELECT status FROM runs WHERE id = 1").fetchone() == ("finished",)
    connection.close()


# ---------------------------------------------------------------- absurd budgets


@pytest.mark.parametrize("iterations", ["99999999999999999999", "20000000"])
def test_an_absurd_iteration_budget_is_one_config_line(
        iterations: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    config = tmp_path / "big.toml"
    config.write_text(f"[run]\niterations = {iterations}\ndb = \"{tmp_path / 'big.db'}\"\n")
    monkeypatch.chdir(tmp_path)
    code = main(["run", "--plain", "--config", str(config)])
    text = one_line_error(capsys, code)
    assert code == 2 and "run.iterations" in text and "10000000" in text, text
    assert not (tmp_path / "big.db").exists()


def test_the_schedule_skips_completed_iterations_in_order() -> None:
    schedule = IterationSchedule(8, {0, 2, 3, 7, 9})
    assert schedule.completed == 3
    assert list(schedule) == [1, 4, 5, 6, 8]
    assert list(schedule) == []  # drawn once, whichever worker draws it


def test_the_schedule_of_ten_million_iterations_allocates_nothing_proportional_to_the_budget() -> None:
    tracemalloc.start()
    try:
        schedule = IterationSchedule(10**7, {1, 2, 5})
        first = [next(schedule) for _ in range(3)]
        size, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert first == [3, 4, 6]
    assert peak < 10_000  # a queued budget of 10**7 ints would be hundreds of megabytes
