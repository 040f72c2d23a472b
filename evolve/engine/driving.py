"""What every driver of a run shares (`evolve run`, experiment cells, `evolve sample`): the stored config of a run
taken up again, and SIGINT/SIGTERM turned into a cancellation of the driving task."""

from __future__ import annotations

import asyncio
import signal
from collections.abc import Iterator
from contextlib import contextmanager

from evolve.config import RunConfig, stored_config
from evolve.errors import UserError
from evolve.store.program_store import ProgramStore

STOP_SIGNALS = (signal.SIGINT, signal.SIGTERM)


class RunError(UserError, RuntimeError):
    """A run cannot start or resume; the message is one line for the user."""


def resumed_config(store: ProgramStore, run_id: int, db: str) -> RunConfig:
    """The run's own config as stored (UnknownIdError, one line, for no such run), pointed at `db`: the store is
    where the run was found, wherever its stored config said it was."""
    stored = stored_config(store.get_run(run_id).config_json)
    return stored.model_copy(update={"run": stored.run.model_copy(update={"db": db})})


@contextmanager
def cancelled_by_signals() -> Iterator[None]:
    """Inside a coroutine: SIGINT and SIGTERM cancel the running task until the block ends, so a Ctrl-C or a
    `kill` ends the run as an interruption (its lease released, its status written) rather than mid-write."""
    loop = asyncio.get_running_loop()
    task = asyncio.current_task()
    if task is not None:
        for sig in STOP_SIGNALS:
            loop.add_signal_handler(sig, task.cancel)
    try:
        yield
    finally:
        if task is not None:
            for sig in STOP_SIGNALS:
                loop.remove_signal_handler(sig)
