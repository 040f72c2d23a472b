"""The program store under crashes and concurrency, on real SQLite files and a real PostgreSQL server (every test
runs on both): a writer killed with SIGKILL mid-write loses nothing it committed and leaves no half iteration;
processes writing one store, one run, wait for each other and lose nothing."""

from __future__ import annotations

import os
import signal
import sqlite3
import subprocess
import sys
import time

import pytest
from store_backends import fetch, is_sqlite

from evolve.store.program_store import ChildRecord, ProgramStore


@pytest.fixture
def db(store_url: str) -> str:
    """The store's place: a SQLite file path, or a fresh PostgreSQL database's URL (tests/conftest.py)."""
    return store_url


WRITER = """
import sys
from evolve.store.program_store import AttemptRecord, ChildRecord, ProgramStore
store = ProgramStore(sys.argv[1])
runs = store.list_runs()
run = runs[0].id if runs else store.create_run("k", "p", "p", 0, "{}", 100000)
done = store.completed_iterations(run)
for i in range(100000):
    if i in done:
        continue
    rec = ChildRecord(code="c%d" % i, parent_id=None, island=i % 3, policy="p", edit="e%d" % i,
                      scores={"b": i / 1e5, "a": 1.0}, scalar=i / 1e5, solved=False)
    (program,) = store.record_iteration(run, i, [AttemptRecord("policy_call", prompt="p" * 4000), rec,
                                                 AttemptRecord("edit_failed", "no code", completion="x" * 1000)])
    print(i, program.id, flush=True)
"""


def write_until_killed(db: str, reports: int) -> dict[int, int]:
    """Run WRITER until it has reported `reports` commits, SIGKILL it mid-loop; returns iteration -> program id."""
    writer = subprocess.Popen([sys.executable, "-c", WRITER, str(db)], stdout=subprocess.PIPE, text=True)
    committed: dict[int, int] = {}
    deadline = time.monotonic() + 60
    assert writer.stdout is not None
    while len(committed) < reports and time.monotonic() < deadline:
        line = writer.stdout.readline()
        assert line, "the writer ended before it was killed"
        iteration, program_id = map(int, line.split())
        committed[iteration] = program_id
    os.kill(writer.pid, signal.SIGKILL)
    writer.wait()
    return committed


def test_kill_9_mid_write_loses_nothing_committed_and_leaves_no_half_iteration(db: str) -> None:
    committed = write_until_killed(db, 40)
    committed |= write_until_killed(db, 40)  # the second writer resumes after the first one's kill
    store = ProgramStore(db)
    done = store.completed_iterations(1)
    assert set(committed) <= done
    for iteration, program_id in committed.items():
        program = store.get_program(program_id)
        assert (program.iteration, program.code, program.scores) == (
            iteration, f"c{iteration}", {"b": iteration / 1e5, "a": 1.0})
    assert sorted(p.iteration for p in store.programs(1)) == sorted(done)  # one program per complete iteration
    if is_sqlite(db):
        with sqlite3.connect(db) as connection:
            assert connection.execute("PRAGMA integrity_check").fetchone()[0] == "ok"
    kinds = fetch(db, "SELECT kind, COUNT(*) FROM attempts GROUP BY kind")
    ((orphans,),) = fetch(db, "SELECT COUNT(*) FROM programs LEFT JOIN scores ON program_id = id "
                              "WHERE program_id IS NULL")
    assert dict(kinds) == {"policy_call": len(done), "child": len(done), "edit_failed": len(done)}
    assert orphans == 0


CONCURRENT_WRITER = """
import sys
from evolve.store.program_store import AttemptRecord, ChildRecord, ProgramStore
store = ProgramStore(sys.argv[1])
run = store.create_run(sys.argv[2], "p", "p", 0, "{}", 150)
for i in range(150):
    rec = ChildRecord(code="c%d" % i, parent_id=None, island=0, policy="p", edit="", scores={"a": 0.5}, scalar=0.5,
                      solved=False)
    store.record_iteration(run, i, [AttemptRecord("policy_call", prompt="p" * 2000), rec])
"""


def test_two_processes_writing_one_file_wait_for_each_other(db: str) -> None:
    ProgramStore(db).close()  # create the tables before the writers race
    writers = [subprocess.Popen([sys.executable, "-c", CONCURRENT_WRITER, str(db), name], stderr=subprocess.PIPE,
                                text=True) for name in ("left", "right")]
    for writer in writers:
        _, errors = writer.communicate(timeout=120)
        assert writer.returncode == 0, errors[-2000:]
    store = ProgramStore(db)
    runs = store.list_runs()
    assert sorted(run.name for run in runs) == ["left", "right"]
    assert [len(store.completed_iterations(run.id)) for run in runs] == [150, 150]


SHARED_RUN_WRITER = """
import sys
from evolve.store.program_store import AttemptRecord, ChildRecord, ProgramStore
url, writer, writers, per_writer = sys.argv[1], *map(int, sys.argv[2:5])
store = ProgramStore(url)  # every writer opens the fresh database at once: the tables are created once
print("open", flush=True)
run, seed = map(int, sys.stdin.readline().split())
for k in range(per_writer):
    i = 1 + writer + k * writers
    rec = ChildRecord(code="w%d i%d" % (writer, i), parent_id=seed, island=writer, policy="p", edit="", scores={"a": i},
                      scalar=float(i), solved=False)
    store.record_iteration(run, i, [AttemptRecord("policy_call", prompt="p" * 500, completion_tokens=i), rec,
                                    AttemptRecord("edit_failed", "no code")], parent_id=seed)
"""


def test_many_processes_writing_one_run_on_a_new_store_lose_nothing(db: str) -> None:
    writers, per_writer = 4, 40
    total = writers * per_writer
    processes = [subprocess.Popen([sys.executable, "-c", SHARED_RUN_WRITER, db, str(w), str(writers), str(per_writer)],
                                  stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
                 for w in range(writers)]
    for process in processes:
        assert process.stdout is not None and process.stdout.readline() == "open\n", process.communicate()[1][-2000:]
    store = ProgramStore(db)
    run = store.create_run("r", "prob", "p", 7, '{"run": {}}', total)
    (seed,) = store.record_iteration(run, 0, [ChildRecord(code="seed", parent_id=None, island=0, policy="p", edit="",
                                                          scores={"a": 0.0}, scalar=0.0, solved=False)])
    for process in processes:  # all at once: the writes interleave
        assert process.stdin is not None
        process.stdin.write(f"{run} {seed.id}\n")
        process.stdin.flush()
    for process in processes:
        _, errors = process.communicate(timeout=120)
        assert process.returncode == 0, errors[-2000:]
    assert store.completed_iterations(run) == set(range(total + 1))
    programs = store.programs(run)
    assert sorted(p.code for p in programs[1:]) == sorted(f"w{(i - 1) % writers} i{i}" for i in range(1, total + 1))
    assert all(p.parent_id == seed.id and p.scores == {"a": p.iteration} for p in programs[1:])
    assert dict(fetch(db, "SELECT kind, COUNT(*) FROM attempts GROUP BY kind")) == {
        "policy_call": total, "child": total + 1, "edit_failed": total}
    assert fetch(db, "SELECT COUNT(*), SUM(completion_tokens) FROM attempts") == [(3 * total + 1,
                                                                                  total * (total + 1) // 2)]
    assert fetch(db, "SELECT COUNT(*) FROM scores") == [(total + 1,)]
