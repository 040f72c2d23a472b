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
from evolve.store.program_store import TERMINAL_KINDS, AttemptInfo, ProgramStore

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
    """The run's answer outcomes in commit order (StoreError, one line, for an unknown run)."""
    run = store.get_run(run_id)
    programs = {program.id: program for program in store.programs(run_id)}
    attempts = store.attempts(run_id)
    calls = {row.id: row for row in attempts if row.kind == "policy_call"}
    outcomes = [row for row in attempts if row.kind in TERMINAL_KINDS and row.iteration > 0]
    call_parents = parents_by_call(outcomes, programs)
    for row in outcomes:
        call = calls.get(row.call_id) if row.call_id is not None else None
        child = programs.get(row.program_id) if row.kind == "child" and row.program_id is not None else None
        if child is not None:
            parent_id, source = child.parent_id, "program" if child.parent_id is not None else None
        elif row.parent_id is not None:  # stores since attempts.parent_id: every outcome knows its parent
            parent_id, source = row.parent_id, "attempt"
        else:
            parent_id = call_parents.get(row.call_id) if row.call_id is not None else None
            source = "same_call" if parent_id is not None else None
        parent = programs.get(parent_id) if parent_id is not None else None
        source_call = call or row  # a policy error keeps its prompt on its own row
        yield ExportRecord(
            run_id=run_id, problem=run.problem, policy=row.policy or run.policy, iteration=row.iteration,
            attempt_id=row.id, call_id=call.id if call else None, outcome=row.kind, reason=row.reason,
            parent_id=parent_id, parent_source=source, parent_code=parent.code if parent else None,
            parent_scores=dict(parent.scores) if parent else None, parent_scalar=parent.scalar if parent else None,
            prompt=source_call.prompt, completion=call.completion if call else None,
            finish_reason=call.reason if call else None, answer=_answer(row, child),
            child_id=child.id if child else None, child_code=child.code if child else row.child_code,
            child_scores=dict(child.scores) if child else None, child_scalar=child.scalar if child else None,
            solved=child.solved if child else None, prompt_tokens=call.prompt_tokens if call else 0,
            completion_tokens=call.completion_tokens if call else 0, latency_s=call.latency_s if call else 0.0)


def parents_by_call(outcomes: list[AttemptInfo], programs: dict[int, Program]) -> dict[int, int]:
    """call id -> the parent its children were edited from, for calls with children that agree on one parent.

    The controller edits one parent per policy call, so this is the parent of that call's failed answers too.
    A parent_id column on attempts rows (written by record_iteration) would make this exact for every call."""
    seen: dict[int, set[int]] = {}
    rootless: set[int] = set()  # calls with a child that has no parent (not made by the controller)
    for row in outcomes:
        program = programs.get(row.program_id) if row.kind == "child" and row.program_id is not None else None
        if program is not None and row.call_id is not None:
            if program.parent_id is None:
                rootless.add(row.call_id)
            else:
                seen.setdefault(row.call_id, set()).add(program.parent_id)
    return {call_id: min(parents) for call_id, parents in seen.items() if len(parents) == 1 and call_id not in rootless}


def _answer(row: AttemptInfo, child: Program | None) -> str | None:
    if child is not None:
        return child.edit
    return row.completion if row.kind != "policy_error" else None
