"""The store's SQL tables (SQLAlchemy 2 declarative rows and indexes); program_store.py reads and writes them.

Tables: runs, programs, scores, attempts (see program_store.py), experiments + experiment_cells, which tie
the runs of one `evolve experiment` to their cell (problem, policy, seed), and run_leases, which say which process
drives a run (lease.py).
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import UTC, datetime
from typing import Any

from sqlalchemy import (
    BigInteger,
    DateTime,
    Dialect,
    Engine,
    ForeignKey,
    Index,
    String,
    Text,
    TypeDecorator,
    inspect,
    text,
)
from sqlalchemy.orm import DeclarativeBase, Mapped, mapped_column


class DamagedValue(ValueError):
    """A stored value that is not of its column's type (a time that is not a time, in a damaged or hand-edited SQLite
    file); a read session turns it into one StoreError line."""


class _UtcDateTime(TypeDecorator[datetime]):
    """Stores naive UTC (SQLite keeps no zone) and reads back aware UTC datetimes."""

    impl = DateTime
    cache_ok = True

    def result_processor(self, dialect: Dialect, coltype: object) -> Callable[[Any], datetime | None] | None:
        process = super().result_processor(dialect, coltype)
        if process is None:
            return None

        def checked(value: Any) -> datetime | None:
            try:
                return process(value)  # type: ignore[no-any-return]
            except (ValueError, TypeError) as exc:  # SQLite's text that is no ISO time
                raise DamagedValue(f"a stored time is damaged: {str(value)[:80]!r} is not a time") from exc

        return checked

    def process_bind_param(self, value: datetime | None, dialect: Dialect) -> datetime | None:
        return value.astimezone(UTC).replace(tzinfo=None) if value is not None else None

    def process_result_value(self, value: datetime | None, dialect: Dialect) -> datetime | None:
        return value.replace(tzinfo=UTC) if value is not None and value.tzinfo is None else value


class _StoreText(TypeDecorator[str]):
    """Text. PostgreSQL's text cannot hold a NUL character (SQLite's can), and a completion or an evaluator's stderr
    may carry one: there it is written as U+FFFD instead of failing the iteration's write."""

    impl = Text
    cache_ok = True

    def process_bind_param(self, value: str | None, dialect: Dialect) -> str | None:
        if value is not None and dialect.name == "postgresql" and "\x00" in value:
            return value.replace("\x00", "\ufffd")
        return value


def utc_now() -> datetime:
    return datetime.now(UTC)


class Base(DeclarativeBase):
    type_annotation_map = {datetime: _UtcDateTime, str: _StoreText}


class RunRow(Base):
    __tablename__ = "runs"
    id: Mapped[int] = mapped_column(primary_key=True)
    name: Mapped[str]
    problem: Mapped[str] = mapped_column(String(200))
    policy: Mapped[str] = mapped_column(String(200))
    seed: Mapped[int] = mapped_column(BigInteger)  # up to 2**63 - 1 (config.MAX_SEED): int4 holds 2**31 - 1
    config_json: Mapped[str]
    status: Mapped[str] = mapped_column(String(20))
    iterations_target: Mapped[int]
    created_at: Mapped[datetime] = mapped_column(default=utc_now)
    updated_at: Mapped[datetime] = mapped_column(default=utc_now, onupdate=utc_now)


class ProgramRow(Base):
    __tablename__ = "programs"
    id: Mapped[int] = mapped_column(primary_key=True)
    run_id: Mapped[int] = mapped_column(ForeignKey("runs.id"), index=True)
    parent_id: Mapped[int | None] = mapped_column(ForeignKey("programs.id"))
    island: Mapped[int]
    iteration: Mapped[int]
    policy: Mapped[str] = mapped_column(String(200))
    code: Mapped[str]
    edit: Mapped[str]
    # programs <-> attempts reference each other; use_alter lets other databases add this key after both exist
    completion_id: Mapped[int | None] = mapped_column(ForeignKey("attempts.id", use_alter=True))
    created_at: Mapped[datetime] = mapped_column(default=utc_now)
    # code_key(code) and len(code), written with the program so that a resume reads neither the code nor hashes it;
    # NULL in rows written before these columns (added in place on a writable open). Deferred: loading a ProgramRow
    # never selects them, so the read-only commands still open stores that lack them.
    code_key: Mapped[str | None] = mapped_column(String(40), deferred=True)
    code_length: Mapped[int | None] = mapped_column(deferred=True)


class ScoreRow(Base):
    __tablename__ = "scores"
    program_id: Mapped[int] = mapped_column(ForeignKey("programs.id"), primary_key=True)
    run_id: Mapped[int] = mapped_column(ForeignKey("runs.id"))  # a copy of the program's, for the top-k index
    vector_json: Mapped[str]  # JSON text, not a JSON column: some databases reorder JSON object keys
    scalar: Mapped[float]
    solved: Mapped[bool]
    artifacts_json: Mapped[str]


class AttemptRow(Base):
    __tablename__ = "attempts"
    id: Mapped[int] = mapped_column(primary_key=True)
    run_id: Mapped[int] = mapped_column(ForeignKey("runs.id"))
    iteration: Mapped[int]
    kind: Mapped[str] = mapped_column(String(20))
    reason: Mapped[str | None]
    policy: Mapped[str] = mapped_column(String(200))
    prompt: Mapped[str | None]
    completion: Mapped[str | None]
    child_code: Mapped[str | None]
    program_id: Mapped[int | None] = mapped_column(ForeignKey("programs.id"))
    call_id: Mapped[int | None] = mapped_column(ForeignKey("attempts.id"))  # the policy call of this outcome
    parent_id: Mapped[int | None] = mapped_column(ForeignKey("programs.id"))  # the program the call edited
    latency_s: Mapped[float]
    prompt_tokens: Mapped[int]
    completion_tokens: Mapped[int]
    # the run's active wall clock when this attempt's iteration was committed (time the run lay killed excluded)
    run_elapsed_s: Mapped[float | None]
    created_at: Mapped[datetime] = mapped_column(default=utc_now)
    # the key of the evolved instruction the iteration's prompt used ([prompt_evolution]); NULL without it and in
    # rows from before this column. Deferred, like programs.code_key: read-only opens of older stores still work.
    prompt_variant: Mapped[str | None] = mapped_column(String(200), deferred=True)


# best first, ties to the older program: matches best_programs' ORDER BY, so SQLite reads k index entries
Index("ix_scores_run_scalar", ScoreRow.run_id, ScoreRow.scalar.desc(), ScoreRow.program_id)
Index("ix_scores_run_solved", ScoreRow.run_id, ScoreRow.solved)
Index("ix_attempts_run_iteration", AttemptRow.run_id, AttemptRow.iteration)
Index("ix_attempts_run_kind_iteration", AttemptRow.run_id, AttemptRow.kind, AttemptRow.iteration)


class ExperimentRow(Base):
    __tablename__ = "experiments"
    name: Mapped[str] = mapped_column(String(200), primary_key=True)
    spec_json: Mapped[str]  # the experiment file as last run, validated (ExperimentSpec)
    created_at: Mapped[datetime] = mapped_column(default=utc_now)
    updated_at: Mapped[datetime] = mapped_column(default=utc_now, onupdate=utc_now)


class CellRow(Base):
    __tablename__ = "experiment_cells"
    run_id: Mapped[int] = mapped_column(ForeignKey("runs.id"), primary_key=True)
    experiment: Mapped[str] = mapped_column(ForeignKey("experiments.name"), index=True)
    problem: Mapped[str] = mapped_column(String(200))
    policy: Mapped[str] = mapped_column(String(200))
    seed: Mapped[int] = mapped_column(BigInteger)


Index("ix_cells_key", CellRow.experiment, CellRow.problem, CellRow.policy, CellRow.seed, unique=True)


class LeaseRow(Base):
    """The process driving a run (one row per run ever driven); holder None: nobody. Stores from before this table
    get it on their next writable open (create_all)."""

    __tablename__ = "run_leases"
    run_id: Mapped[int] = mapped_column(ForeignKey("runs.id"), primary_key=True, autoincrement=False)
    holder: Mapped[str | None] = mapped_column(String(300))  # host:pid:random token
    renewed_at: Mapped[datetime | None]  # the holder's clock, UTC
    expires_at: Mapped[datetime | None]


def missing_columns(engine: Engine) -> list[str]:
    """Columns this version needs that an existing database lacks (create_all never alters a table).

    Nullable columns added since (attempts.parent_id, attempts.run_elapsed_s) are added in place, so older stores
    keep working; what is left is returned."""
    inspector = inspect(engine)
    missing: list[str] = []
    for table in Base.metadata.tables.values():
        present = {column["name"] for column in inspector.get_columns(table.name)}
        for column in table.columns:
            if column.name in present:
                continue
            if column.nullable and not column.primary_key and column.server_default is None:
                kind = column.type.compile(dialect=engine.dialect)
                with engine.begin() as connection:
                    connection.execute(text(f'ALTER TABLE {table.name} ADD COLUMN "{column.name}" {kind}'))
            else:
                missing.append(f"{table.name}.{column.name}")
    return missing
