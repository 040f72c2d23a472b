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
    Boolean,
    DateTime,
    Dialect,
    Double,
    ForeignKey,
    Index,
    Integer,
    String,
    Text,
    TypeDecorator,
)
from sqlalchemy.orm import DeclarativeBase, Mapped, mapped_column


class DamagedValue(ValueError):
    """A stored value that is not of its column's type (a number that is text, a time that is not a time, in a damaged
    or hand-edited SQLite file: SQLite keeps any value in any column); a read session turns it into one StoreError
    line, naming the row where it can find it (`column`: "table.column", `value`: what was read)."""

    def __init__(self, message: str, column: str = "", value: Any = None) -> None:
        super().__init__(message)
        self.column, self.value = column, value


def damaged_message(column: str, row: str, value: Any, kind: str) -> str:
    shown = repr(value) if len(repr(value)) <= 80 else repr(value)[:80] + "..."
    return f"{column} of {row} is damaged: {shown} is not {kind}"


class _Checked(TypeDecorator[Any]):
    """A number or flag column whose every value read is checked to be of its type before anything computes with it
    (SQLite hands back 'garbage' from a REAL column as it was written). `column` ("table.column") names it."""

    cache_ok = True
    kind = "a value"

    def __init__(self, column: str = "") -> None:
        super().__init__()
        self.column = column

    def accepts(self, value: Any) -> bool:
        raise NotImplementedError

    def result_processor(self, dialect: Dialect, coltype: object) -> Callable[[Any], Any]:
        process = super().result_processor(dialect, coltype)

        def checked(value: Any) -> Any:
            if value is not None and not self.accepts(value):
                raise DamagedValue(damaged_message(self.column, "a row", value, self.kind), self.column, value)
            return process(value) if process is not None else value

        return checked


class _CheckedInteger(_Checked):
    cache_ok = True
    impl, kind = Integer, "int"

    def accepts(self, value: Any) -> bool:
        return isinstance(value, int) and not isinstance(value, bool)


class _CheckedBigInteger(_CheckedInteger):
    cache_ok = True
    impl = BigInteger


class _CheckedDouble(_Checked):
    cache_ok = True
    impl, kind = Double, "int or float"

    def accepts(self, value: Any) -> bool:
        return isinstance(value, int | float) and not isinstance(value, bool)


class _CheckedBoolean(_Checked):
    cache_ok = True
    impl, kind = Boolean, "bool"
    coerce_to_is_types = (type(None), bool)  # `solved.is_(True)` renders IS true, as Boolean's own does

    def accepts(self, value: Any) -> bool:
        return isinstance(value, bool) or (isinstance(value, int) and value in (0, 1))


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
    # up to 2**63 - 1 (config.MAX_SEED): int4 holds 2**31 - 1
    seed: Mapped[int] = mapped_column(_CheckedBigInteger("runs.seed"))
    config_json: Mapped[str]
    status: Mapped[str] = mapped_column(String(20))
    iterations_target: Mapped[int] = mapped_column(_CheckedInteger("runs.iterations_target"))
    created_at: Mapped[datetime] = mapped_column(default=utc_now)
    updated_at: Mapped[datetime] = mapped_column(default=utc_now, onupdate=utc_now)
    # why the run stopped when it did not finish (a policy server's failure, Ctrl-C, SIGTERM, an error's line); NULL
    # while it runs, when it finished, and in stores from before this column. Deferred, like programs.code_key:
    # read-only opens of older stores still work; ProgramStore.stop_reason reads it where it exists.
    stop_reason: Mapped[str | None] = mapped_column(deferred=True)


class ProgramRow(Base):
    __tablename__ = "programs"
    id: Mapped[int] = mapped_column(primary_key=True)
    run_id: Mapped[int] = mapped_column(_CheckedInteger("programs.run_id"), ForeignKey("runs.id"), index=True)
    parent_id: Mapped[int | None] = mapped_column(_CheckedInteger("programs.parent_id"), ForeignKey("programs.id"))
    island: Mapped[int] = mapped_column(_CheckedInteger("programs.island"))
    iteration: Mapped[int] = mapped_column(_CheckedInteger("programs.iteration"))
    policy: Mapped[str] = mapped_column(String(200))
    code: Mapped[str]
    edit: Mapped[str]
    # programs <-> attempts reference each other; use_alter lets other databases add this key after both exist
    completion_id: Mapped[int | None] = mapped_column(_CheckedInteger("programs.completion_id"),
                                                      ForeignKey("attempts.id", use_alter=True))
    created_at: Mapped[datetime] = mapped_column(default=utc_now)
    # code_key(code) and len(code), written with the program so that a resume reads neither the code nor hashes it;
    # NULL in rows written before these columns (added in place on a writable open). Deferred: loading a ProgramRow
    # never selects them, so the read-only commands still open stores that lack them.
    code_key: Mapped[str | None] = mapped_column(String(40), deferred=True)
    code_length: Mapped[int | None] = mapped_column(_CheckedInteger("programs.code_length"), deferred=True)


class ScoreRow(Base):
    __tablename__ = "scores"
    program_id: Mapped[int] = mapped_column(ForeignKey("programs.id"), primary_key=True)
    # a copy of the program's, for the top-k index
    run_id: Mapped[int] = mapped_column(_CheckedInteger("scores.run_id"), ForeignKey("runs.id"))
    vector_json: Mapped[str]  # JSON text, not a JSON column: some databases reorder JSON object keys
    scalar: Mapped[float] = mapped_column(_CheckedDouble("scores.scalar"))
    solved: Mapped[bool] = mapped_column(_CheckedBoolean("scores.solved"))
    artifacts_json: Mapped[str]


class AttemptRow(Base):
    __tablename__ = "attempts"
    id: Mapped[int] = mapped_column(primary_key=True)
    run_id: Mapped[int] = mapped_column(_CheckedInteger("attempts.run_id"), ForeignKey("runs.id"))
    iteration: Mapped[int] = mapped_column(_CheckedInteger("attempts.iteration"))
    kind: Mapped[str] = mapped_column(String(20))
    reason: Mapped[str | None]
    policy: Mapped[str] = mapped_column(String(200))
    prompt: Mapped[str | None]
    completion: Mapped[str | None]
    child_code: Mapped[str | None]
    program_id: Mapped[int | None] = mapped_column(_CheckedInteger("attempts.program_id"), ForeignKey("programs.id"))
    # the policy call of this outcome
    call_id: Mapped[int | None] = mapped_column(_CheckedInteger("attempts.call_id"), ForeignKey("attempts.id"))
    # the program the call edited
    parent_id: Mapped[int | None] = mapped_column(_CheckedInteger("attempts.parent_id"), ForeignKey("programs.id"))
    latency_s: Mapped[float] = mapped_column(_CheckedDouble("attempts.latency_s"))
    prompt_tokens: Mapped[int] = mapped_column(_CheckedInteger("attempts.prompt_tokens"))
    completion_tokens: Mapped[int] = mapped_column(_CheckedInteger("attempts.completion_tokens"))
    # the run's active wall clock when this attempt's iteration was committed (time the run lay killed excluded)
    run_elapsed_s: Mapped[float | None] = mapped_column(_CheckedDouble("attempts.run_elapsed_s"))
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
    seed: Mapped[int] = mapped_column(_CheckedBigInteger("experiment_cells.seed"))


Index("ix_cells_key", CellRow.experiment, CellRow.problem, CellRow.policy, CellRow.seed, unique=True)


class LeaseRow(Base):
    """The process driving a run (one row per run ever driven); holder None: nobody. Stores from before this table
    get it on their next writable open (create_all)."""

    __tablename__ = "run_leases"
    run_id: Mapped[int] = mapped_column(ForeignKey("runs.id"), primary_key=True, autoincrement=False)
    holder: Mapped[str | None] = mapped_column(String(300))  # host:pid:random token
    renewed_at: Mapped[datetime | None]  # the holder's clock, UTC
    expires_at: Mapped[datetime | None]


def _checked_columns() -> None:
    """Every number and flag column is checked as it is read, under its own name (the ORM's column expressions keep
    the type each column was declared with, so it is named there; this holds the names to their columns)."""
    for table in Base.metadata.tables.values():
        for column in table.columns:
            if isinstance(column.type, Integer | Double | Boolean | _Checked) and not column.primary_key:
                assert isinstance(column.type, _Checked) and column.type.column == f"{table.name}.{column.name}", \
                    f"{table.name}.{column.name}: declare it with its checked type, named after it"


_checked_columns()

# What this version adds to a store written by an older one, on a writable open (prepare_schema): tables created
# whole, nullable columns added in place. Nothing else is ever created in an existing store: a store that lacks any
# other table or column was damaged (a dropped table) or written by another program, and is refused.
ADDED_TABLES: tuple[str, ...] = ("run_leases",)
ADDED_COLUMNS: tuple[str, ...] = ("programs.code_key", "programs.code_length", "attempts.parent_id",
                                  "attempts.run_elapsed_s", "attempts.prompt_variant", "runs.stop_reason")
STORE_TABLES: frozenset[str] = frozenset(Base.metadata.tables)
