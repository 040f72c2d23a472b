"""The program store on real SQLite files and a real PostgreSQL server (every test that takes `db` runs on both):
round trips, atomic iterations, indexes and older stores' schemas (crashes and concurrent writers:
test_store_durability.py)."""

from __future__ import annotations

import sqlite3
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import event
from store_backends import execute, fetch, is_sqlite

from evolve.store import run_reads
from evolve.store.program_store import AttemptRecord, ChildRecord, ProgramStore, StoreError, database_url


def child(code: str, scalar: float, parent: int | None = None, island: int = 0) -> ChildRecord:
    scores = {"zeta": scalar, "alpha": 1 - scalar, "mid": 0.5}  # deliberately not in sorted order
    return ChildRecord(code=code, parent_id=parent, island=island, policy="p", edit=f"edit of {code}",
                       scores=scores, scalar=scalar, solved=scalar >= 1, artifacts={"feedback": "ok"})


@pytest.fixture
def db(store_url: str) -> str:
    """The store's place: a SQLite file path, or a fresh PostgreSQL database's URL (tests/conftest.py)."""
    return store_url


@pytest.fixture
def sqlite_db(tmp_path: Path) -> Path:
    return tmp_path / "store.db"


@pytest.fixture
def store(db: str) -> ProgramStore:
    return ProgramStore(db)


def new_run(store: ProgramStore, name: str = "r") -> int:
    return store.create_run(name, "prob", "p", 7, '{"run": {}}', 10)


def test_program_and_score_vector_round_trip_with_key_order(store: ProgramStore, db: str) -> None:
    run = new_run(store)
    added = store.add_program(run, "x = 1", None, 2, 0, "", "", {"zeta": 0.25, "alpha": 0.75, "mid": 0.5}, 0.5,
                              False, {"stderr": "warn"})
    loaded = ProgramStore(str(db)).get_program(added.id)  # a cold store: everything comes from the file
    assert loaded == added
    assert list(loaded.scores) == ["zeta", "alpha", "mid"]
    assert (loaded.island, loaded.iteration, loaded.artifacts) == (2, 0, {"stderr": "warn"})
    assert fetch(db, "SELECT vector_json FROM scores")[0][0].startswith('{"zeta"')
    with pytest.raises(KeyError, match="no program 999"):
        store.get_program(999)


def test_a_sqlite_store_is_named_by_its_path_in_every_message(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    with pytest.raises(StoreError, match="^no store at evolve.db$"):
        ProgramStore("evolve.db", mode="read")
    (tmp_path / "runs.db").mkdir()
    with pytest.raises(StoreError, match="^runs.db is a folder, not a store$"):
        ProgramStore("runs.db", mode="read")
    new_run(ProgramStore("evolve.db"))
    with pytest.raises(StoreError, match="^no run 999 in evolve.db$"):
        ProgramStore("evolve.db", mode="read").get_run(999)


def test_runs_are_created_listed_and_their_status_kept(store: ProgramStore, db: str) -> None:
    first, second = new_run(store, "a"), new_run(store, "b")
    store.set_run_status(first, "interrupted")
    reopened = ProgramStore(str(db))
    assert [(r.id, r.name, r.status) for r in reopened.list_runs()] == [(first, "a", "interrupted"),
                                                                        (second, "b", "running")]
    info = reopened.get_run(first)
    assert (info.problem, info.policy, info.seed, info.config_json, info.iterations_target) == (
        "prob", "p", 7, '{"run": {}}', 10)
    assert info.created_at.tzinfo is not None and info.updated_at > info.created_at
    with pytest.raises(StoreError, match="no run 42 in (/|postgresql)") as unknown:
        reopened.get_run(42)
    assert isinstance(unknown.value, KeyError)
    with pytest.raises(KeyError):
        reopened.set_run_status(42, "finished")
    with pytest.raises(ValueError, match="not one of"):
        reopened.set_run_status(first, "done")  # type: ignore[arg-type]


def test_iteration_links_children_and_failures_to_their_policy_call(store: ProgramStore, db: str) -> None:
    run = new_run(store)
    (seed,) = store.record_iteration(run, 0, [child("seed", 0.1)])
    records = [child("a", 0.5, seed.id, island=1), AttemptRecord("edit_failed", "no code", completion="junk"),
               AttemptRecord("policy_call", "stop", prompt="P", completion="C", latency_s=1.5, completion_tokens=12),
               AttemptRecord("eval_failed", "timeout: 10 s", completion="ans", child_code="b = 2"), child("b", 0.6)]
    a, b = store.record_iteration(run, 1, records, policy="smollm2")
    assert (a.code, a.parent_id, a.island, a.iteration, a.policy, a.edit) == ("a", seed.id, 1, 1, "p", "edit of a")
    assert store.programs(run) == [seed, a, b]
    call, *outcomes = [row for row in store.attempts(run) if row.iteration == 1]
    assert (call.kind, call.reason, call.prompt, call.latency_s, call.completion_tokens) == (
        "policy_call", "stop", "P", 1.5, 12)
    assert [(o.kind, o.program_id) for o in outcomes] == [("child", a.id), ("edit_failed", None),
                                                          ("eval_failed", None), ("child", b.id)]
    assert all(o.call_id == call.id and o.policy == "smollm2" for o in outcomes)
    assert outcomes[2].child_code == "b = 2"
    links = fetch(db, "SELECT completion_id FROM programs ORDER BY id")
    assert links == [(None,), (call.id,), (call.id,)]
    with pytest.raises(ValueError, match="is a ChildRecord"):
        AttemptRecord("child")


def test_iteration_of_several_requests_links_each_outcome_to_its_own_call(store: ProgramStore, db: str) -> None:
    run = new_run(store)
    (seed,) = store.record_iteration(run, 0, [child("seed", 0.1)])
    records = [AttemptRecord("policy_call", prompt="P1", completion="C1"), child("a", 0.5, seed.id),
               AttemptRecord("policy_error", "HTTP 400", prompt="P2"),
               AttemptRecord("policy_call", prompt="P3", completion="C3"),
               AttemptRecord("duplicate", "same code"), child("b", 0.6, seed.id)]
    a, b = store.record_iteration(run, 1, records, policy="smollm2", parent_id=seed.id)
    rows = [row for row in store.attempts(run) if row.iteration == 1]
    assert [row.kind for row in rows] == ["policy_call", "child", "policy_error", "policy_call", "duplicate", "child"]
    first, a_row, error, second, duplicate, b_row = rows
    assert (a_row.call_id, error.call_id, duplicate.call_id, b_row.call_id) == (first.id, None, second.id, second.id)
    assert all(row.parent_id == seed.id for row in rows)
    links = dict(fetch(db, "SELECT id, completion_id FROM programs"))
    assert (links[a.id], links[b.id]) == (first.id, second.id)
    assert store.completed_iterations(run) == {0, 1}


def test_iteration_costs_count_calls_errors_evaluations_tokens_and_the_commit_clock(store: ProgramStore) -> None:
    run = new_run(store)
    (seed,) = store.record_iteration(run, 0, [child("seed", 0.1)], run_elapsed_s=0.5)
    store.record_iteration(run, 1, [
        AttemptRecord("policy_call", prompt="P", completion="C", prompt_tokens=100, completion_tokens=30),
        child("a", 0.5, seed.id), AttemptRecord("eval_failed", "crash: x", child_code="x"),
        AttemptRecord("duplicate", "same code"), AttemptRecord("edit_failed", "no code"),
        AttemptRecord("policy_error", "HTTP 400"),
        AttemptRecord("policy_call", prompt="P", completion="C", prompt_tokens=90, completion_tokens=20),
        child("b", 0.6, seed.id)], run_elapsed_s=12.5)
    store.record_iteration(run, 3, [AttemptRecord("policy_error", "HTTP 500")], run_elapsed_s=20.0)
    store.record_iteration(run, 2, [AttemptRecord("policy_call", completion_tokens=7), AttemptRecord("duplicate")])
    costs = store.iteration_costs(run)
    assert [(c.iteration, c.policy_calls, c.policy_errors, c.evaluations, c.completion_tokens, c.prompt_tokens,
             c.elapsed_s) for c in costs] == [(1, 2, 1, 3, 50, 190, 12.5), (2, 1, 0, 0, 7, 0, None),
                                              (3, 0, 1, 0, 0, 0, 20.0)]
    assert store.run_elapsed_s(run) == 20.0
    assert store.run_elapsed_s(new_run(store, "empty")) == 0.0
    assert store.iteration_costs(new_run(store, "empty too")) == []


def test_run_elapsed_s_is_each_runs_latest_stored_clock_and_0_without_one(store: ProgramStore) -> None:
    runs = [new_run(store, f"r{index}") for index in range(5)]
    for index, run in enumerate(runs[:4]):
        store.record_iteration(run, 0, [child("seed", 0.1)], run_elapsed_s=1.0 + index)
        store.record_iteration(run, 1, [AttemptRecord("policy_error", "HTTP 500")], run_elapsed_s=10.0 * (index + 1))
    store.record_iteration(runs[3], 2, [AttemptRecord("duplicate")])  # an iteration with no clock stored
    assert [store.run_elapsed_s(run) for run in runs] == [10.0, 20.0, 30.0, 40.0, 0.0]


def test_runs_call_spans_are_each_requests_stored_time_less_its_latency(db: str, store: ProgramStore,
                                                                        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(run_reads, "IN_BATCH", 2)
    runs = [new_run(store, f"r{index}") for index in range(3)]
    store.record_iteration(runs[0], 0, [AttemptRecord("policy_call", latency_s=4.0), child("a", 0.1),
                                        AttemptRecord("policy_error", "HTTP 500", latency_s=1.5)])
    store.record_iteration(runs[2], 0, [AttemptRecord("policy_call", latency_s=2.0), child("b", 0.2)])
    execute(db, "UPDATE attempts SET created_at = '2026-01-01 00:00:10.000000'")
    at = 1767225610.0  # 2026-01-01 00:00:10 UTC
    spans = store.runs_call_spans([runs[2], *runs])
    assert {run: sorted(spans[run]) for run in runs} == {runs[0]: [(at - 4.0, at), (at - 1.5, at)], runs[1]: [],
                                                        runs[2]: [(at - 2.0, at)]}  # children are no requests
    assert store.runs_call_spans([]) == {}


def test_record_child_and_record_attempt_write_linked_rows(store: ProgramStore) -> None:
    run = new_run(store)
    call = store.record_attempt(run, 3, "policy_call", policy="p", prompt="P", completion="C", prompt_tokens=40)
    program = store.record_child(run, 3, child("c", 0.4), call_id=call)
    duplicate = store.record_attempt(run, 3, "duplicate", "same code", child_code="c", call_id=call)
    rows = {row.id: row for row in store.attempts(run)}
    (child_row,) = [row for row in rows.values() if row.kind == "child"]
    assert child_row.program_id == program.id and child_row.call_id == call
    assert rows[call].prompt_tokens == 40 and rows[duplicate].reason == "same code"
    assert store.get_program(program.id) == program
    with pytest.raises(ValueError, match="not one of"):
        store.record_attempt(run, 3, "crashed")


@pytest.mark.parametrize("failure", ["missing parent (fails at the program insert)",
                                     "unstorable reason (fails at the last insert)"])
def test_failed_iteration_write_rolls_back_everything(store: ProgramStore, failure: str) -> None:
    run = new_run(store)
    records: list[AttemptRecord | ChildRecord] = [AttemptRecord("policy_call", prompt="P"), child("ok", 0.2),
                                                  AttemptRecord("edit_failed", "bad")]
    if failure.startswith("missing parent"):
        records.append(child("orphan", 0.3, parent=999_999))
    else:
        records.append(AttemptRecord("duplicate", reason=object()))  # type: ignore[arg-type]
    with pytest.raises(StoreError, match="cannot write iteration 1 of run"):
        store.record_iteration(run, 1, records)
    assert store.count_programs(run) == 0 and store.attempts(run) == []
    assert store.completed_iterations(run) == set() and store.programs(run) == []
    (stored,) = store.record_iteration(run, 1, records[:3])  # the store is still usable
    assert store.programs(run) == [stored]


def test_completed_iterations_are_those_with_a_terminal_record(store: ProgramStore) -> None:
    run, other = new_run(store), new_run(store, "other")
    store.record_iteration(run, 0, [child("seed", 0.1)])
    store.record_iteration(run, 1, [AttemptRecord("policy_call"), child("a", 0.2)])
    store.record_iteration(run, 2, [AttemptRecord("policy_call")])  # a call whose outcome was never written
    store.record_iteration(run, 3, [AttemptRecord("policy_error", "server down")])
    store.record_iteration(run, 4, [AttemptRecord("policy_call"), AttemptRecord("edit_failed", "no code: x")])
    store.record_attempt(run, 5, "duplicate", "same code")
    store.record_attempt(run, 6, "policy_call")
    store.record_iteration(other, 7, [AttemptRecord("eval_failed", "crash: boom")])
    assert store.completed_iterations(run) == {0, 1, 3, 4, 5}
    assert store.completed_iterations(other) == {7}
    assert store.failure_counts(run) == {"policy_error: server down": 1, "edit_failed: no code": 1,
                                         "duplicate: same code": 1}
    assert store.failure_counts(other) == {"eval_failed: crash": 1}


def test_best_programs_by_scalar_ties_to_the_older_and_first_solved(store: ProgramStore) -> None:
    run, other = new_run(store), new_run(store, "other")
    assert store.first_solved(run) is None and store.best_programs(run, 3) == []
    stored = [store.record_iteration(run, i, [child(f"c{i}", s)])[0] for i, s in enumerate([0.3, 0.9, 1.0, 0.9, 1.0])]
    store.record_iteration(other, 0, [child("elsewhere", 5.0)])
    assert [p.id for p in store.best_programs(run, 4)] == [stored[2].id, stored[4].id, stored[1].id, stored[3].id]
    assert len(store.best_programs(run, 100)) == 5
    assert store.first_solved(run) == stored[2]
    assert store.count_programs(run) == 5 and store.count_programs(other) == 1


def test_sqlite_runs_in_wal_mode_with_normal_sync_and_a_busy_timeout(sqlite_db: Path) -> None:
    store = ProgramStore(str(sqlite_db))
    new_run(store)
    with sqlite3.connect(sqlite_db) as connection:
        assert connection.execute("PRAGMA journal_mode").fetchone()[0] == "wal"  # persistent, so any reader sees it
    with store.engine.connect() as connection:
        assert connection.exec_driver_sql("PRAGMA synchronous").scalar() == 1  # NORMAL
        assert connection.exec_driver_sql("PRAGMA busy_timeout").scalar() >= 5000
        assert connection.exec_driver_sql("PRAGMA foreign_keys").scalar() == 1


def test_sqlalchemy_url_and_reopened_file_see_everything(tmp_path: Path) -> None:
    assert database_url("runs/evolve.db") == "sqlite:///runs/evolve.db"
    assert database_url("postgresql://u@h/db") == "postgresql://u@h/db"
    url = f"sqlite:///{tmp_path / 'u.db'}"
    first = ProgramStore(url)
    run = new_run(first)
    programs = first.record_iteration(run, 0, [child("y", 0.4)]) + first.record_iteration(run, 1, [child("z", 1.0)])
    first.set_run_status(run, "finished")
    first.close()
    again = ProgramStore(str(tmp_path / "u.db"))  # the same file by its plain path
    assert again.get_run(run).status == "finished"
    assert again.programs(run) == programs and again.completed_iterations(run) == {0, 1}


def test_unopenable_store_is_a_one_line_store_error(tmp_path: Path) -> None:
    with pytest.raises(StoreError, match="cannot open the store .*unable to open database file"):
        ProgramStore(str(tmp_path / "missing" / "dir" / "x.db"))


def test_every_outcome_of_an_iteration_records_the_parent_the_call_edited(store: ProgramStore) -> None:
    run = new_run(store)
    (seed,) = store.record_iteration(run, 0, [child("seed", 0.1)])
    store.record_iteration(run, 1, [AttemptRecord("policy_call", prompt="P", completion="C"),
                                    AttemptRecord("edit_failed", "no code"), child("a", 0.5, seed.id)],
                           parent_id=seed.id)
    store.record_iteration(run, 2, [AttemptRecord("policy_error", "HTTP 400")], parent_id=seed.id)
    rows = [row for row in store.attempts(run) if row.iteration >= 1]
    assert [(row.kind, row.parent_id) for row in rows] == [("policy_call", seed.id), ("edit_failed", seed.id),
                                                           ("child", seed.id), ("policy_error", seed.id)]


def test_store_from_before_attempts_had_a_parent_gains_the_column_and_keeps_its_rows(db: str) -> None:
    store = ProgramStore(db)
    run = new_run(store)
    store.record_iteration(run, 0, [child("seed", 0.1)])
    store.close()
    if is_sqlite(db):  # rebuild attempts as an older evolve wrote it: no parent_id (SQLite drops no key column)
        with sqlite3.connect(db) as connection:
            columns = [row[1] for row in connection.execute("PRAGMA table_info(attempts)") if row[1] != "parent_id"]
            connection.execute(f"CREATE TABLE attempts_old AS SELECT {', '.join(columns)} FROM attempts")
            connection.execute("DROP TABLE attempts")
            connection.execute("ALTER TABLE attempts_old RENAME TO attempts")
    else:
        execute(db, "ALTER TABLE attempts DROP COLUMN parent_id")
    reopened = ProgramStore(str(db))
    assert [row.parent_id for row in reopened.attempts(run)] == [None]
    assert reopened.programs(run)[0].code == "seed"


def test_store_from_before_the_run_clock_gains_the_column_and_reports_no_elapsed_for_old_rows(db: str) -> None:
    store = ProgramStore(db)
    run = new_run(store)
    (seed,) = store.record_iteration(run, 0, [child("seed", 0.1)])
    store.record_iteration(run, 1, [AttemptRecord("policy_call", completion_tokens=5), child("a", 0.5, seed.id)])
    store.close()
    execute(db, "ALTER TABLE attempts DROP COLUMN run_elapsed_s")  # attempts as an older evolve wrote it
    reopened = ProgramStore(str(db))
    reopened.record_iteration(run, 2, [AttemptRecord("policy_call"), AttemptRecord("duplicate")], run_elapsed_s=3.0)
    assert [(c.iteration, c.evaluations, c.completion_tokens, c.elapsed_s) for c in reopened.iteration_costs(run)] \
        == [(1, 1, 5, None), (2, 0, 0, 3.0)]


def test_database_from_another_schema_is_refused_with_a_clear_error(db: str) -> None:
    # the earlier layout kept the vector in a column named 'vector'
    execute(db, "CREATE TABLE scores (program_id INTEGER PRIMARY KEY, vector JSON, scalar FLOAT)")
    with pytest.raises(StoreError, match="another version of evolve .*scores.vector_json"):
        ProgramStore(db)


def test_top_k_and_resume_queries_use_indexes_with_10000_programs(store: ProgramStore, db: str) -> None:
    run, other = new_run(store), new_run(store, "other")
    for batch in range(10):  # a bulk fill: record_iteration batches its inserts
        store.record_iteration(run, batch, [child(f"c{batch}_{i}", ((batch * 1000 + i) * 7919 % 10007) / 10007)
                                            for i in range(1000)])
    store.record_iteration(other, 0, [child("o", 0.999)])
    statements: list[tuple[str, Any]] = []
    event.listen(store.engine, "before_cursor_execute",
                 lambda _c, _cur, sql, params, _ctx, _many: statements.append((sql, params)))
    best = store.best_programs(run, 5)
    store.programs(other), store.completed_iterations(run), store.failure_counts(run)
    store.first_solved(run), store.count_programs(run), store.get_program(best[0].id)
    assert [p.scalar for p in best] == sorted((p.scalar for p in store.programs(run)), reverse=True)[:5]
    assert best[0].run_id == run
    if not is_sqlite(db):
        return  # the plans below are SQLite's; PostgreSQL's planner picks by its own statistics
    with sqlite3.connect(db) as connection:
        plans = {sql: [row[3] for row in connection.execute(f"EXPLAIN QUERY PLAN {sql}", params)]
                 for sql, params in statements[:7]}
    for sql, plan in plans.items():
        assert all("USING" in step for step in plan if step.startswith(("SCAN", "SEARCH"))), (sql, plan)
    top_k_plan = next(plan for sql, plan in plans.items() if "LIMIT" in sql and "scalar DESC" in sql)
    assert any("ix_scores_run_scalar" in step for step in top_k_plan)
    assert not any("TEMP B-TREE" in step for step in top_k_plan), top_k_plan  # read in index order, no sort


def test_headers_stream_every_program_without_code_also_from_a_store_older_than_the_code_key(db: str) -> None:
    from evolve.records import ProgramHeader, code_key

    store = ProgramStore(db)
    run = new_run(store)
    for iteration in range(3):
        store.record_iteration(run, iteration, [child(f"  code {iteration}.{k} " + "é" * k, k / 4) for k in range(3)])
    whole = store.programs(run)
    store.close()
    # the store as a version before programs.code_key/code_length wrote it
    execute(db, "ALTER TABLE programs DROP COLUMN code_key", "ALTER TABLE programs DROP COLUMN code_length")
    assert ProgramStore(str(db), mode="read").programs(run) == whole  # read-only commands never select them
    for mode in ("existing", "existing"):  # first open adds the columns (NULL in old rows); then as written now
        store = ProgramStore(str(db), mode=mode)
        headers = list(store.program_headers(run))
        assert [h.id for h in headers] == [p.id for p in whole]
        assert all(isinstance(h, ProgramHeader) and h.code == "" and h.edit == "" and h.artifacts == {}
                   for h in headers)
        assert [(h.code_key, h.code_length) for h in headers] == [(code_key(p.code), len(p.code)) for p in whole]
        assert [(h.scores, h.scalar, h.solved, h.island, h.parent_id) for h in headers] == \
            [(p.scores, p.scalar, p.solved, p.island, p.parent_id) for p in whole]
        assert store.programs_by_id([whole[4].id, whole[0].id, 999]) == {whole[4].id: whole[4], whole[0].id: whole[0]}
        store.record_iteration(run, 9, [child(f"new {len(headers)}", 0.5)])
        whole = store.programs(run)


def test_a_63_bit_seed_round_trips_in_runs_and_experiment_cells(store: ProgramStore) -> None:
    from evolve.config import MAX_SEED

    store.save_experiment("e", "{}")
    run = store.create_run("big", "prob", "p", MAX_SEED, "{}", 3, experiment="e")
    assert store.get_run(run).seed == MAX_SEED
    assert [cell.seed for cell in store.experiment_cells("e")] == [MAX_SEED]


def test_text_with_nul_characters_is_stored_on_both_backends(store: ProgramStore, db: str) -> None:
    """An LLM's completion or an evaluator's stderr may hold NUL, which PostgreSQL's text type refuses: there it is
    written as U+FFFD; SQLite keeps it."""
    run = new_run(store)
    text = "before\x00after"
    kept = text if is_sqlite(db) else "before\ufffdafter"
    (program,) = store.record_iteration(run, 0, [
        AttemptRecord("policy_call", prompt=text, completion=text),
        ChildRecord(code=f"# {text}\nx = 1\n", parent_id=None, island=0, policy="p", edit=text, scores={"a": 1.0},
                    scalar=1.0, solved=False, artifacts={"stderr": text}),
        AttemptRecord("eval_failed", f"crash: {text}", child_code=text)])
    stored = store.get_program(program.id)
    assert (stored.code, stored.edit, stored.artifacts) == (f"# {kept}\nx = 1\n", kept, {"stderr": text})
    call, _, failed = store.attempts(run)
    assert (call.prompt, call.completion, failed.reason, failed.child_code) == (kept, kept, f"crash: {kept}", kept)


def test_a_database_url_whose_driver_is_missing_is_one_store_error_line() -> None:
    with pytest.raises(StoreError, match=r"^cannot open the store mysql://u@h/db: No module named 'MySQLdb'$"):
        ProgramStore("mysql://u@h/db")  # SQLAlchemy's default MySQL driver, which evolve does not install
