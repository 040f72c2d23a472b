"""A store whose schema or rows are damaged is refused in one line by every command, and nothing is made in it: a
dropped table is not created again empty (a resume then reported a solved run as not solved), a non-number where
a number belongs is one StoreError line naming its table, row and column (not a TypeError deep in the search), and
a store from before a column this version added still reads, while only a writer adds what is missing."""

from __future__ import annotations

import sqlite3
from pathlib import Path

import pytest
from sqlalchemy import create_engine, inspect, text
from test_hardening import PROGRAMS, one_line_error, small_store

from evolve.cli.main import main
from evolve.store.program_store import ProgramStore, StoreError, database_url
from evolve.store.tables import STORE_TABLES

READING = [["runs"], ["show", "1"], ["show", "1", "--json"], ["lineage", "1"], ["export", "1"]]
WRITING = [["run", "--plain", "--resume", "1"],
           ["run", "--plain", "--problem", "fizzbuzz", "--iterations", "1", "--set", f"run.programs_dir='{PROGRAMS}'",
            "--set", "policy.backend='openai'", "--set", "policy.url='http://127.0.0.1:9/v1'"]]


def tables(db: Path) -> list[str]:
    with sqlite3.connect(db) as connection:
        found = sorted(row[0] for row in connection.execute("SELECT name FROM sqlite_master WHERE type = 'table'"))
    connection.close()
    return found


def execute(db: Path, statement: str) -> None:
    with sqlite3.connect(db) as connection:
        connection.execute(statement)
    connection.close()


@pytest.mark.parametrize("command", READING + WRITING)
def test_a_store_that_lost_a_table_is_refused_by_every_command_and_the_table_is_not_made_again(
        command: list[str], tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.chdir(tmp_path)
    db = small_store(tmp_path)
    execute(db, "DROP TABLE scores")
    before, listed = db.read_bytes(), tables(db)
    text_ = one_line_error(capsys, main([*command, "--db", str(db)]))
    assert text_ == (f"error: the store {db} was written by another version of evolve or damaged: it lacks "
                     "table scores; nothing was changed (use a new database file)"), text_
    assert tables(db) == listed and "scores" not in listed
    assert db.read_bytes() == before


@pytest.mark.parametrize("command", READING + WRITING[:1])
def test_a_non_number_in_a_number_column_is_one_line_naming_its_table_row_and_column(
        command: list[str], tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.chdir(tmp_path)
    db = small_store(tmp_path)
    execute(db, "UPDATE scores SET scalar = 'garbage' WHERE program_id = 2")
    before = db.read_bytes()
    code = main([*command, "--db", str(db)])
    out = capsys.readouterr()
    lines = (out.out + out.err).strip().splitlines()  # a resume first says it loads the policy
    assert code == 1 and "Traceback" not in out.out + out.err and lines[-1] == \
        f"error: cannot read {db}: scores.scalar of row program_id=2 is damaged: 'garbage' is not int or float"
    assert db.read_bytes() == before


@pytest.mark.parametrize(("statement", "says"), [
    ("UPDATE scores SET solved = 'maybe' WHERE program_id = 3", "scores.solved of row program_id=3 is damaged: "
                                                                "'maybe' is not bool"),
    ("UPDATE programs SET island = 1.5 WHERE id = 2", "programs.island of row 2 is damaged: 1.5 is not int"),
    ("""UPDATE scores SET vector_json = '{"test_00": "high"}' WHERE program_id = 1""",
     """scores.vector_json of row program_id=1 is damaged: '{"test_00": "high"}' is not a JSON object of numbers"""),
    ("UPDATE scores SET artifacts_json = '[1]' WHERE program_id = 1",
     "scores.artifacts_json of row program_id=1 is damaged: '[1]' is not a JSON object"),
])
def test_any_stored_value_of_the_wrong_type_is_one_line_naming_its_row(
        statement: str, says: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
        capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.chdir(tmp_path)
    db = small_store(tmp_path)
    execute(db, statement)
    for command in (["show", "1"], ["export", "1"]):
        text_ = one_line_error(capsys, main([*command, "--db", str(db)]))
        assert text_ == f"error: cannot read {db}: {says}", (command, text_)


def test_a_dropped_table_is_refused_on_sqlite_and_postgresql_alike(store_url: str) -> None:
    store = ProgramStore(store_url)
    store.create_run("r", "toy", "p", 0, "{}", 1)
    store.close()
    engine = create_engine(database_url(store_url))
    with engine.begin() as connection:
        connection.execute(text("DROP TABLE scores"))
    for mode in ("create", "existing", "read"):
        with pytest.raises(StoreError, match="lacks table scores; nothing was changed"):
            ProgramStore(store_url, mode=mode)  # type: ignore[arg-type]
    assert not inspect(engine).has_table("scores")
    engine.dispose()


def test_a_database_without_evolve_tables_gets_the_whole_schema_only_from_a_new_run(tmp_path: Path) -> None:
    db = tmp_path / "empty.db"
    db.write_bytes(b"")
    with pytest.raises(StoreError, match="no store in .*: it holds none of evolve's tables"):
        ProgramStore(str(db), mode="existing")  # a resume: nothing to resume, nothing made
    assert tables(db) == []
    ProgramStore(str(db)).close()  # a new run's open: a new store
    assert set(tables(db)) == STORE_TABLES


def test_a_store_from_before_the_added_table_and_column_reads_as_it_is_and_a_writer_adds_them(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.chdir(tmp_path)
    db = small_store(tmp_path)
    execute(db, "DROP TABLE run_leases")  # as stores were before leases and runs.stop_reason
    execute(db, "ALTER TABLE runs DROP COLUMN stop_reason")
    before = db.read_bytes()
    for command in READING:
        assert main([*command, "--db", str(db)]) == 0, capsys.readouterr()
    assert db.read_bytes() == before and "run_leases" not in tables(db)
    store = ProgramStore(str(db), mode="existing")
    assert store.lease(1) is None and store.stop_reason(1) is None
    store.close()
    with sqlite3.connect(db) as connection:
        assert "stop_reason" in [row[1] for row in connection.execute("PRAGMA table_info(runs)")]
    connection.close()
    assert "run_leases" in tables(db)
