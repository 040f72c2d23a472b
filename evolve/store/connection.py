"""Opening a store's database: URLs, the SQLite pragmas, and read sessions whose errors are one StoreError line."""

from __future__ import annotations

import json
import os
import sqlite3
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from sqlalchemy import Engine, create_engine, make_url, text
from sqlalchemy.exc import SQLAlchemyError
from sqlalchemy.orm import Session, sessionmaker
from sqlalchemy.pool import NullPool

from evolve.store.records import MAX_ID, StoreError, UnknownIdError
from evolve.store.tables import Base, DamagedValue, missing_columns

SCHEMA_LOCK_KEY = 0x65766F6C7665  # PostgreSQL advisory lock ("evolve") held while creating or altering the tables
SCHEMA_ATTEMPTS = 5


def database_url(url_or_path: str) -> str:
    """A plain path becomes a SQLite URL; anything with '://' is already an SQLAlchemy URL."""
    return url_or_path if "://" in url_or_path else f"sqlite:///{url_or_path}"


def require_sqlite_file(url: str) -> None:
    """StoreError unless `url` is a SQLite file that exists (other databases and in-memory SQLite pass)."""
    parsed = make_url(url)
    database = parsed.database or ""
    if parsed.get_backend_name() == "sqlite" and database not in ("", ":memory:") and not database.startswith("file:") \
            and not Path(database).is_file():
        raise StoreError(f"no store at {database}")


def read_only_sqlite_engine(url: str) -> Engine | None:
    """An engine that reads the SQLite file of `url` and writes nothing: no write, no journal mode switch, no schema
    made, so a foreign or empty file keeps every byte; None for other databases and in-memory SQLite.

    Nor does it leave files beside it. A reader of a WAL database needs its -wal and -shm files, and SQLite makes
    them when they are missing, but only the last connection to close removes them, and only if it could write.
    So each session gets a connection of its own, closed when it ends (NullPool), and where no -wal file is there
    (no writer has the database open) and the file may be written, that connection opens it read-write with
    query_only on: closing it then removes the files it made, as a writer's last close does. Where a -wal file is
    there (a writer is at work, or one was killed), or a rollback journal (which a read-write open would roll back),
    the connection opens it read-only (mode=ro) and uses them."""
    parsed = make_url(url)
    database = parsed.database or ""
    if parsed.get_backend_name() != "sqlite" or database in ("", ":memory:") or database.startswith("file:"):
        return None
    path = Path(database).resolve()

    def connect() -> sqlite3.Connection:
        beside = [path.with_name(path.name + suffix) for suffix in ("-wal", "-journal")]  # a writer's, or a crash's
        if not any(file.exists() for file in beside) and os.access(path, os.W_OK) and os.access(path.parent, os.W_OK):
            connection = sqlite3.connect(str(path), check_same_thread=False)
        else:
            connection = sqlite3.connect(f"{path.as_uri()}?mode=ro", uri=True, check_same_thread=False)
        connection.execute("PRAGMA busy_timeout=30000")  # a writer's commit in progress: wait, as writers do
        connection.execute("PRAGMA query_only=ON")
        return connection

    return create_engine("sqlite://", creator=connect, poolclass=NullPool)


class GuardedSessions:
    """The store's session factory: a read session turns any database error (a damaged file, a missing table)
    into one StoreError line; begin() (writes) is translated by ProgramStore._write."""

    def __init__(self, factory: sessionmaker[Session], where: str) -> None:
        self._factory, self._where = factory, where

    def begin(self) -> Any:
        return self._factory.begin()

    @contextmanager
    def __call__(self) -> Iterator[Session]:
        try:
            with self._factory() as session:
                yield session
        except (SQLAlchemyError, UnicodeDecodeError, json.JSONDecodeError, DamagedValue) as exc:  # rows too
            raise StoreError(f"cannot read {self._where}: {first_line(exc)}") from exc
        except OverflowError as exc:  # an id past a 64-bit integer (a URL's, a flag's) names no row
            raise UnknownIdError(f"no such id in {self._where}: ids are at most {MAX_ID}") from exc


def first_line(exc: BaseException) -> str:
    cause = getattr(exc, "orig", None) or exc  # the driver's own message, without SQLAlchemy's SQL dump
    return (str(cause).splitlines() or [type(cause).__name__])[0]


def sqlite_pragmas(connection: Any, _record: Any) -> None:
    cursor = connection.cursor()
    cursor.execute("PRAGMA journal_mode=WAL")
    cursor.execute("PRAGMA synchronous=NORMAL")  # in WAL mode: commits survive a process kill, fsync at checkpoints
    cursor.execute("PRAGMA busy_timeout=30000")  # wait for another writer (two runs, one file) instead of failing
    cursor.execute("PRAGMA foreign_keys=ON")
    cursor.close()


@contextmanager
def schema_lock(engine: Engine) -> Iterator[None]:
    """Held while the tables are created or altered. On PostgreSQL a session advisory lock, so that processes opening
    one new database at once (the cells of a cluster) create each table once instead of racing on CREATE TABLE; it
    is released with the connection if the process dies. Elsewhere nothing (SQLite: see prepare_schema)."""
    if engine.dialect.name != "postgresql":
        yield
        return
    with engine.connect() as connection:
        connection.execute(text("SELECT pg_advisory_lock(:key)"), {"key": SCHEMA_LOCK_KEY})
        connection.commit()
        try:
            yield
        finally:
            connection.execute(text("SELECT pg_advisory_unlock(:key)"), {"key": SCHEMA_LOCK_KEY})
            connection.commit()


def prepare_schema(engine: Engine) -> list[str]:
    """Create the missing tables and add the nullable columns added since; returns the columns that are still missing
    (missing_columns). SQLite runs DDL outside transactions, so a process racing another one on a new file may meet a
    table or column the other just made: it looks again, which then finds it."""
    for attempt in range(SCHEMA_ATTEMPTS):
        try:
            with schema_lock(engine):
                Base.metadata.create_all(engine)
                return missing_columns(engine)
        except SQLAlchemyError:
            if attempt == SCHEMA_ATTEMPTS - 1:
                raise
            time.sleep(0.05 * (attempt + 1))
    raise AssertionError("unreachable")
