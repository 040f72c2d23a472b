"""How many CPU threads a local model (llama.cpp, torch) takes when its settings say 0."""

from __future__ import annotations

import os

from evolve.errors import UserError

THREADS_ENV = "EVOLVE_THREADS"


def threads_given(threads: int = 0) -> bool:
    """Whether `threads` or $EVOLVE_THREADS fixes the count (else cpu_threads gives the cores, and a llama.cpp
    engine chooses as it runs)."""
    return threads > 0 or bool(os.environ.get(THREADS_ENV, "").strip())


def cpu_threads(threads: int = 0) -> int:
    """`threads` if given, else $EVOLVE_THREADS, else the cores this process may run on.

    EVOLVE_THREADS is for machines whose cores are shared with other work (the parallel test suite sets 1): llama.cpp's
    and torch's threads spin while they wait for each other, so on a busy core two threads are slower than one."""
    if threads > 0:
        return threads
    chosen = os.environ.get(THREADS_ENV, "").strip()
    if chosen:
        if not chosen.isdigit() or int(chosen) < 1:
            raise UserError(f"{THREADS_ENV}={chosen!r}: a whole number of threads, at least 1")
        return int(chosen)
    return len(os.sched_getaffinity(0)) or 1
