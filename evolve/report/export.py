"""A run as JSONL for RL training: one record per answer outcome, with its parent, prompt, completion and child.

Every outcome the controller committed after the seed becomes one line: a child, an eval failure, an edit
failure, a duplicate, or a policy error. Outcomes of one policy call (a completion with m answers gives up to m
outcomes) share `call_id` and carry that call's prompt and whole completion; `answer` is the outcome's own
answer text. The seed program (iteration 0) is not an answer and is not exported.

What the store does not hold, the record leaves null rather than guess:
- the parent of a failed outcome: attempts rows record it (`parent_source` "attempt"); in stores written before
  attempts.parent_id existed, a failure whose call also produced a child gets that child's parent (one call
  edits one parent; `parent_source` "same_call"), and other failures have `parent_id` null.
- the answer text of a duplicate refused as "same code as an earlier program" (only its built code is kept),
  and the position of an answer inside its completion (outcomes are stored in commit order: edit failures and
  duplicates first, then evaluated answers).
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from dataclasses import asdict, dataclass
from typing import TextIO

from evolve.records import Program
from evolve.store.program_store import AttemptInfo, ProgramStore, RunInfo

_LINE_BREAKS = {ord(c): f"\\u{ord(c):04x}" for c in "\x85\u2028\u2029"}  # json leaves these raw


@dataclass(frozen=True)
class ExportRecord:
    """One answer outcome, written as one JSON object (fields in this order)."""

    run_id: int
    problem: str
    policy: str
    iteration: int
    attempt_id: int  # this outcome's attempts row
    call_id: int | None  # the policy call it came from; null for a policy error (its call returned nothing)
    outcome: str  # 'child', 'eval_failed', 'edit_failed', 'duplicate' or 'policy_error'
    reason: str | None  # why it failed (null for a child)
    parent_id: int | None
    parent_source: str | None  # 'program' (a child's own), 'attempt' (recorded), 'same_call' (older stores), null
    parent_code: str | None
    parent_scores: dict[str, float] | None
    parent_scalar: float | None
    prompt: str | None  # the whole prompt, ending with the prefill the completion continues
    completion: str | None  # the call's whole completion (all its answers); null for a policy error
    finish_reason: str | None  # the call's finish reason, as the backend gave it
    answer: str | None  # this outcome's answer text (for edit failures with no answer, the whole completion)
    child_id: int | None  # the stored program, for a child
    child_code: str | None  # a child's code, or the built code of a duplicate or a failed evaluation
    child_scores: dict[str, float] | None  # null unless the outcome is a child
    child_scalar: float | None
    solved: bool | None
    prompt_tokens: int  # of the call (shared by its outcomes)
    completion_tokens: int
    latency_s: float


def export_run(store: ProgramStore, run_id: int, out: TextIO) -> int:
    """Write every answer outcome of the run to `out`, one JSON object per line; returns the number written."""
    count = 0
    for record in export_records(store, run_id):
        out.write(json_line(asdict(record)))
        count += 1
    return count


def json_line(data: dict[str, object]) -> str:
    """One JSON object on one line, UTF-8 kept; the separators str.splitlines() breaks on are escaped too."""
    text = json.dumps(data, ensure_ascii=False)
    return text.translate(_LINE_BREAKS) + "\n"


def export_records(store: ProgramStore, run_id: int) -> Iterator[ExportRecord]:
    """The run's answer outcomes in commit order (StoreError, one line, for an unknown run). Streamed: outcomes are
    read a batch at a time with just the calls and programs (children, parents) that batch names."""
    run = store.get_run(run_id)
    call_parents: dict[int, int] | None = None  # read on first need: only stores from before attempts.parent_id
    for outcomes in store.outcome_batches(run_id):
        calls = store.policy_calls_by_id(run_id, {row.call_id for row in outcomes if row.call_id is not None})
        programs = _run_programs(store, run_id, {row.program_id for row in outcomes
                                                 if row.kind == "child" and row.program_id is not None})
        parents: list[tuple[int | None, str | None]] = []
        for row in outcomes:
            child = programs.get(row.program_id) if row.kind == "child" and row.program_id is not None else None
            if child is not None:
                parents.append((child.parent_id, "program" if child.parent_id is not None else None))
            elif row.parent_id is not None:  # stores since attempts.parent_id: every outcome knows its parent
                parents.append((row.parent_id, "attempt"))
            elif row.call_id is not None:
                call_parents = store.parents_by_call(run_id) if call_parents is None else call_parents
                parent_id = call_parents.get(row.call_id)
                parents.append((parent_id, "same_call" if parent_id is not None else None))
            else:
                parents.append((None, None))
        programs |= _run_programs(store, run_id, {parent_id for parent_id, _ in parents if parent_id is not None}
                                  - programs.keys())
        for row, (parent_id, source) in zip(outcomes, parents, strict=True):
            child = programs.get(row.program_id) if row.kind == "child" and row.program_id is not None else None
            yield _record(run, row, calls.get(row.call_id) if row.call_id is not None else None, child,
                          programs.get(parent_id) if parent_id is not None else None, parent_id, source)


def _run_programs(store: ProgramStore, run_id: int, ids: set[int]) -> dict[int, Program]:
    """The programs of the run with these ids (a program of another run is not this run's parent or child)."""
    return {program_id: program for program_id, program in store.programs_by_id(ids).items()
            if program.run_id == run_id}


def _record(run: RunInfo, row: AttemptInfo, call: AttemptInfo | None, child: Program | None, parent: Program | None,
            parent_id: int | None, source: str | None) -> ExportRecord:
    source_call = call or row  # a policy error keeps its prompt on its own row
    return ExportRecord(
        run_id=run.id, problem=run.problem, policy=row.policy or run.policy, iteration=row.iteration,
        attempt_id=row.id, call_id=call.id if call else None, outcome=row.kind, reason=row.reason,
        parent_id=parent_id, parent_source=source, parent_code=parent.code if parent else None,
        parent_scores=dict(parent.scores) if parent else None, parent_scalar=parent.scalar if parent else None,
        prompt=source_call.prompt, completion=call.completion if call else None,
        finish_reason=call.reason if call else None, answer=_answer(row, child),
        child_id=child.id if child else None, child_code=child.code if child else row.child_code,
        child_scores=dict(child.scores) if child else None, child_scalar=child.scalar if child else None,
        solved=child.solved if child else None, prompt_tokens=call.prompt_tokens if call else 0,
        completion_tokens=call.completion_tokens if call else 0, latency_s=call.latency_s if call else 0.0)


def _answer(row: AttemptInfo, child: Program | None) -> str | None:
    if child is not None:
        return child.edit
    return row.completion if row.kind != "policy_error" else None
