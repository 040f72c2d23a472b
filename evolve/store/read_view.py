"""A store as a status command reads it: opened read-only, or empty where it was never made, and writing nothing
either way (`evolve study --status`)."""

from __future__ import annotations

from typing import Any

from sqlalchemy import inspect

from evolve.store.connection import database_url, require_sqlite_file
from evolve.store.program_store import ProgramStore
from evolve.store.records import StoreError
from evolve.store.tables import RunRow

IN_MEMORY = "sqlite://"  # an empty store that lives in this process only


class StatusView:
    """A read-only store whose budget raise (what planning a resumed sampling run asks for) does nothing: the run
    that samples raises it; and whose runs read as held by no one, since a reader takes no lease and so contends
    with none (a sampling run under way is the study's usual state while its status is read). Every other attribute
    is the store's own; a write there fails on the read-only open."""

    def __init__(self, store: ProgramStore) -> None:
        self.store = store

    def set_run_budget(self, run_id: int, iterations: int, config_json: str) -> None:
        """Nothing: reading a status raises no budget."""

    def lease(self, run_id: int) -> None:
        """None: whoever drives the run, a status read does not conflict with it."""

    def __getattr__(self, name: str) -> Any:
        return getattr(self.store, name)


def status_view(url_or_path: str) -> StatusView:
    """The store at `url_or_path` opened read-only; a SQLite file that does not exist yet, or a database without the
    store's tables, reads as an empty store (in memory: nothing is made). Any other failure to open it is the
    StoreError it was."""
    try:
        require_sqlite_file(database_url(url_or_path))
    except StoreError:
        return StatusView(ProgramStore(IN_MEMORY))
    store = ProgramStore(url_or_path, mode="read")
    if not inspect(store.engine).has_table(RunRow.__tablename__):  # a database made for the store, still empty
        store.close()
        return StatusView(ProgramStore(IN_MEMORY))
    return StatusView(store)
