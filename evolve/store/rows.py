"""Rows <-> records: an iteration's records written as programs, scores and attempts rows inside the caller's
transaction (ProgramStore.record_iteration and friends), and rows read back as Programs and frozen records."""

from __future__ import annotations

import functools
import json
import math
from collections.abc import Sequence
from dataclasses import fields
from types import UnionType
from typing import Any, TypeVar, Union, get_args, get_origin, get_type_hints

from sqlalchemy import Select, insert, select
from sqlalchemy.orm import Session

from evolve.records import Program, code_key
from evolve.store.records import AttemptInfo, AttemptRecord, CellInfo, ChildRecord, RunInfo
from evolve.store.tables import AttemptRow, Base, DamagedValue, ProgramRow, ScoreRow, damaged_message

FrozenRecord = TypeVar("FrozenRecord", RunInfo, AttemptInfo, CellInfo)


def split_requests(records: Sequence[AttemptRecord | ChildRecord]
              ) -> list[tuple[AttemptRecord | None, list[AttemptRecord | ChildRecord]]]:
    """An iteration's records split into (policy call or None, its outcomes): an outcome belongs to the call
    before it, or to the first call when none precedes it; a policy error belongs to no call and ends the
    outcomes of the call before it."""
    leading: list[AttemptRecord | ChildRecord] = []
    groups: list[tuple[AttemptRecord | None, list[AttemptRecord | ChildRecord]]] = []
    for record in records:
        if isinstance(record, AttemptRecord) and record.kind == "policy_call":
            first_call = not any(call is not None for call, _ in groups)
            groups.append((record, leading if first_call else []))
        elif isinstance(record, AttemptRecord) and record.kind == "policy_error":
            groups.append((None, [record]))  # a failed request: nothing after it belongs to an earlier call
        elif groups:
            groups[-1][1].append(record)
        else:
            leading.append(record)
    if not any(call is not None for call, _ in groups) and leading:
        groups.insert(0, (None, leading))
    return groups


def insert_programs(session: Session, run_id: int, iteration: int, children: Sequence[ChildRecord],
                     completion_id: int | None) -> list[Program]:
    """Program rows, then their score rows (two batched INSERTs), inside the caller's transaction."""
    if not children:
        return []
    program_values = [dict(run_id=run_id, parent_id=child.parent_id, island=child.island, iteration=iteration,
                           policy=child.policy, code=child.code, edit=child.edit, completion_id=completion_id,
                           code_key=code_key(child.code), code_length=len(child.code))
                      for child in children]
    returning = insert(ProgramRow).returning(ProgramRow.id, sort_by_parameter_order=True)
    ids = list(session.scalars(returning, program_values))
    session.execute(insert(ScoreRow), [
        dict(program_id=program_id, run_id=run_id, vector_json=json.dumps(child.scores), scalar=float(child.scalar),
             solved=bool(child.solved), artifacts_json=json.dumps(child.artifacts))
        for program_id, child in zip(ids, children, strict=True)])
    return [Program(id=program_id, run_id=run_id, code=child.code, parent_id=child.parent_id, island=child.island,
                    iteration=iteration, policy=child.policy, edit=child.edit,
                    scores={name: float(value) for name, value in child.scores.items()}, scalar=float(child.scalar),
                    solved=bool(child.solved), artifacts=dict(child.artifacts))
            for program_id, child in zip(ids, children, strict=True)]


def insert_attempt(session: Session, values: dict[str, Any]) -> int:
    return session.scalars(insert(AttemptRow).values(**values).returning(AttemptRow.id)).one()


def attempt_values(run_id: int, iteration: int, record: AttemptRecord, policy: str, call_id: int | None,
             parent_id: int | None = None, run_elapsed_s: float | None = None) -> dict[str, Any]:
    return dict(run_id=run_id, iteration=iteration, kind=record.kind, reason=record.reason, policy=policy,
                prompt=record.prompt, completion=record.completion, child_code=record.child_code, program_id=None,
                call_id=call_id, parent_id=parent_id, latency_s=record.latency_s, prompt_tokens=record.prompt_tokens,
                completion_tokens=record.completion_tokens, run_elapsed_s=run_elapsed_s)


def child_attempt_values(run_id: int, iteration: int, child: ChildRecord, program_id: int, call_id: int | None,
                   policy: str, run_elapsed_s: float | None = None) -> dict[str, Any]:
    return dict(run_id=run_id, iteration=iteration, kind="child", reason=None, policy=policy, prompt=None,
                completion=child.edit, child_code=None, program_id=program_id, call_id=call_id,
                parent_id=child.parent_id, latency_s=0.0, prompt_tokens=0, completion_tokens=0,
                run_elapsed_s=run_elapsed_s)


def with_scores() -> Select[tuple[ProgramRow, ScoreRow]]:
    return select(ProgramRow, ScoreRow).join(ScoreRow, ScoreRow.program_id == ProgramRow.id)


def program_of(row: ProgramRow, score: ScoreRow) -> Program:
    """The Program of a programs row and its scores row; a value of the wrong type is a DamagedValue naming the row
    (the number columns are checked as they are read: tables._Checked)."""
    return Program(
        id=row.id, run_id=row.run_id, code=row.code, parent_id=row.parent_id, island=row.island,
        iteration=row.iteration, policy=row.policy, edit=row.edit,
        scores=score_vector(score.vector_json, row.id), scalar=score.scalar, solved=score.solved,
        artifacts=_artifacts(score.artifacts_json, row.id),
    )


def score_vector(text: str, program_id: int) -> dict[str, float]:
    """A stored score vector (scores.vector_json): a JSON object of finite numbers, in its stored order. The engine
    stores only finite scores, so a NaN or an infinity (JSON's NaN, Infinity, 1e400, an integer past a float) is
    damage too: it would make `show --json` invalid JSON and the rankings meaningless."""
    vector = _json_object(text, "vector_json", program_id)
    if not all(isinstance(value, int | float) and not isinstance(value, bool) for value in vector.values()):
        raise DamagedValue(damaged_message("scores.vector_json", f"row program_id={program_id}", text,
                                           "a JSON object of numbers"))
    if not all(_finite(value) for value in vector.values()):
        raise DamagedValue(damaged_message("scores.vector_json", f"row program_id={program_id}", text,
                                           "a JSON object of finite numbers"))
    return {str(name): float(value) for name, value in vector.items()}


def _finite(value: float) -> bool:
    try:
        return math.isfinite(value)
    except OverflowError:  # an integer past the largest float
        return False


def _artifacts(text: str, program_id: int) -> dict[str, Any]:
    return _json_object(text, "artifacts_json", program_id)


def _json_object(text: str, column: str, program_id: int) -> dict[str, Any]:
    try:
        value = json.loads(text)
    except (TypeError, ValueError):
        value = None
    if not isinstance(value, dict):
        raise DamagedValue(damaged_message(f"scores.{column}", f"row program_id={program_id}", text,
                                           "a JSON object"))
    return value


def frozen(record_type: type[FrozenRecord], row: Base) -> FrozenRecord:
    """The frozen dataclass of a row: its fields are read off the row by name, each checked to be of its field's type
    (DamagedValue, which a read session turns into one line, for a damaged or hand-edited SQLite row)."""
    values = {}
    for name, kinds in _field_kinds(record_type):
        value = getattr(row, name)
        if not isinstance(value, kinds) or (isinstance(value, bool) and bool not in kinds):
            raise DamagedValue(f"{row.__tablename__}.{name} of row {getattr(row, 'id', '?')} is damaged: "
                               f"{str(value)[:80]!r} is not {' or '.join(kind.__name__ for kind in kinds)}")
        values[name] = value
    return record_type(**values)


@functools.cache
def _field_kinds(record_type: type) -> tuple[tuple[str, tuple[type, ...]], ...]:
    """(field name, the types its value may have) of a record dataclass: a float field takes an int, `X | None` None."""
    hints = get_type_hints(record_type)
    kinds = []
    for item in fields(record_type):
        hint = hints[item.name]
        members = get_args(hint) if get_origin(hint) in (Union, UnionType) else (hint,)
        allowed = tuple(int if member is float else member for member in members) + \
            ((float,) if float in members else ())
        kinds.append((item.name, allowed))
    return tuple(kinds)
