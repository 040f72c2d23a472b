"""The program store: runs, programs, score vectors and attempts in SQL tables (SQLAlchemy 2), one commit per write.

Tables
  runs      one row per run: problem, policy, seed, the full RunConfig as JSON, status, iteration budget.
  programs  every scored program: parent, island, iteration, the policy and answer text that made it, and
            the policy call (an attempts row) it came from.
  scores    one row per program: the score vector as a JSON object (key order kept), the scalar used for
            ranking (indexed with run_id for top-k), solved, artifacts.
  attempts  every policy call ('policy_call') and every outcome of an answer (AttemptKind in records.py);
            outcomes point at their call (call_id), children at their program (program_id). An iteration may
            hold several calls (run.answers_per_iteration); each row carries the run's active wall clock at the
            iteration's commit (run_elapsed_s), which `iteration_costs` reports with the calls, evaluations
            and tokens of each iteration.

Durability: every public write is one transaction, committed before the method returns. SQLite runs in WAL
mode with synchronous=NORMAL, so a commit survives the process being killed at any instant (a power cut may
lose the last commits, never consistency). `record_iteration` writes one iteration's records atomically: a
resume sees whole iterations or none, and an iteration is complete once it has a terminal attempt.

One writer per run: a process that drives a run holds its lease (`driving`, leased.py); while it does, its writes
of that run (iterations, status, budget) renew the lease in their own transaction and fail with LeaseLostError,
writing nothing, if another process took the run after the lease lapsed.

The records and errors are in records.py, row conversion in rows.py, opening the database in connection.py, the
reads of a run's scores and attempts in run_reads.py, the streamed reads in streamed.py; this module re-exports the
records so `from evolve.store.program_store import StoreError, ...` keeps working.
"""

from __future__ import annotations

import re
from collections.abc import Iterator, Sequence
from contextlib import contextmanager

from sqlalchemy import create_engine, event, func, insert, inspect, select, update
from sqlalchemy.exc import SQLAlchemyError
from sqlalchemy.orm import Session, sessionmaker

from evolve.records import Program
from evolve.store import lease as leases
from evolve.store.connection import (
    GuardedSessions,
    database_url,
    first_line,
    prepare_schema,
    read_only_sqlite_engine,
    require_sqlite_file,
    sqlite_pragmas,
    store_name,
)
from evolve.store.holders import new_holder
from evolve.store.leased import LeasedRuns
from evolve.store.records import (
    ATTEMPT_KINDS,
    FAILURE_KINDS,
    MAX_ID,
    RUN_STATUSES,
    TERMINAL_KINDS,
    AttemptInfo,
    AttemptRecord,
    AttemptTotals,
    CellInfo,
    ChildRecord,
    IterationCost,
    LeaseHeldError,
    LeaseInfo,
    LeaseLostError,
    OpenMode,
    RunInfo,
    RunStatus,
    StoreError,
    UnknownIdError,
)
from evolve.store.rows import (
    attempt_values,
    child_attempt_values,
    frozen,
    insert_attempt,
    insert_programs,
    program_of,
    split_requests,
    with_scores,
)
from evolve.store.run_reads import RunReads
from evolve.store.streamed import StreamedReads
from evolve.store.tables import (
    AttemptRow,
    CellRow,
    ExperimentRow,
    ProgramRow,
    RunRow,
    ScoreRow,
    utc_now,
)

__all__ = [  # the records and errors live in store/records.py; importers may keep naming this module
    "ATTEMPT_KINDS", "FAILURE_KINDS", "RUN_STATUSES", "TERMINAL_KINDS", "AttemptInfo", "AttemptRecord", "AttemptTotals",
    "CellInfo",
    "ChildRecord", "IterationCost", "LeaseHeldError", "LeaseInfo", "LeaseLostError", "OpenMode", "ProgramStore",
    "RunInfo", "RunStatus", "StoreError", "UnknownIdError", "database_url", "shown_store",
]


MAX_REASON = 500  # characters of a stop reason kept: one line, not a traceback


def shown_store(url_or_path: str) -> str:
    """How a message or a header names the store `url_or_path` (a path or an SQLAlchemy URL): a SQLite file by its
    path, any other database by its URL with the password hidden (connection.store_name), also when the URL does not
    parse (its password is then cut where SQLAlchemy would read it: between 'user:' and '@'). A plain path is shown
    as it is given."""
    if "://" not in url_or_path:
        return url_or_path
    try:
        return store_name(database_url(url_or_path))
    except (SQLAlchemyError, ValueError):
        return re.sub(r"(://[^:/@]*:)[^@]*@", r"\1***@", url_or_path, count=1)


class ProgramStore(LeasedRuns, RunReads, StreamedReads):
    """Synchronous store over any SQLAlchemy URL; SQLite gets WAL, synchronous=NORMAL and a busy timeout."""

    def __init__(self, url_or_path: str, mode: OpenMode = "create") -> None:
        """mode "create" makes the store if it is missing; "existing" (resume) and "read" (the read-only commands)
        open only a store that exists: a missing SQLite file is "no store at PATH". "read" also creates or
        alters no table, and opens a SQLite file read-only (no WAL switch): it never changes a byte of it. In every
        mode a store that lacks a table or column is refused, and only a writable open adds what this version
        added to older stores (connection.prepare_schema)."""
        self.url = database_url(url_or_path)
        self._where = shown_store(url_or_path)  # its password hidden: messages name the store by this
        try:
            if mode != "create":
                require_sqlite_file(self.url)
            read_only = read_only_sqlite_engine(self.url) if mode == "read" else None
            self.engine = read_only or create_engine(self.url)
            if self.engine.dialect.name == "sqlite" and read_only is None:
                event.listen(self.engine, "connect", sqlite_pragmas)
            prepare_schema(self.engine, mode, self._where)
        except (SQLAlchemyError, ValueError) as exc:
            raise StoreError(f"cannot open the store {self._where}: {first_line(exc)}") from exc
        except ImportError as exc:  # the URL's database driver is not installed
            hint = " (pip install 'evolve[postgres]')" if self.url.startswith("postgres") else ""
            raise StoreError(f"cannot open the store {self._where}: {first_line(exc)}{hint}") from exc
        self._sessions = GuardedSessions(sessionmaker(self.engine, expire_on_commit=False), self._where)
        self.holder = new_holder()  # this store's name in the leases it takes
        self._held: set[int] = set()  # runs this store holds the lease of: their writes check it
        self._lease_s = leases.DEFAULT_LEASE_S
        self._stop_reason_column: bool | None = None  # whether runs.stop_reason exists (a writable open adds it)

    def close(self) -> None:
        self.engine.dispose()

    @contextmanager
    def _write(self, what: str) -> Iterator[Session]:
        """One transaction, committed on leaving the block and rolled back whole on any error."""
        try:
            with self._sessions.begin() as session:
                yield session
        except SQLAlchemyError as exc:
            raise StoreError(f"cannot write {what} to {self._where}: {first_line(exc)}") from exc

    def create_run(self, name: str, problem: str, policy: str, seed: int, config_json: str,
                   iterations_target: int, experiment: str | None = None) -> int:
        """A new run; with `experiment`, also its cell (problem, policy, seed) of that saved experiment, atomically."""
        with self._write("a new run") as session:
            row = RunRow(name=name, problem=problem, policy=policy, seed=seed, config_json=config_json,
                         status="running", iterations_target=iterations_target)
            session.add(row)
            session.flush()
            if experiment is not None:
                session.add(CellRow(run_id=row.id, experiment=experiment, problem=problem, policy=policy, seed=seed))
            return row.id

    def save_experiment(self, name: str, spec_json: str) -> None:
        """Create or update an experiment's spec (the validated experiment file)."""
        with self._write(f"experiment {name}") as session:
            row = session.get(ExperimentRow, name)
            if row is None:
                session.add(ExperimentRow(name=name, spec_json=spec_json))
            else:
                row.spec_json = spec_json

    def experiment_spec(self, name: str) -> str | None:
        with self._sessions() as session:
            row = session.get(ExperimentRow, name)
            return row.spec_json if row else None

    def experiment_cells(self, name: str) -> list[CellInfo]:
        """The runs of an experiment, one per (problem, policy, seed) cell, oldest first."""
        with self._sessions() as session:
            rows = session.scalars(select(CellRow).where(CellRow.experiment == name).order_by(CellRow.run_id))
            return [frozen(CellInfo, row) for row in rows]

    def detach_cell(self, run_id: int, suffix: str) -> None:
        """Take run `run_id` out of its experiment cell, so the experiment runs that cell again; the run, its
        programs and attempts stay in the store, renamed NAME~suffix. StoreError when it is no experiment's cell."""
        with self._write(f"run {run_id} out of its experiment cell") as session:
            cell, run = session.get(CellRow, run_id), session.get(RunRow, run_id)
            if cell is None or run is None:
                raise StoreError(f"run {run_id} is no experiment's cell in {self._where}")
            session.delete(cell)
            run.name = f"{run.name}~{suffix}"

    def get_run(self, run_id: int) -> RunInfo:
        with self._sessions() as session:
            row = session.get(RunRow, run_id) if abs(run_id) <= MAX_ID else None
            if row is None:
                raise UnknownIdError(f"no run {run_id} in {self._where}")
            return frozen(RunInfo, row)

    def list_runs(self) -> list[RunInfo]:
        with self._sessions() as session:
            return [frozen(RunInfo, row) for row in session.scalars(select(RunRow).order_by(RunRow.id))]

    def set_run_status(self, run_id: int, status: RunStatus, reason: str | None = None) -> None:
        """The run's status and why it stopped (`reason`, one line; None clears it: a run going on, or finished)."""
        if status not in RUN_STATUSES:
            raise ValueError(f"run status {status!r} is not one of {', '.join(RUN_STATUSES)}")
        reason = " ".join(reason.split())[:MAX_REASON] if reason is not None else None
        with self._write(f"the status of run {run_id}") as session:
            self._check_lease(session, run_id)
            changed = session.execute(update(RunRow).where(RunRow.id == run_id)
                                      .values(status=status, stop_reason=reason)).rowcount
            if not changed:
                raise UnknownIdError(f"no run {run_id} in {self._where}")

    def stop_reason(self, run_id: int) -> str | None:
        """Why the run stopped, as its driver stored it; None while it runs, once it finished, and in a store from
        before runs.stop_reason (read-only opens do not add the column)."""
        if not self._has_stop_reason():
            return None
        with self._sessions() as session:
            return session.scalar(select(RunRow.stop_reason).where(RunRow.id == run_id))

    def _has_stop_reason(self) -> bool:
        if self._stop_reason_column is None:
            with self._sessions() as session:
                columns = inspect(session.connection()).get_columns(RunRow.__tablename__)
            self._stop_reason_column = any(column["name"] == "stop_reason" for column in columns)
        return self._stop_reason_column

    def set_run_budget(self, run_id: int, iterations_target: int, config_json: str) -> None:
        """Give a run a new iteration budget and the config that asks for it (a sampling run extended to more n)."""
        with self._write(f"the budget of run {run_id}") as session:
            self._check_lease(session, run_id)
            changed = session.execute(update(RunRow).where(RunRow.id == run_id).values(
                iterations_target=iterations_target, config_json=config_json)).rowcount
            if not changed:
                raise UnknownIdError(f"no run {run_id} in {self._where}")

    def add_program(self, run_id: int, code: str, parent_id: int | None, island: int, iteration: int, policy: str,
                    edit: str, scores: dict[str, float], scalar: float, solved: bool,
                    artifacts: dict[str, str] | None = None, completion_id: int | None = None) -> Program:
        """A program and its score row, in one transaction (no attempt row)."""
        child = ChildRecord(code=code, parent_id=parent_id, island=island, policy=policy, edit=edit,
                            scores=scores, scalar=scalar, solved=solved, artifacts=artifacts or {})
        with self._write(f"a program of run {run_id}") as session:
            (program,) = insert_programs(session, run_id, iteration, [child], completion_id)
            return program

    def record_attempt(self, run_id: int, iteration: int, kind: str, reason: str | None = None, policy: str = "",
                       prompt: str | None = None, completion: str | None = None, child_code: str | None = None,
                       program_id: int | None = None, latency_s: float = 0.0, prompt_tokens: int = 0,
                       completion_tokens: int = 0, call_id: int | None = None, parent_id: int | None = None) -> int:
        """One attempts row of any kind (including 'child' with its program_id); returns its id."""
        if kind not in ATTEMPT_KINDS:
            raise ValueError(f"attempt kind {kind!r} is not one of {', '.join(ATTEMPT_KINDS)}")
        with self._write(f"an attempt of run {run_id}") as session:
            return insert_attempt(session, dict(
                run_id=run_id, iteration=iteration, kind=kind, reason=reason, policy=policy, prompt=prompt,
                completion=completion, child_code=child_code, program_id=program_id, call_id=call_id,
                parent_id=parent_id, latency_s=latency_s, prompt_tokens=prompt_tokens,
                completion_tokens=completion_tokens))

    def record_child(self, run_id: int, iteration: int, child: ChildRecord, call_id: int | None = None) -> Program:
        """A program, its score and its 'child' attempt (linked to the policy call `call_id`), in one transaction."""
        with self._write(f"a child of run {run_id}") as session:
            (program,) = insert_programs(session, run_id, iteration, [child], call_id)
            insert_attempt(session, child_attempt_values(run_id, iteration, child, program.id, call_id, child.policy))
            return program

    def record_iteration(self, run_id: int, iteration: int, records: Sequence[AttemptRecord | ChildRecord],
                         policy: str = "", parent_id: int | None = None,
                         run_elapsed_s: float | None = None, prompt_variant: str | None = None) -> list[Program]:
        """Write one iteration in one transaction. `records` are its requests in order: each a policy call
        followed by its outcomes (children: program, score, 'child' attempt; failures), or a 'policy_error'
        (a request that failed). Outcomes are linked to the call before them (none before the first call or
        after a policy error) and to `parent_id`, the program the calls edited; every row carries
        `run_elapsed_s` and `prompt_variant` (the evolved instruction used, if any). Returns the children as
        Programs, in order. Nothing is written if anything fails."""
        stored: list[Program] = []
        with self._write(f"iteration {iteration} of run {run_id}") as session:
            self._check_lease(session, run_id)
            for call, outcomes in split_requests(records):
                call_id = (insert_attempt(session, attempt_values(run_id, iteration, call, policy, None, parent_id,
                                                             run_elapsed_s)) if call is not None else None)
                children = [r for r in outcomes if isinstance(r, ChildRecord)]
                programs = insert_programs(session, run_id, iteration, children, call_id)
                next_child = iter(programs)
                values = [
                    child_attempt_values(run_id, iteration, record, next(next_child).id, call_id,
                                         policy or record.policy, run_elapsed_s)
                    if isinstance(record, ChildRecord)
                    else attempt_values(run_id, iteration, record, policy, call_id, parent_id, run_elapsed_s)
                    for record in outcomes
                ]
                if values:
                    session.execute(insert(AttemptRow), values)
                stored.extend(programs)
            if prompt_variant is not None:
                session.execute(update(AttemptRow).where(AttemptRow.run_id == run_id, AttemptRow.iteration == iteration)
                                .values(prompt_variant=prompt_variant))
            session.execute(update(RunRow).where(RunRow.id == run_id).values(updated_at=utc_now()))
            return stored

    def get_program(self, program_id: int) -> Program:
        with self._sessions() as session:
            found = session.execute(with_scores().where(ProgramRow.id == program_id)).first() \
                if abs(program_id) <= MAX_ID else None
            if found is None:
                raise UnknownIdError(f"no program {program_id} in {self._where}")
            return program_of(*found)

    def programs(self, run_id: int) -> list[Program]:
        """Every program of the run, oldest first (what a resume rebuilds selection from)."""
        with self._sessions() as session:
            rows = session.execute(with_scores().where(ProgramRow.run_id == run_id).order_by(ProgramRow.id))
            return [program_of(program, score) for program, score in rows]

    def best_programs(self, run_id: int, k: int) -> list[Program]:
        """The k programs with the highest scalar, best first; ties go to the older program."""
        with self._sessions() as session:
            query = (with_scores().where(ScoreRow.run_id == run_id)
                     .order_by(ScoreRow.scalar.desc(), ScoreRow.program_id).limit(k))
            return [program_of(program, score) for program, score in session.execute(query)]

    def first_solved(self, run_id: int) -> Program | None:
        """The solved program of the earliest iteration (lowest id among equals), or None."""
        with self._sessions() as session:
            query = (with_scores().where(ScoreRow.run_id == run_id, ScoreRow.solved.is_(True))
                     .order_by(ProgramRow.iteration, ProgramRow.id).limit(1))
            found = session.execute(query).first()
            return program_of(*found) if found else None

    def count_programs(self, run_id: int) -> int:
        with self._sessions() as session:
            query = select(func.count()).select_from(ProgramRow).where(ProgramRow.run_id == run_id)
            return session.scalar(query) or 0

    def program_number(self, run_id: int, program_id: int) -> int:
        """The program's number within its run, 1..N in the order the run stored them (1: the seed); what the CLI
        shows as RUN:N instead of the store-wide id."""
        with self._sessions() as session:
            query = select(func.count()).select_from(ProgramRow).where(ProgramRow.run_id == run_id,
                                                                      ProgramRow.id <= program_id)
            return session.scalar(query) or 0

    def program_by_number(self, run_id: int, number: int) -> Program:
        """Program `number` (1..N, see program_number) of the run; UnknownIdError naming the run's range."""
        with self._sessions() as session:  # read and converted inside it: a damaged row is one StoreError line
            found = session.execute(with_scores().where(ProgramRow.run_id == run_id).order_by(ProgramRow.id)
                                    .offset(number - 1).limit(1)).first() if 1 <= number <= MAX_ID else None
            program = program_of(*found) if found is not None else None
        if program is None:
            count = self.count_programs(run_id)
            raise UnknownIdError(f"no program {run_id}:{number} in {self._where}: run {run_id} has "
                                 + (f"programs 1..{count}" if count else "no programs"))
        return program
