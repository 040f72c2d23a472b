"""A stored score vector holding a number that is not finite (NaN, Infinity, 1e400, an integer past a float) is damage,
as a non-number is: the engine stores only finite scores. Every command that reads it says so in one line naming the
row (not invalid JSON from `show --json`, not a 500 without a line from `serve`), and nothing is changed."""

from __future__ import annotations

import json
import math
import sqlite3
from pathlib import Path

import pytest
from test_hardening import small_store

from evolve.cli.main import main
from evolve.store.program_store import ProgramStore, StoreError
from evolve.store.rows import score_vector

NOT_FINITE = ['{"test_00": NaN}', '{"test_00": Infinity}', '{"test_00": -Infinity}', '{"test_00": 1e400}',
              '{"test_00": 1' + "0" * 400 + "}"]


def damage(db: Path, vector_json: str, program_id: int = 1) -> None:
    with sqlite3.connect(db) as connection:
        connection.execute("UPDATE scores SET vector_json = ? WHERE program_id = ?", (vector_json, program_id))
    connection.close()


@pytest.mark.parametrize("text", NOT_FINITE)
def test_a_vector_with_a_number_that_is_not_finite_is_damage(text: str) -> None:
    with pytest.raises(ValueError, match=r"scores.vector_json of row program_id=7 is damaged: .* is not a JSON object "
                                         "of finite numbers"):
        score_vector(text, 7)
    assert score_vector('{"b": 1, "a": 0.25}', 7) == {"b": 1.0, "a": 0.25}  # finite ones read, in stored order


@pytest.mark.parametrize("command", [["show", "1:1", "--json"], ["show", "1:1"], ["show", "--id", "1", "--json"],
                                     ["show", "1", "--json"], ["lineage", "1"], ["export", "1"]])
def test_every_command_reading_a_nan_score_says_so_in_one_line_and_changes_nothing(
        command: list[str], tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
        capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.chdir(tmp_path)
    db = small_store(tmp_path)
    damage(db, '{"test_00": NaN}')
    before = db.read_bytes()
    code = main([*command, "--db", str(db)])
    out = capsys.readouterr()
    text = (out.out + out.err).strip()
    assert code == 1 and "Traceback" not in text and len(text.splitlines()) == 1, text
    assert text == (f"error: cannot read {db}: scores.vector_json of row program_id=1 is damaged: "
                    """'{"test_00": NaN}' is not a JSON object of finite numbers"""), text
    assert db.read_bytes() == before


def test_show_json_of_a_finite_store_is_strict_json(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                     capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.chdir(tmp_path)
    db = small_store(tmp_path)
    assert main(["show", "1:1", "--json", "--db", str(db)]) == 0
    document = json.loads(capsys.readouterr().out, parse_constant=lambda name: pytest.fail(f"{name} in the JSON"))
    assert all(math.isfinite(value) for value in document["scores"].values())


def test_the_store_api_raises_one_store_error_for_an_infinite_score(tmp_path: Path) -> None:
    db = small_store(tmp_path)
    damage(db, '{"test_00": Infinity}', program_id=2)
    store = ProgramStore(str(db), mode="read")
    try:
        for read in (lambda: store.get_program(2), lambda: store.program_by_number(1, 2),
                     lambda: store.programs(1), lambda: list(store.score_vectors(1))):
            with pytest.raises(StoreError, match="scores.vector_json of row program_id=2 is damaged"):
                read()
        assert store.get_program(1).scores["test_00"] == 0.5  # the rows around it still read
    finally:
        store.close()


def test_serve_answers_one_json_error_line_for_a_nan_score(tmp_path: Path) -> None:
    from starlette.testclient import TestClient

    from evolve.serve.app import create_app

    db = small_store(tmp_path)
    damage(db, '{"test_00": NaN}', program_id=2)
    store = ProgramStore(str(db), mode="read")
    try:
        client = TestClient(create_app(store), base_url="http://127.0.0.1", raise_server_exceptions=False)
        response = client.get("/api/runs/1/programs/2")
    finally:
        store.close()
    assert response.status_code == 500 and response.json() == {
        "error": f"cannot read {db}: scores.vector_json of row program_id=2 is damaged: '{{\"test_00\": NaN}}' is "
                 "not a JSON object of finite numbers"}
