"""The store: round trips, atomic iterations, indexes, and durability across a real kill -9."""

from __future__ import annotations

import os
import signal
import sqlite3
import subprocess
import sys
import time
from pathlib import Path

import pytest

from evolve.store import AttemptRecord, ChildRecord, ProgramStore, StoreError


def child(code: str, scalar: float, parent: int | None = None, island: int = 0) -> ChildRecord:
    scores = {"zeta": scalar, "alpha": 1 - scalar, "mid": 0.5}
    return ChildRecord(code=code, parent_id=parent, island=island, policy="p", edit="edit text",
                       scores=scores, scalar=scalar, solved=scalar >= 1, artifacts={"feedback": "ok"})


@pytest.fixture
def store(tmp_path: Path) -> ProgramStore:
    return ProgramStore(str(tmp_path / "s.db"))


def new_run(store: ProgramStore) -> int:
    return store.create_run("r", "prob", "p", 7, "{}", 10)


def test_program_and_score_vector_round_trip_in_order(store: ProgramStore) -> None:
    run = new_run(store)
    (stored,) = store.record_iteration(run, 0, [child("x = 1", 0.25)])
    loaded = store.get_program(stored.id)
    assert loaded == stored
    assert list(loaded.scores) == ["zeta", "alpha", "mid"]
    assert loaded.scores["alpha"] == 0.75 and loaded.artifacts == {"feedback": "ok"}


def test_iteration_links_children_to_their_policy_call(store: ProgramStore) -> None:
    run = new_run(store)
    (seed,) = store.record_iteration(run, 0, [child("seed", 0.1)])
    records = [AttemptRecord("policy_call", prompt="P", completion="C", completion_tokens=12),
               child("a", 0.5, seed.id), AttemptRecord("edit_failed", "no code", completion="junk")]
    (a,) = store.record_iteration(run, 1, records, policy="p")
    attempts = store.attempts(run)
    call = next(row for row in attempts if row["kind"] == "policy_call")
    assert call["completion_tokens"] == 12 and call["policy"] == "p"
    assert all(row["call_id"] == call["id"] for row in attempts if row["iteration"] == 1 and row["kind"] != "policy_call")
    assert a.parent_id == seed.id
    assert store.completed_iterations(run) == {0, 1}
    assert store.failure_counts(run) == {"edit_failed: no code": 1}


def test_failed_write_rolls_back_the_whole_iteration(store: ProgramStore) -> None:
    run = new_run(store)
    bad = ChildRecord(code="b", parent_id=999_999, island=0, policy="p", edit="", scores={"a": 1.0}, scalar=1.0,
                      solved=True)
    with pytest.raises(Exception):  # foreign key to a missing parent
        store.record_iteration(run, 1, [AttemptRecord("policy_call"), child("ok", 0.2), bad])
    assert store.count_programs(run) == 0
    assert store.completed_iterations(run) == set()
    assert store.attempts(run) == []


def test_best_programs_orders_by_scalar_and_first_solved(store: ProgramStore) -> None:
    run = new_run(store)
    for iteration, scalar in enumerate([0.3, 0.9, 1.0, 0.5]):
        store.record_iteration(run, iteration, [child(f"c{iteration}", scalar)])
    assert [p.scalar for p in store.best_programs(run, 3)] == [1.0, 0.9, 0.5]
    assert store.first_solved(run).iteration == 2


def test_wal_mode_and_indexed_top_k(tmp_path: Path) -> None:
    db = tmp_path / "w.db"
    store = ProgramStore(str(db))
    run = new_run(store)
    store.record_iteration(run, 0, [child("x", 0.1)])
    with sqlite3.connect(db) as connection:
        assert connection.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
        plan = " ".join(str(row) for row in connection.execute(
            "EXPLAIN QUERY PLAN SELECT program_id FROM scores WHERE run_id = 1 ORDER BY scalar DESC LIMIT 5"))
    assert "ix_scores_run_scalar" in plan


def test_sqlalchemy_url_and_reopen_see_everything(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'u.db'}"
    first = ProgramStore(url)
    run = new_run(first)
    first.record_iteration(run, 0, [child("y", 0.4)])
    again = ProgramStore(url)
    assert again.get_run(run).seed == 7 and again.count_programs(run) == 1
    with pytest.raises(StoreError, match="no run 42"):
        again.get_run(42)


WRITER = """
import sys
from evolve.store import AttemptRecord, ChildRecord, ProgramStore
store = ProgramStore(sys.argv[1])
run = store.create_run("k", "p", "p", 0, "{}", 100000)
for i in range(100000):
    rec = ChildRecord(code="c%d" % i, parent_id=None, island=0, policy="p", edit="", scores={"a": i / 1e5},
                      scalar=i / 1e5, solved=False)
    store.record_iteration(run, i, [AttemptRecord("policy_call", prompt="p" * 2000), rec])
    print(i, flush=True)
"""


def test_kill_9_mid_write_loses_nothing_committed(tmp_path: Path) -> None:
    db = tmp_path / "k.db"
    writer = subprocess.Popen([sys.executable, "-c", WRITER, str(db)], stdout=subprocess.PIPE, text=True)
    committed = -1
    started = time.monotonic()
    while committed < 40 and time.monotonic() - started < 60:
        committed = int(writer.stdout.readline())
    os.kill(writer.pid, signal.SIGKILL)
    writer.wait()
    store = ProgramStore(str(db))
    done = store.completed_iterations(1)
    assert set(range(committed + 1)) <= done
    programs = store.programs(1)
    assert len(programs) == len(done)  # each iteration has its program and its score, or nothing
    with sqlite3.connect(db) as connection:
        calls = connection.execute("SELECT COUNT(*) FROM attempts WHERE kind = 'policy_call'").fetchone()[0]
    assert calls == len(done)
