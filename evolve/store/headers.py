"""Reading a run's programs without loading them all: headers (no code) streamed in commit order for a resume,
and whole programs fetched by id for the few that selection keeps or a report shows."""

from __future__ import annotations

import json
from collections.abc import Iterable, Iterator

from sqlalchemy import case, select
from sqlalchemy.orm import Session

from evolve.records import Program, ProgramHeader, code_key
from evolve.store.rows import program_of, with_scores
from evolve.store.tables import ProgramRow, ScoreRow

STREAM_BATCH = 2000  # rows per fetch while streaming: bounds the memory of a scan, whatever the run's size
IN_BATCH = 500  # ids per IN (...) list, well under every database's bound-parameter limit


def stream_headers(session: Session, run_id: int) -> Iterator[ProgramHeader]:
    """The run's programs oldest first (commit order) as ProgramHeaders, `STREAM_BATCH` rows at a time. Rows written
    before programs.code_key existed carry their code instead, which is hashed here."""
    legacy_code = case((ProgramRow.code_key.is_(None), ProgramRow.code), else_=None)
    query = (select(ProgramRow.id, ProgramRow.parent_id, ProgramRow.island, ProgramRow.iteration, ProgramRow.policy,
                    ProgramRow.code_key, ProgramRow.code_length, legacy_code, ScoreRow.vector_json, ScoreRow.scalar,
                    ScoreRow.solved)
             .join(ScoreRow, ScoreRow.program_id == ProgramRow.id)
             .where(ProgramRow.run_id == run_id).order_by(ProgramRow.id)
             .execution_options(yield_per=STREAM_BATCH))
    for program_id, parent_id, island, iteration, policy, key, length, code, vector, scalar, solved in \
            session.execute(query):
        if key is None or length is None:
            key, length = code_key(code or ""), len(code or "")
        yield ProgramHeader(
            id=program_id, run_id=run_id, code="", parent_id=parent_id, island=island, iteration=iteration,
            policy=policy, edit="", scores={name: float(value) for name, value in json.loads(vector).items()},
            scalar=scalar, solved=solved, code_length=length, code_key=key)


def programs_by_id(session: Session, ids: Iterable[int]) -> dict[int, Program]:
    """The programs with these ids (whole, with code and artifacts); ids not stored are left out."""
    wanted = sorted(set(ids))
    found: dict[int, Program] = {}
    for start in range(0, len(wanted), IN_BATCH):
        query = with_scores().where(ProgramRow.id.in_(wanted[start:start + IN_BATCH]))
        for row, score in session.execute(query):
            found[row.id] = program_of(row, score)
    return found
