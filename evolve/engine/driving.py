"""What every driver of a run shares (`evolve run`, experiment cells, `evolve sample`): the stored config of a run
taken up again and tasks ended once (SIGINT/SIGTERM as a cancellation: evolve/stop_signals.py)."""

from __future__ import annotations

import asyncio
from collections.abc import Mapping, Sequence
from typing import Any

from evolve.config import ConfigError, RunConfig, stored_config_with
from evolve.errors import UserError
from evolve.store.program_store import ProgramStore


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
