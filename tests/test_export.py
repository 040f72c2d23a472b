"""The JSONL export on a real store (SQLite, then PostgreSQL) written as evolve/engine/controller.py writes it: one record per outcome, linked.

The run: seed #1; iteration 1 a child #2; iteration 2 one call with four answers (an edit failure, a duplicate of
#2's code, a child #3 of #2, an eval failure); iteration 3 a policy error; iteration 4 a call whose completion
held no answer; iteration 5 an unchanged rewrite; iteration 6 one call with two children of #3. A second run
in the same store must not leak into the first's export.
"""

from __future__ import annotations

import io
import json
from typing import Any

import pytest

from evolve.report.export import export_run
from evolve.store.program_store import AttemptInfo, AttemptRecord, ChildRecord, ProgramStore, StoreError

POLICY = "vpo-m4"
COMPLETION2 = "<response_1>\nbad</response_1><response_2>…return 1 → é\u2028\x85</response_2>"


def code(n: int) -> str:
    return f"# EVOLVE-BLOCK-START\ndef f(x):\n    return {n}\n# EVOLVE-BLOCK-END\n"


def child(n: int, parent_id: int | None, vector: tuple[float, float]) -> ChildRecord:
    return ChildRecord(code=code(n), parent_id=parent_id, island=0, policy=POLICY if parent_id else "",
                       edit=f"def f(x):\n    return {n}" if parent_id else "", scores={"a": vector[0], "b": vector[1]},
                       scalar=sum(vector) / 2, solved=min(vector) >= 1)


def call(n: int, completion: str | None = None) -> AttemptRecord:
    return AttemptRecord("policy_call", "stop", prompt=f"<user>\nprompt {n}\n<assistant>\ndef f(x):",
                         completion=completion or f"completion {n}", latency_s=0.5 * n, prompt_tokens=100 + n,
                         completion_tokens=10 * n)


def build_run(store: ProgramStore, name: str = "export-run") -> tuple[int, dict[str, int]]:
    run = store.create_run(name, "pairs", POLICY, 0, "{}", 6)

    def commit(iteration: int, records: list[AttemptRecord | ChildRecord]) -> list[int]:
        return [p.id for p in store.record_iteration(run, iteration, records, policy=POLICY)]

    (seed,) = [p.id for p in store.record_iteration(run, 0, [child(0, None, (0, 0))])]
    (first,) = commit(1, [call(1), child(1, seed, (1, 0))])
    (second,) = commit(2, [
        call(2, COMPLETION2),
        AttemptRecord("edit_failed", "the answer does not parse", completion="bad"),
        AttemptRecord("duplicate", "same code as an earlier program", child_code=code(1)),
        child(3, first, (1, 1)),
        AttemptRecord("eval_failed", "timeout: 10 s", completion="def f(x):\n    while 1: pass",
                      child_code="def f(x):\n    while 1: pass"),
    ])
    commit(3, [AttemptRecord("policy_error", "HTTPStatusError: 500", prompt="<user>\nprompt 3")])
    commit(4, [call(4), AttemptRecord("edit_failed", "no answer in the completion", completion="completion 4")])
    commit(5, [call(5), AttemptRecord("duplicate", "no change", completion="def f(x):\n    return 3")])
    twins = commit(6, [call(6), child(6, second, (0, 1)), child(7, second, (1, 0))])
    return run, {"seed": seed, "first": first, "second": second, "twin_a": twins[0], "twin_b": twins[1]}


@pytest.fixture
def store(store_url: str) -> ProgramStore:
    """On a SQLite file, then on a PostgreSQL database (tests/conftest.py)."""
    return ProgramStore(store_url)


@pytest.fixture
def exported(store: ProgramStore) -> tuple[int, dict[str, int], list[dict[str, Any]], str]:
    run, ids = build_run(store)
    build_run(store, "another run")  # same store, must stay out of the first run's export
    out = io.StringIO()
    count = export_run(store, run, out)
    text = out.getvalue()
    records = [json.loads(line) for line in text.split("\n") if line]
    assert count == len(records)
    return run, ids, records, text


def calls_of(store: ProgramStore, run: int) -> dict[int, AttemptInfo]:
    return {row.iteration: row for row in store.attempts(run) if row.kind == "policy_call"}


def test_one_record_per_answer_outcome_in_commit_order_without_the_seed(exported) -> None:
    run, _, records, text = exported
    assert [(r["iteration"], r["outcome"]) for r in records] == [
        (1, "child"), (2, "edit_failed"), (2, "duplicate"), (2, "child"), (2, "eval_failed"), (3, "policy_error"),
        (4, "edit_failed"), (5, "duplicate"), (6, "child"), (6, "child")]
    assert all(r["run_id"] == run and r["problem"] == "pairs" and r["policy"] == POLICY for r in records)
    assert len(text.splitlines()) == len(records) == 10  # U+2028 and NEL in a completion do not split a line
    assert "→ é" in text  # UTF-8 kept, not \u-escaped
    assert len({r["attempt_id"] for r in records}) == 10


def test_outcomes_of_a_multi_answer_call_link_to_that_call(store: ProgramStore, exported) -> None:
    run, ids, records, _ = exported
    call = calls_of(store, run)[2]
    outcomes = [r for r in records if r["iteration"] == 2]
    assert {r["call_id"] for r in outcomes} == {call.id}
    assert all((r["prompt"], r["completion"], r["finish_reason"]) == (call.prompt, COMPLETION2, "stop")
               for r in outcomes)
    assert all((r["prompt_tokens"], r["completion_tokens"], r["latency_s"]) == (102, 20, 1.0) for r in outcomes)
    edit_failed, duplicate, made, eval_failed = outcomes
    assert (made["child_id"], made["child_code"], made["answer"]) == (ids["second"], code(3), "def f(x):\n    return 3")
    assert (made["child_scores"], made["child_scalar"], made["solved"]) == ({"a": 1, "b": 1}, 1.0, True)
    assert (edit_failed["reason"], edit_failed["answer"], edit_failed["child_code"]) == (
        "the answer does not parse", "bad", None)
    assert (duplicate["answer"], duplicate["child_code"]) == (None, code(1))  # only the built code is stored
    assert (eval_failed["reason"], eval_failed["child_code"]) == ("timeout: 10 s", "def f(x):\n    while 1: pass")
    assert all(r["child_scores"] is None and r["solved"] is None and r["child_id"] is None
               for r in (edit_failed, duplicate, eval_failed))


def test_children_carry_their_parent_and_failures_the_parent_of_their_call(store: ProgramStore, exported) -> None:
    _, ids, records, _ = exported
    first = store.get_program(ids["first"])
    for record in (r for r in records if r["iteration"] == 2):
        source = "program" if record["outcome"] == "child" else "same_call"
        assert (record["parent_id"], record["parent_source"]) == (ids["first"], source)
        assert (record["parent_code"], record["parent_scores"], record["parent_scalar"]) == (
            first.code, {"a": 1, "b": 0}, 0.5)
    assert [(r["parent_id"], r["parent_source"]) for r in records if r["iteration"] in (1, 6)] == [
        (ids["seed"], "program"), (ids["second"], "program"), (ids["second"], "program")]


def test_failures_whose_call_made_no_child_have_no_parent(exported) -> None:
    _, _, records, _ = exported
    for record in (r for r in records if r["iteration"] in (3, 4, 5)):
        assert (record["parent_id"], record["parent_source"], record["parent_code"], record["parent_scores"]) == (
            None, None, None, None)
    no_answer, unchanged = (r for r in records if r["iteration"] in (4, 5))
    assert (no_answer["answer"], no_answer["completion"], no_answer["call_id"] is not None) == (
        "completion 4", "completion 4", True)
    assert (unchanged["outcome"], unchanged["reason"], unchanged["answer"]) == (
        "duplicate", "no change", "def f(x):\n    return 3")


def test_a_policy_error_keeps_its_prompt_and_has_no_call_or_completion(exported) -> None:
    _, _, records, _ = exported
    (error,) = [r for r in records if r["outcome"] == "policy_error"]
    assert (error["call_id"], error["prompt"], error["completion"], error["answer"]) == (
        None, "<user>\nprompt 3", None, None)
    assert (error["reason"], error["completion_tokens"], error["child_code"]) == ("HTTPStatusError: 500", 0, None)


def test_an_empty_run_writes_nothing_and_an_unknown_run_is_a_store_error(store: ProgramStore) -> None:
    run = store.create_run("empty", "pairs", POLICY, 0, "{}", 3)
    store.record_iteration(run, 0, [child(0, None, (0, 0))])
    out = io.StringIO()
    assert export_run(store, run, out) == 0 and out.getvalue() == ""
    with pytest.raises(StoreError, match="no run 42"):
        export_run(store, 42, io.StringIO())


def test_an_export_streamed_in_batches_of_one_row_equals_one_read_whole(
        store: ProgramStore, exported, monkeypatch: pytest.MonkeyPatch) -> None:
    import evolve.store.scans

    run, _, _, whole = exported
    monkeypatch.setattr(evolve.store.scans, "STREAM_BATCH", 1)  # every outcome its own batch: calls, children
    out = io.StringIO()                                           # and parents are read again for each
    export_run(store, run, out)
    assert out.getvalue() == whole
