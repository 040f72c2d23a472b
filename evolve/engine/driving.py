"""What every driver of a run shares (`evolve run`, experiment cells, `evolve sample`): the stored config of a run
taken up again, SIGINT/SIGTERM turned into a cancellation of the driving task, and tasks ended once."""

from __future__ import annotations

import asyncio
import signal
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from typing import Any

from evolve.config import ConfigError, RunConfig, stored_config_with
from evolve.errors import UserError
from evolve.store.program_store import ProgramStore

STOP_SIGNALS = (signal.SIGINT, signal.SIGTERM)


class RunError(UserError, RuntimeError):
    """A run cannot start or resume; the message is one line for the user."""


# what the run's row records besides its config: a resume cannot change them
KEPT_ON_RESUME = ("run.problem", "run.seed", "run.iterations", "policy.name")


def resumed_config(store: ProgramStore, run_id: int, db: str, overrides: Mapping[str, Any] | None = None,
                   blame: Mapping[str, str] | None = None) -> RunConfig:
    """The run's own config as stored (UnknownIdError, one line, for no such run), with `overrides` ({'section.key':
    value}, None values skipped) applied to it and checked against its own policy's backend, pointed at `db`: the
    store is where the run was found, wherever its stored config said it was. An override that names the store
    (run.db) is left out, and one that would change what the run's row records (KEPT_ON_RESUME) is refused: every
    mistake is one ConfigError line naming the override (its label in `blame`) or the stored config."""
    source = f"run {run_id}'s stored config"
    config_json = store.get_run(run_id).config_json
    wanted = {key: value for key, value in (overrides or {}).items() if value is not None and key != "run.db"}
    stored = stored_config_with(config_json, {}, source)
    resumed = stored_config_with(config_json, wanted, source, dict(blame or {})) if wanted else stored
    for key in KEPT_ON_RESUME:
        section, name = key.split(".")
        before, after = getattr(getattr(stored, section), name), getattr(getattr(resumed, section), name)
        if before != after:
            raise ConfigError(f"{(blame or {}).get(key, key)}: run {run_id} keeps its {key} ({before!r}) when it "
                              f"resumes; start a new run for {key} = {after!r}")
    return resumed.model_copy(update={"run": resumed.run.model_copy(update={"db": db})})


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


async def end_tasks(tasks: Sequence[asyncio.Future[Any]]) -> None:
    """Cancel the tasks not yet done and wait until every one has ended, its error retrieved (never logged as
    unretrieved). A task already being cancelled is not cancelled again: a second CancelledError would cut its own
    clean-up short (a cell writing its status, a controller ending its workers)."""
    pending = [task for task in tasks if not task.done()]
    for task in pending:
        cancelling = getattr(task, "cancelling", None)  # a Task's; a plain future has none
        if cancelling is None or not cancelling():
            task.cancel()
    if pending:
        await asyncio.wait(pending)
    for task in tasks:
        retrieve_error(task)


def retrieve_error(done: asyncio.Future[Any]) -> None:
    """Take a finished future's error, if any, so that asyncio never logs it as "exception was never retrieved"
    (also a done callback: it runs whenever the future ends)."""
    if not done.cancelled():
        done.exception()
