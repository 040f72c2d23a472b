"""Opening a store's database: URLs, the SQLite pragmas, and read sessions whose errors are one StoreError line."""

from __future__ import annotations

import json
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from sqlalchemy import make_url
from sqlalchemy.exc import SQLAlchemyError
from sqlalchemy.orm import Session, sessionmaker

from evolve.store.records import StoreError


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
        except (SQLAlchemyError, UnicodeDecodeError, json.JSONDecodeError) as exc:  # the latter two: damaged rows
            raise StoreError(f"cannot read {self._where}: {first_line(exc)}") from exc


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
