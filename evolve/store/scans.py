"""Reads that stream a run instead of loading it: program headers (no code) in commit order for a resume, whole
programs fetched by id for the few that selection keeps or a report shows, and attempt totals without the prompts
and completions."""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from dataclasses import fields

from sqlalchemy import case, func, literal, select
from sqlalchemy.orm import Session, aliased

from evolve.records import Program, ProgramHeader, code_key
from evolve.store.records import TERMINAL_KINDS, AttemptInfo, AttemptTotals
from evolve.store.rows import frozen, program_of, score_vector, with_scores
from evolve.store.tables import AttemptRow, ProgramRow, ScoreRow

STREAM_BATCH = 2000  # rows per fetch while streaming: bounds the memory of a scan, whatever the run's size
IN_BATCH = 500  # ids per IN (...) list, well under every database's bound-parameter limit


def stream_headers(session: Session, run_id: int, with_scores: bool = True) -> Iterator[ProgramHeader]:
    """The run's programs oldest first (commit order) as ProgramHeaders, `STREAM_BATCH` rows at a time; without
    `with_scores` their score vectors are left unread ({}), for a reader that ranks by scalar alone. Rows written
    before programs.code_key existed carry their code instead, which is hashed here."""
    legacy_code = case((ProgramRow.code_key.is_(None) | ProgramRow.code_length.is_(None), ProgramRow.code),
                       else_=None)
    vector = ScoreRow.vector_json if with_scores else literal("{}")
    query = (select(ProgramRow.id, ProgramRow.parent_id, ProgramRow.island, ProgramRow.iteration, ProgramRow.policy,
                    ProgramRow.code_key, ProgramRow.code_length, legacy_code, vector, ScoreRow.scalar,
                    ScoreRow.solved)
             .join(ScoreRow, ScoreRow.program_id == ProgramRow.id)
             .where(ProgramRow.run_id == run_id).order_by(ProgramRow.id)
             .execution_options(yield_per=STREAM_BATCH))
    for program_id, parent_id, island, iteration, policy, key, length, code, vector_json, scalar, solved in \
            session.connection().execute(query):  # Core rows: the ORM's row loading costs a third of the scan
        if key is None or length is None:
            key, length = code_key(code or ""), len(code or "")
        scores = score_vector(vector_json, program_id) if with_scores else {}
        yield ProgramHeader(
            id=program_id, run_id=run_id, code="", parent_id=parent_id, island=island, iteration=iteration,
            policy=policy, edit="", scores=scores, scalar=scalar, solved=solved, code_length=length, code_key=key)


def programs_by_id(session: Session, ids: Iterable[int]) -> dict[int, Program]:
    """The programs with these ids (whole, with code and artifacts); ids not stored are left out."""
    wanted = sorted(set(ids))
    found: dict[int, Program] = {}
    for start in range(0, len(wanted), IN_BATCH):
        query = with_scores().where(ProgramRow.id.in_(wanted[start:start + IN_BATCH]))
        for row, score in session.execute(query):
            found[row.id] = program_of(row, score)
    return found


def attempt_totals(session: Session, run_id: int) -> AttemptTotals:
    """The run's calls, tokens, latencies and outcomes, from its attempts rows streamed in write order (the sums
    are taken in that order, as a list of AttemptInfos would give them)."""
    query = (select(AttemptRow.kind, AttemptRow.iteration, AttemptRow.latency_s, AttemptRow.prompt_tokens,
                    AttemptRow.completion_tokens)
             .where(AttemptRow.run_id == run_id).order_by(AttemptRow.id).execution_options(yield_per=STREAM_BATCH))
    latencies: list[float] = []
    prompt_tokens = completion_tokens = 0
    outcomes = {kind: 0 for kind in TERMINAL_KINDS}
    with_child: set[int] = set()
    for kind, iteration, latency_s, prompt, completion in session.connection().execute(query):
        if kind == "policy_call":
            latencies.append(latency_s)
            prompt_tokens += prompt
            completion_tokens += completion
        elif kind in outcomes and iteration > 0:
            outcomes[kind] += 1
            if kind == "child":
                with_child.add(iteration)
    return AttemptTotals(policy_calls=len(latencies), prompt_tokens=prompt_tokens, completion_tokens=completion_tokens,
                         generation_s=sum(latencies), outcomes=outcomes, iterations_with_child=len(with_child))


def ancestor_ids(session: Session, run_id: int, program_id: int) -> set[int]:
    """`program_id` and its ancestors (parent, parent's parent, ...) that belong to run `run_id`: one recursive
    query; UNION (not UNION ALL) ends it on a cycle."""
    chain = select(ProgramRow.id, ProgramRow.parent_id).where(ProgramRow.id == program_id,
                                                              ProgramRow.run_id == run_id).cte(recursive=True)
    chain = chain.union(select(ProgramRow.id, ProgramRow.parent_id)
                        .where(ProgramRow.id == chain.c.parent_id, ProgramRow.run_id == run_id))
    return set(session.scalars(select(chain.c.id)))


def call_completions(session: Session, run_id: int, program_ids: Iterable[int]) -> dict[int, str]:
    """program id -> the completion text of the policy call its 'child' attempt points at ("" for none stored),
    for these programs of the run."""
    call = aliased(AttemptRow)
    found: dict[int, str] = {}
    wanted = sorted(set(program_ids))
    for start in range(0, len(wanted), IN_BATCH):
        query = (select(AttemptRow.program_id, call.completion)
                 .join(call, call.id == AttemptRow.call_id)
                 .where(AttemptRow.run_id == run_id, AttemptRow.kind == "child",
                        AttemptRow.program_id.in_(wanted[start:start + IN_BATCH]),
                        call.run_id == run_id, call.kind == "policy_call")
                 .order_by(AttemptRow.id))
        found.update({program_id: completion or "" for program_id, completion in session.execute(query)})
    return found


def stream_outcomes(session: Session, run_id: int) -> Iterator[list[AttemptInfo]]:
    """The run's answer outcomes after the seed (TERMINAL_KINDS rows of iterations >= 1) in write order, in batches
    of up to `STREAM_BATCH` rows."""
    query = (select(*(getattr(AttemptRow, item.name) for item in fields(AttemptInfo)))
             .where(AttemptRow.run_id == run_id, AttemptRow.kind.in_(TERMINAL_KINDS), AttemptRow.iteration > 0)
             .order_by(AttemptRow.id).execution_options(yield_per=STREAM_BATCH))
    for rows in session.connection().execute(query).partitions():
        yield [AttemptInfo(*row) for row in rows]


def policy_calls_by_id(session: Session, run_id: int, ids: Iterable[int]) -> dict[int, AttemptInfo]:
    """The run's policy-call rows with these ids."""
    wanted = sorted(set(ids))
    found: dict[int, AttemptInfo] = {}
    for start in range(0, len(wanted), IN_BATCH):
        query = select(AttemptRow).where(AttemptRow.run_id == run_id, AttemptRow.kind == "policy_call",
                                         AttemptRow.id.in_(wanted[start:start + IN_BATCH]))
        found.update({row.id: frozen(AttemptInfo, row) for row in session.scalars(query)})
    return found


def parents_by_call(session: Session, run_id: int) -> dict[int, int]:
    """call id -> the parent its children were edited from, for calls whose children (of iterations >= 1) agree on
    one parent and none of which lacks a parent: the parent of that call's failed answers in stores written before
    attempts.parent_id (the controller edits one parent per call)."""
    query = (select(AttemptRow.call_id, ProgramRow.parent_id)
             .join(ProgramRow, ProgramRow.id == AttemptRow.program_id)
             .where(AttemptRow.run_id == run_id, AttemptRow.kind == "child", AttemptRow.iteration > 0,
                    AttemptRow.call_id.is_not(None), ProgramRow.run_id == run_id)
             .execution_options(yield_per=STREAM_BATCH))
    seen: dict[int, set[int]] = {}
    rootless: set[int] = set()  # calls with a child that has no parent (not made by the controller)
    for call_id, parent_id in session.execute(query):
        if parent_id is None:
            rootless.add(call_id)
        else:
            seen.setdefault(call_id, set()).add(parent_id)
    return {call_id: min(parents) for call_id, parents in seen.items() if len(parents) == 1 and call_id not in rootless}


def commit_order(session: Session, run_id: int) -> list[int]:
    """The run's iterations in the order they were committed: each iteration is one transaction, so the order of
    their first attempts rows."""
    query = (select(AttemptRow.iteration).where(AttemptRow.run_id == run_id)
             .group_by(AttemptRow.iteration).order_by(func.min(AttemptRow.id)))
    return list(session.scalars(query))


def commit_replay(headers: Iterable[ProgramHeader], order: list[int]) -> Iterator[ProgramHeader | int]:
    """The run as its driver lived it: each program (in id order), and after the programs of each committed
    iteration that iteration's number (when the controller migrated). Programs of an iteration with no attempts
    row (written by add_program) come where their ids put them."""
    position = {iteration: index for index, iteration in enumerate(order)}
    announced = 0  # order[:announced] have been yielded
    for header in headers:
        index = position.get(header.iteration)
        if index is not None:
            while announced < index:  # iterations committed before this program's
                yield order[announced]
                announced += 1
        yield header
    yield from order[announced:]
