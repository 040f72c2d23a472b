"""The program store: SQLAlchemy tables for runs, programs, score vectors and attempts, and their queries.

The store is the single source of truth. Every iteration's records (its policy call, each child
with its score, each failure with its reason) commit in one transaction, so a kill at any instant
loses only the iterations in flight, and a resume sees whole iterations or none.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from sqlalchemy import (
    JSON,
    Boolean,
    DateTime,
    Float,
    ForeignKey,
    Index,
    Integer,
    String,
    Text,
    create_engine,
    event,
    func,
    select,
)
from sqlalchemy.orm import DeclarativeBase, Mapped, Session, mapped_column, relationship, sessionmaker

from evolve.records import Program

TERMINAL_KINDS = ("child", "policy_error", "edit_failed", "duplicate", "eval_failed")


class StoreError(Exception):
    """A store problem the user can act on (unknown run, unreachable database)."""


def _now() -> datetime:
    return datetime.now(UTC)


class Base(DeclarativeBase):
    pass


class RunRow(Base):
    __tablename__ = "runs"
    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    name: Mapped[str] = mapped_column(String(200))
    problem: Mapped[str] = mapped_column(String(200), index=True)
    policy: Mapped[str] = mapped_column(String(200), index=True)
    seed: Mapped[int] = mapped_column(Integer)
    config_json: Mapped[str] = mapped_column(Text)
    status: Mapped[str] = mapped_column(String(20), default="running")
    iterations_target: Mapped[int] = mapped_column(Integer)
    created_at: Mapped[datetime] = mapped_column(DateTime(timezone=True), default=_now)
    updated_at: Mapped[datetime] = mapped_column(DateTime(timezone=True), default=_now, onupdate=_now)


class AttemptRow(Base):
    __tablename__ = "attempts"
    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    run_id: Mapped[int] = mapped_column(ForeignKey("runs.id"), index=True)
    iteration: Mapped[int] = mapped_column(Integer)
    kind: Mapped[str] = mapped_column(String(20))
    reason: Mapped[str | None] = mapped_column(Text, nullable=True)
    policy: Mapped[str] = mapped_column(String(200), default="")
    prompt: Mapped[str | None] = mapped_column(Text, nullable=True)
    completion: Mapped[str | None] = mapped_column(Text, nullable=True)
    child_code: Mapped[str | None] = mapped_column(Text, nullable=True)
    program_id: Mapped[int | None] = mapped_column(ForeignKey("programs.id"), nullable=True)
    call_id: Mapped[int | None] = mapped_column(ForeignKey("attempts.id"), nullable=True)
    latency_s: Mapped[float] = mapped_column(Float, default=0.0)
    prompt_tokens: Mapped[int] = mapped_column(Integer, default=0)
    completion_tokens: Mapped[int] = mapped_column(Integer, default=0)
    created_at: Mapped[datetime] = mapped_column(DateTime(timezone=True), default=_now)
    __table_args__ = (Index("ix_attempts_run_iteration", "run_id", "iteration"),)


class ProgramRow(Base):
    __tablename__ = "programs"
    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    run_id: Mapped[int] = mapped_column(ForeignKey("runs.id"), index=True)
    parent_id: Mapped[int | None] = mapped_column(ForeignKey("programs.id"), nullable=True, index=True)
    island: Mapped[int] = mapped_column(Integer)
    iteration: Mapped[int] = mapped_column(Integer)
    policy: Mapped[str] = mapped_column(String(200), default="")
    code: Mapped[str] = mapped_column(Text)
    edit: Mapped[str] = mapped_column(Text, default="")
    completion_id: Mapped[int | None] = mapped_column(ForeignKey("attempts.id"), nullable=True)
    created_at: Mapped[datetime] = mapped_column(DateTime(timezone=True), default=_now)
    score: Mapped[ScoreRow] = relationship(back_populates="program", lazy="joined", uselist=False)


class ScoreRow(Base):
    __tablename__ = "scores"
    program_id: Mapped[int] = mapped_column(ForeignKey("programs.id"), primary_key=True)
    run_id: Mapped[int] = mapped_column(ForeignKey("runs.id"))
    vector: Mapped[dict[str, float]] = mapped_column(JSON)
    objectives: Mapped[list[str]] = mapped_column(JSON)  # key order, which JSON objects may not keep
    scalar: Mapped[float] = mapped_column(Float)
    solved: Mapped[bool] = mapped_column(Boolean)
    artifacts: Mapped[dict[str, str]] = mapped_column(JSON, default=dict)
    program: Mapped[ProgramRow] = relationship(back_populates="score")
    __table_args__ = (
        Index("ix_scores_run_scalar", "run_id", "scalar"),
        Index("ix_scores_run_solved", "run_id", "solved"),
    )


@dataclass(frozen=True)
class RunInfo:
    id: int
    name: str
    problem: str
    policy: str
    seed: int
    config_json: str
    status: str
    iterations_target: int
    created_at: datetime


@dataclass(frozen=True)
class AttemptRecord:
    """One attempt row: a policy call, or an outcome that did not become a stored program."""

    kind: str
    reason: str | None = None
    prompt: str | None = None
    completion: str | None = None
    child_code: str | None = None
    latency_s: float = 0.0
    prompt_tokens: int = 0
    completion_tokens: int = 0


@dataclass(frozen=True)
class ChildRecord:
    """A scored program to store, with its 'child' attempt."""

    code: str
    parent_id: int | None
    island: int
    policy: str
    edit: str
    scores: dict[str, float]
    scalar: float
    solved: bool
    artifacts: dict[str, str] = field(default_factory=dict)
    kind: str = "child"


def database_url(url_or_path: str) -> str:
    return url_or_path if "://" in url_or_path else f"sqlite:///{url_or_path}"


def _to_program(row: ProgramRow) -> Program:
    score = row.score
    order = score.objectives or list(score.vector)
    return Program(
        id=row.id, run_id=row.run_id, code=row.code, parent_id=row.parent_id, island=row.island,
        iteration=row.iteration, policy=row.policy, edit=row.edit,
        scores={name: float(score.vector[name]) for name in order}, scalar=score.scalar,
        solved=score.solved, artifacts=dict(score.artifacts or {}),
    )


class ProgramStore:
    """Synchronous store over any SQLAlchemy URL; SQLite files get WAL mode and a busy timeout."""

    def __init__(self, url_or_path: str) -> None:
        self.url = database_url(url_or_path)
        try:
            self.engine = create_engine(self.url)
            if self.engine.dialect.name == "sqlite":
                event.listen(self.engine, "connect", _sqlite_pragmas)
            Base.metadata.create_all(self.engine)
        except Exception as exc:
            raise StoreError(f"cannot open the store {url_or_path}: {exc}".splitlines()[0]) from exc
        self._sessions = sessionmaker(self.engine, expire_on_commit=False)

    def _session(self) -> Session:
        return self._sessions()

    def create_run(self, name: str, problem: str, policy: str, seed: int, config_json: str,
                   iterations_target: int) -> int:
        with self._session() as session, session.begin():
            row = RunRow(name=name, problem=problem, policy=policy, seed=seed, config_json=config_json,
                         iterations_target=iterations_target, status="running")
            session.add(row)
            session.flush()
            return row.id

    def get_run(self, run_id: int) -> RunInfo:
        with self._session() as session:
            row = session.get(RunRow, run_id)
            if row is None:
                raise StoreError(f"no run {run_id} in {self.url}")
            return _run_info(row)

    def list_runs(self) -> list[RunInfo]:
        with self._session() as session:
            return [_run_info(row) for row in session.scalars(select(RunRow).order_by(RunRow.id))]

    def set_run_status(self, run_id: int, status: str) -> None:
        with self._session() as session, session.begin():
            row = session.get(RunRow, run_id)
            if row is None:
                raise StoreError(f"no run {run_id} in {self.url}")
            row.status = status

    def record_iteration(self, run_id: int, iteration: int,
                         records: list[AttemptRecord | ChildRecord], policy: str = "") -> list[Program]:
        """Write one iteration's records in one transaction; returns the stored children as Programs."""
        with self._session() as session, session.begin():
            call_id: int | None = None
            children: list[ProgramRow] = []
            for record in records:
                if isinstance(record, ChildRecord):
                    program = ProgramRow(run_id=run_id, parent_id=record.parent_id, island=record.island,
                                         iteration=iteration, policy=record.policy, code=record.code,
                                         edit=record.edit, completion_id=call_id)
                    program.score = ScoreRow(run_id=run_id, vector=dict(record.scores),
                                             objectives=list(record.scores), scalar=record.scalar,
                                             solved=record.solved, artifacts=dict(record.artifacts))
                    session.add(program)
                    session.flush()
                    session.add(AttemptRow(run_id=run_id, iteration=iteration, kind="child", policy=record.policy,
                                           program_id=program.id, call_id=call_id, completion=record.edit))
                    children.append(program)
                    continue
                row = AttemptRow(run_id=run_id, iteration=iteration, kind=record.kind, reason=record.reason,
                                 policy=policy, prompt=record.prompt, completion=record.completion,
                                 child_code=record.child_code, latency_s=record.latency_s,
                                 prompt_tokens=record.prompt_tokens, completion_tokens=record.completion_tokens,
                                 call_id=None if record.kind == "policy_call" else call_id)
                session.add(row)
                if record.kind == "policy_call":
                    session.flush()
                    call_id = row.id
            session.flush()
            return [_to_program(program) for program in children]

    def programs(self, run_id: int) -> list[Program]:
        with self._session() as session:
            rows = session.scalars(select(ProgramRow).where(ProgramRow.run_id == run_id).order_by(ProgramRow.id))
            return [_to_program(row) for row in rows.unique()]

    def get_program(self, program_id: int) -> Program:
        with self._session() as session:
            row = session.get(ProgramRow, program_id)
            if row is None:
                raise StoreError(f"no program {program_id}")
            return _to_program(row)

    def best_programs(self, run_id: int, k: int) -> list[Program]:
        with self._session() as session:
            ids = session.scalars(select(ScoreRow.program_id).where(ScoreRow.run_id == run_id)
                                  .order_by(ScoreRow.scalar.desc(), ScoreRow.program_id).limit(k)).all()
            return [_to_program(session.get(ProgramRow, program_id)) for program_id in ids]

    def first_solved(self, run_id: int) -> Program | None:
        with self._session() as session:
            row = session.scalars(select(ProgramRow).join(ScoreRow).where(ScoreRow.run_id == run_id,
                                  ScoreRow.solved.is_(True)).order_by(ProgramRow.iteration, ProgramRow.id)
                                  .limit(1)).first()
            return _to_program(row) if row else None

    def completed_iterations(self, run_id: int) -> set[int]:
        with self._session() as session:
            rows = session.scalars(select(AttemptRow.iteration).distinct().where(
                AttemptRow.run_id == run_id, AttemptRow.kind.in_(TERMINAL_KINDS)))
            return set(rows)

    def count_programs(self, run_id: int) -> int:
        with self._session() as session:
            return session.scalar(select(func.count()).select_from(ProgramRow).where(ProgramRow.run_id == run_id)) or 0

    def failure_counts(self, run_id: int) -> dict[str, int]:
        with self._session() as session:
            rows = session.execute(select(AttemptRow.kind, AttemptRow.reason).where(
                AttemptRow.run_id == run_id, AttemptRow.kind.in_(("policy_error", "edit_failed", "duplicate",
                                                                   "eval_failed"))))
            return dict(Counter(f"{kind}: {(reason or '').split(':')[0]}" for kind, reason in rows))

    def attempts(self, run_id: int) -> list[dict[str, Any]]:
        with self._session() as session:
            rows = session.scalars(select(AttemptRow).where(AttemptRow.run_id == run_id).order_by(AttemptRow.id))
            return [{column.name: getattr(row, column.name) for column in AttemptRow.__table__.columns}
                    for row in rows]


def _run_info(row: RunRow) -> RunInfo:
    return RunInfo(id=row.id, name=row.name, problem=row.problem, policy=row.policy, seed=row.seed,
                   config_json=row.config_json, status=row.status, iterations_target=row.iterations_target,
                   created_at=row.created_at)


def _sqlite_pragmas(connection: Any, _record: Any) -> None:
    cursor = connection.cursor()
    cursor.execute("PRAGMA journal_mode=WAL")
    cursor.execute("PRAGMA synchronous=NORMAL")
    cursor.execute("PRAGMA busy_timeout=10000")
    cursor.execute("PRAGMA foreign_keys=ON")
    cursor.close()


__all__ = ["AttemptRecord", "ChildRecord", "ProgramStore", "RunInfo", "StoreError", "TERMINAL_KINDS"]
