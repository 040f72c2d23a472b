"""Raw SQL on a test's store, whichever backend holds it (a SQLite path or an SQLAlchemy URL): what the store tests
use instead of sqlite3 to look under the store's own API."""

from __future__ import annotations

from typing import Any

from sqlalchemy import create_engine, make_url, text

from evolve.store.connection import database_url


def is_sqlite(url_or_path: str) -> bool:
    return make_url(database_url(url_or_path)).get_backend_name() == "sqlite"


def fetch(url_or_path: str, sql: str, **params: Any) -> list[tuple[Any, ...]]:
    """The rows of one query, as tuples."""
    engine = create_engine(database_url(url_or_path))
    try:
        with engine.connect() as connection:
            return [tuple(row) for row in connection.execute(text(sql), params)]
    finally:
        engine.dispose()


def execute(url_or_path: str, *statements: str, **params: Any) -> None:
    """Run statements (each with the named `params` it uses) in one committed transaction."""
    engine = create_engine(database_url(url_or_path))
    try:
        with engine.begin() as connection:
            for statement in statements:
                connection.execute(text(statement), params)
    finally:
        engine.dispose()
