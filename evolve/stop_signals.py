"""SIGINT and SIGTERM turned into a cancellation of the driving asyncio task, for every long command (a run, an
experiment's cells, plain sampling, training), so that a Ctrl-C or a `kill` ends it as an interruption, resumable,
rather than mid-write. It also reaches a command started in the background by a script, whose SIGINT the shell set
to be ignored (`nohup evolve study ... &`): the handler is installed over the ignored disposition."""

from __future__ import annotations

import asyncio
import signal
import threading
from collections.abc import Iterator
from contextlib import contextmanager

STOP_SIGNALS = (signal.SIGINT, signal.SIGTERM)


def take_back_interrupts() -> None:
    """A command started with SIGINT ignored takes it back: Ctrl-C, or a script's `pkill -INT`, then raises
    KeyboardInterrupt during synchronous work (a model loading, a checkpoint rebuilt) as in a foreground command,
    and asyncio.run installs its own SIGINT handler again. Without this, a SIGINT reaching such a command outside
    `cancelled_by_signals` would be dropped and a script waiting for it to stop would wait in vain."""
    if threading.current_thread() is threading.main_thread() and signal.getsignal(signal.SIGINT) is signal.SIG_IGN:
        signal.signal(signal.SIGINT, signal.default_int_handler)


@contextmanager
def cancelled_by_signals() -> Iterator[None]:
    """Inside a coroutine: SIGINT and SIGTERM cancel the running task until the block ends. The cancellation lands
    at the task's next await: synchronous work under way (a training step's backward pass) finishes first."""
    loop = asyncio.get_running_loop()
    task = asyncio.current_task()
    if task is not None:
        for sig in STOP_SIGNALS:
            loop.add_signal_handler(sig, task.cancel, sig.name)  # the CancelledError says which signal
    try:
        yield
    finally:
        if task is not None:
            for sig in STOP_SIGNALS:
                loop.remove_signal_handler(sig)
