"""`evolve show RUN`: the summary's numbers from a real store (SQLite, then PostgreSQL) written as evolve/engine/controller.py writes it.

The run (three 0/1 tests, scalar = their mean): seed #1; iteration 1 child #2; iteration 2 one call with an eval
failure, a duplicate and child #3; iteration 3 a policy error; iteration 4 child #4 solves; iteration 5 no
answer; iteration 6 child #5 solves too (ties #4). Five calls: 10 s of latency, 200 completion tokens. The run's
timestamps are set to 12 minutes apart so that the rates are exact.
"""

from __future__ import annotations

import json

import pytest
from rich.console import Console
from store_backends import execute

from evolve.report.run_summary import compact_vector, render_run, run_summary_dict
from evolve.store.program_store import AttemptRecord, ChildRecord, ProgramStore, StoreError

POLICY = "grpo [b]"  # rich markup in a name must print literally


def code(n: int) -> str:
    return f"# EVOLVE-BLOCK-START\ndef f(x):\n    return {n}\n# EVOLVE-BLOCK-END\n"


def child(n: int, parent_id: int | None, tests: tuple[int, int, int]) -> ChildRecord:
    return ChildRecord(code=code(n), parent_id=parent_id, island=0, policy=POLICY if parent_id else "",
                       edit=f"def f(x):\n    return {n}" if parent_id else "",
                       scores=dict(zip(("t1", "t2", "t3"), map(float, tests), strict=True)),
                       scalar=sum(tests) / 3, solved=min(tests) == 1)


def call(latency_s: float, tokens: int) -> AttemptRecord:
    return AttemptRecord("policy_call", "stop", prompt="<user>\nimprove", completion="...", latency_s=latency_s,
                         prompt_tokens=100, completion_tokens=tokens)


def build_run(store: ProgramStore, db: str) -> tuple[int, list[int]]:
    run = store.create_run("show-run", "tests3", POLICY, 4, "{}", 10)

    def commit(iteration: int, records: list[AttemptRecord | ChildRecord]) -> list[int]:
        return [p.id for p in store.record_iteration(run, iteration, records, policy=POLICY)]

    (seed,) = [p.id for p in store.record_iteration(run, 0, [child(0, None, (0, 0, 0))])]
    (two,) = commit(1, [call(2.0, 40), child(2, seed, (1, 0, 0))])
    (three,) = commit(2, [call(1.0, 20), AttemptRecord("duplicate", "same code as an earlier program",
                                                      child_code=code(2)),
                          child(3, two, (1, 1, 0)),
                          AttemptRecord("eval_failed", "crash: ZeroDivisionError: division by zero",
                                        completion="1/0", child_code=code(9))])
    commit(3, [AttemptRecord("policy_error", "ReadTimeout: timed out", prompt="<user>\nimprove")])
    (four,) = commit(4, [call(3.0, 60), child(4, three, (1, 1, 1))])
    commit(5, [call(2.0, 40), AttemptRecord("edit_failed", "no answer in the completion", completion="...")])
    (five,) = commit(6, [call(2.0, 40), child(5, three, (1, 1, 1))])
    store.set_run_status(run, "finished")
    execute(db, "UPDATE runs SET created_at = '2025-01-01 00:00:00.000000', "
                "updated_at = '2025-01-01 00:12:00.000000' WHERE id = :run", run=run)
    return run, [seed, two, three, four, five]


@pytest.fixture
def db(store_url: str) -> str:
    """A SQLite file, then a PostgreSQL database (tests/conftest.py)."""
    return store_url


@pytest.fixture
def store(db: str) -> ProgramStore:
    return ProgramStore(db)


def test_summary_header_best_programs_and_first_solve(store: ProgramStore, db: str) -> None:
    run, (seed, two, three, four, five) = build_run(store, db)
    summary = run_summary_dict(store, run)
    assert json.loads(json.dumps(summary)) == summary  # JSON-ready as it is
    assert {k: summary[k] for k in ("run_id", "name", "problem", "policy", "seed", "status", "iterations_done",
                                    "iterations_target", "programs")} == {
        "run_id": run, "name": "show-run", "problem": "tests3", "policy": POLICY, "seed": 4, "status": "finished",
        "iterations_done": 6, "iterations_target": 10, "programs": 5}
    assert (summary["created_at"], summary["updated_at"]) == ("2025-01-01T00:00:00+00:00", "2025-01-01T00:12:00+00:00")
    assert [b["id"] for b in summary["best"]] == [four, five, three, two, seed]  # a tie goes to the older program
    assert summary["best"][0] == {"id": four, "iteration": 4, "scalar": 1.0, "solved": True,
                                  "scores": {"t1": 1.0, "t2": 1.0, "t3": 1.0}, "number": 4}  # 1 is the seed
    assert (summary["first_solved"]["id"], summary["first_solved"]["iteration"]) == (four, 4)
    assert summary["best_code"] == code(4)


def test_summary_counts_outcomes_without_the_seed_and_failures_by_reason(store: ProgramStore, db: str) -> None:
    run, _ = build_run(store, db)
    summary = run_summary_dict(store, run)
    assert summary["outcomes"] == {"child": 4, "policy_error": 1, "edit_failed": 1, "duplicate": 1, "eval_failed": 1}
    assert summary["failures"] == {"duplicate: same code as an earlier program": 1, "eval_failed: crash": 1,
                                   "policy_error: ReadTimeout": 1, "edit_failed: no answer in the completion": 1}


def test_throughput_is_tokens_over_wall_time_and_per_request_over_summed_latency(store: ProgramStore,
                                                                                   db: str) -> None:
    run, _ = build_run(store, db)  # stored without the active clock: the wall time is created -> updated
    summary = run_summary_dict(store, run)
    t = summary["throughput"]
    assert (t["policy_calls"], t["policy_errors"], t["completion_tokens"], t["prompt_tokens"]) == (5, 1, 200, 500)
    assert (t["generation_s"], t["tokens_per_request_s"], t["mean_latency_s"]) == (10.0, 20.0, 2.0)
    assert t["wall_s"] == 720.0 and t["iterations_per_min"] == pytest.approx(0.5)
    assert t["tokens_per_s"] == pytest.approx(200 / 720)
    assert summary["iterations_with_child"] == 4  # iterations 1, 2, 4, 6


def test_wall_time_is_the_active_clock_without_the_time_the_run_lay_killed(store: ProgramStore, db: str) -> None:
    run = store.create_run("killed-once", "tests3", POLICY, 0, "{}", 4)
    store.record_iteration(run, 0, [child(0, None, (0, 0, 0))], run_elapsed_s=1.0)
    empty = AttemptRecord("edit_failed", "no answer in the completion", completion="...")
    store.record_iteration(run, 1, [call(4.0, 30), empty], policy=POLICY, run_elapsed_s=10.0)
    # killed here for an hour; the resumed process's clock goes on from 10 s
    store.record_iteration(run, 2, [call(4.0, 30), empty], policy=POLICY, run_elapsed_s=15.0)
    execute(db, "UPDATE runs SET created_at = '2025-01-01 00:00:00.000000', "
                "updated_at = '2025-01-01 01:00:15.000000' WHERE id = :run", run=run)
    t = run_summary_dict(store, run)["throughput"]
    assert t["wall_s"] == 15.0 and t["tokens_per_s"] == pytest.approx(60 / 15)
    assert t["iterations_per_min"] == pytest.approx(2 / 0.25)


def test_terminal_view_shows_the_same_numbers_and_the_best_code(store: ProgramStore, db: str) -> None:
    run, (_, _, _, four, _) = build_run(store, db)
    console = Console(record=True, width=140, color_system=None)
    render_run(store, run, console)
    text = console.export_text()
    for expected in (f"run {run}: show-run", f"policy        {POLICY}", "iterations    6/10",
                     f"first solved  {run}:4 (store id {four}) at iteration 4",
                     "outcomes      child 4, policy_error 1, edit_failed 1, duplicate 1, eval_failed 1",
                     "5 (1 failed), mean latency 2.00 s",
                     "200 completion, 500 prompt; 0.3 tokens/s over the active wall time, 20.0 tokens/s per request",
                     "(10.0 s of summed", "0.50 iterations/min over the active wall time", "(active 12m 00s)",
                     "eval_failed: crash",
                     "3/3 111", f"code of the best program {run}:4", "return 4"):
        assert expected in text, expected
    assert text.index(f"{run}:4 ") < text.index("3/3 111")


def test_an_unsolved_run_without_calls_says_so_and_has_no_rates(store: ProgramStore) -> None:
    run = store.create_run("fresh", "tests3", POLICY, 0, "{}", 5)
    store.record_iteration(run, 0, [child(0, None, (0, 1, 0))])
    summary = run_summary_dict(store, run)
    assert summary["first_solved"] is None and summary["iterations_done"] == 0
    assert summary["throughput"]["tokens_per_s"] is None and summary["throughput"]["mean_latency_s"] is None
    console = Console(record=True, width=120, color_system=None)
    render_run(store, run, console)
    text = console.export_text()
    assert "first solved  not solved" in text and "failed answers: none" in text and "1/3 010" in text


def test_a_run_without_programs_renders_and_an_unknown_run_is_a_store_error(store: ProgramStore) -> None:
    run = store.create_run("empty", "tests3", POLICY, 0, "{}", 5)
    assert run_summary_dict(store, run)["best"] == [] and run_summary_dict(store, run)["best_code"] is None
    console = Console(record=True, width=120, color_system=None)
    render_run(store, run, console)
    assert "no programs stored" in console.export_text()
    with pytest.raises(StoreError, match="no run 77"):
        run_summary_dict(store, 77)


def test_compact_vector_shows_bits_for_tests_and_values_otherwise() -> None:
    assert compact_vector({"a": 1.0, "b": 0.0, "c": 1.0}) == "2/3 101"
    assert compact_vector({f"t{i}": 1.0 for i in range(50)}, width=4) == "50/50 1111..."
    assert compact_vector({"x": 0.25, "y": 2.0}) == "x=0.25 y=2"
    assert compact_vector({"x": 0.5, "y": 0.5, "z": 0.5}, width=2) == "x=0.5 y=0.5 ... (+1)"
