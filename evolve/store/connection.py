"""Opening a store's database: URLs, the SQLite pragmas, and read sessions whose errors are one StoreError line."""

from __future__ import annotations

import json
import os
import sqlite3
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from sqlalchemy import Connection, Engine, create_engine, inspect, make_url, text
from sqlalchemy.exc import SQLAlchemyError
from sqlalchemy.orm import Session, sessionmaker
from sqlalchemy.pool import NullPool

from evolve.store.records import MAX_ID, OpenMode, StoreError, UnknownIdError
from evolve.store.tables import (
    ADDED_COLUMNS,
    ADDED_TABLES,
    STORE_TABLES,
    Base,
    DamagedValue,
    damaged_message,
)

SCHEMA_LOCK_KEY = 0x65766F6C7665  # PostgreSQL advisory lock ("evolve") held while creating or altering the tables
WAL_HEADER = b"\x02\x02"  # bytes 18-19 of a SQLite file in WAL mode (its read and write format versions)


def database_url(url_or_path: str) -> str:
    """A plain path becomes a SQLite URL; anything with '://' is already an SQLAlchemy URL."""
    return url_or_path if "://" in url_or_path else f"sqlite:///{url_or_path}"


def store_name(url: str) -> str:
    """How messages name a store: a SQLite file by its path, as the user gave it ("no run 9 in evolve.db", like "no
    store at evolve.db"), any other database by its URL with the password hidden."""
    parsed = make_url(url)
    database = parsed.database or ""
    if parsed.get_backend_name() == "sqlite" and database not in ("", ":memory:") and not database.startswith("file:"):
        return database
    return parsed.render_as_string(hide_password=True)


def require_sqlite_file(url: str) -> None:
    """StoreError unless `url` is a SQLite file that exists (other databases and in-memory SQLite pass)."""
    parsed = make_url(url)
    database = parsed.database or ""
    if parsed.get_backend_name() == "sqlite" and database not in ("", ":memory:") and not database.startswith("file:") \
            and not Path(database).is_file():
        raise StoreError(f"{database} is a folder, not a store" if Path(database).is_dir()
                         else f"no store at {database}")


def read_only_sqlite_engine(url: str) -> Engine | None:
    """An engine that reads the SQLite file of `url` and writes nothing: no write, no journal mode switch, no schema
    made, so a foreign or empty file keeps every byte; None for other databases and in-memory SQLite. Reading needs
    read permission only (another user's store, a read-only folder). Each session gets a connection of its own,
    closed when it ends (NullPool), opened by `read_connection`."""
    parsed = make_url(url)
    database = parsed.database or ""
    if parsed.get_backend_name() != "sqlite" or database in ("", ":memory:") or database.startswith("file:"):
        return None
    path = Path(database).resolve()
    return create_engine("sqlite://", creator=lambda: read_connection(path), poolclass=NullPool)


def read_connection(path: Path) -> sqlite3.Connection:
    """A query_only connection to the SQLite file at `path` that leaves no file beside it and changes no byte.

    A reader of a WAL database needs its -wal and -shm files; SQLite makes them when they are missing, and only the
    last connection to close removes them, and only if it could write. So:
    - a -wal file or a rollback journal is there (a writer at work, or a killed one): open it read-only (mode=ro)
      and use them (a read-write open would roll a journal back);
    - else, where this user may write the file and its folder: read-write with query_only on, so that closing it
      removes the -wal and -shm it made, as a writer's last close does (a mode=ro connection would leave them);
    - else a WAL database (nobody writes it now, or a -wal file would be there, and we may not make one: SQLite
      cannot open it mode=ro without -shm and -wal): immutable=1, which reads the file as it is, with no locks and no
      files. The price: a writer that starts during that one read session is not seen by it (each session decides
      again), and should its checkpoint rewrite pages while we read them, the read may fail, as one StoreError line;
    - else (rollback journal mode): mode=ro, which takes only shared locks and makes no file."""
    beside = [path.with_name(path.name + suffix) for suffix in ("-wal", "-journal")]
    writable = os.access(path, os.W_OK) and os.access(path.parent, os.W_OK)
    if not any(file.exists() for file in beside) and writable:
        connection = sqlite3.connect(str(path), check_same_thread=False)
    elif not any(file.exists() for file in beside) and _in_wal_mode(path):
        connection = sqlite3.connect(f"{path.as_uri()}?immutable=1", uri=True, check_same_thread=False)
    else:
        connection = sqlite3.connect(f"{path.as_uri()}?mode=ro", uri=True, check_same_thread=False)
    connection.execute("PRAGMA busy_timeout=30000")  # a writer's commit in progress: wait, as writers do
    connection.execute("PRAGMA query_only=ON")
    return connection


def _in_wal_mode(path: Path) -> bool:
    try:
        with path.open("rb") as file:
            return file.read(20)[18:20] == WAL_HEADER
    except OSError:  # unreadable: the mode=ro open says why, in SQLite's words
        return False


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
        except DamagedValue as exc:
            raise StoreError(f"cannot read {self._where}: {self._damaged(exc)}") from exc
        except (SQLAlchemyError, UnicodeDecodeError, json.JSONDecodeError) as exc:  # rows too
            raise StoreError(f"cannot read {self._where}: {first_line(exc)}") from exc
        except OverflowError as exc:  # an id past a 64-bit integer (a URL's, a flag's) names no row
            raise UnknownIdError(f"no such id in {self._where}: ids are at most {MAX_ID}") from exc


    def _damaged(self, exc: DamagedValue) -> str:
        """The damaged value's line, naming its row: the first row of its table holding that value (the lookup scans
        the table, once, on the way to an error)."""
        if not exc.column:
            return first_line(exc)
        table_name, column = exc.column.split(".", 1)
        table = Base.metadata.tables[table_name]
        keys = [key.name for key in table.primary_key.columns]
        row = "a row"
        try:
            with self._factory() as session:
                selected = ", ".join(f'"{key}"' for key in keys)
                found = session.execute(text(f'SELECT {selected} FROM "{table_name}" WHERE "{column}" = :value '
                                             "LIMIT 1"), {"value": exc.value}).first()
        except SQLAlchemyError:
            found = None
        if found is not None:
            row = f"row {found[0]}" if keys == ["id"] else \
                "row " + ", ".join(f"{key}={value}" for key, value in zip(keys, found, strict=True))
        kind = getattr(table.columns[column].type, "kind", "of its type")
        return damaged_message(exc.column, row, exc.value, kind)


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
def schema_lock(connection: Connection, mode: OpenMode) -> Iterator[None]:
    """Held while a writable open checks and makes the tables: on SQLite a write transaction taken at once (BEGIN
    IMMEDIATE; its DDL is transactional), on PostgreSQL a session advisory lock, released with the connection if the
    process dies. A read-only open takes none: it makes nothing."""
    name = connection.dialect.name
    if mode != "read" and name == "sqlite":
        connection.exec_driver_sql("BEGIN IMMEDIATE")
    if mode == "read" or name != "postgresql":
        yield
        return
    connection.execute(text("SELECT pg_advisory_lock(:key)"), {"key": SCHEMA_LOCK_KEY})
    connection.commit()
    try:
        yield
    finally:
        connection.rollback()  # whatever the block left uncommitted (it commits what it made)
        connection.execute(text("SELECT pg_advisory_unlock(:key)"), {"key": SCHEMA_LOCK_KEY})
        connection.commit()



def prepare_schema(engine: Engine, mode: OpenMode, where: str) -> None:
    """Check the store's tables and columns against this version's, and make what a writable open may make.

    An existing store is a database holding any of evolve's tables. In one, nothing is created but what this version
    adds to older stores (tables.ADDED_TABLES, ADDED_COLUMNS), and only by a writable open; a store lacking any other
    table or column is refused (StoreError) in every mode, before anything is read or written: a dropped table is
    never made again, empty. A database holding none of them is a new store: "create" makes every table, "existing"
    refuses it, "read" leaves it be (its reads fail, one line each). Checking and making are one transaction (see
    schema_lock), so processes opening one new database at once (the cells of a cluster) create each table once and
    none sees half a schema."""
    with engine.connect() as connection, schema_lock(connection, mode):
        present, lacking = _schema(connection)
        if not present:
            if mode == "existing":
                raise StoreError(f"no store in {where}: it holds none of evolve's tables")
            if mode == "read":
                return
        refused = [f"table {name}" for name in sorted(STORE_TABLES - present - set(ADDED_TABLES))] + [
            f"column {column}" for column in lacking if column not in ADDED_COLUMNS] if present else []
        if refused:
            raise StoreError(f"the store {where} was written by another version of evolve or damaged: it lacks "
                             f"{', '.join(refused)}; nothing was changed (use a new database file)")
        if mode == "read":
            return
        Base.metadata.create_all(connection, tables=[Base.metadata.tables[name] for name in sorted(
            STORE_TABLES - present) if not present or name in ADDED_TABLES])
        for name in lacking:  # each one of ADDED_COLUMNS: nullable
            table_name, column_name = name.split(".")
            kind = Base.metadata.tables[table_name].columns[column_name].type.compile(dialect=engine.dialect)
            connection.execute(text(f'ALTER TABLE {table_name} ADD COLUMN "{column_name}" {kind}'))
        connection.commit()


def _schema(connection: Connection) -> tuple[set[str], list[str]]:
    """(evolve's tables the database holds, the columns of those tables it lacks as "table.column")."""
    inspector = inspect(connection)
    present = set(inspector.get_table_names()) & STORE_TABLES
    lacking = []
    for name in sorted(present):
        have = {column["name"] for column in inspector.get_columns(name)}
        lacking += [f"{name}.{column.name}" for column in Base.metadata.tables[name].columns if column.name not in have]
    return present, lacking
