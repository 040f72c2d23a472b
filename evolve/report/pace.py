"""How fast a run goes and what it waits on, for the live panels and the plain lines: elapsed time, an ETA from the
iteration rate so far, the requests in flight, and a heartbeat that keeps a quiet plain log alive."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from types import TracebackType

from evolve.engine.run_stats import RunStats


@dataclass(frozen=True)
class Pace:
    elapsed_s: float  # this process's time on the run
    eta_s: float | None  # remaining iterations at this process's rate; None before its first iteration
    waiting_on: str  # what a run with no iteration yet in this process waits for; "" once iterations come in


def pace(stats: RunStats, now: float | None = None) -> Pace:
    """The run's pace in this process (a resumed run's earlier iterations are left out): elapsed time, the ETA of
    its budget (see eta) and what it waits on before its first iteration."""
    now = time.monotonic() if now is None else now
    return Pace(now - stats.started_at, 0.0 if stats.stopped else eta(stats, now), waiting_on(stats))


def eta(stats: RunStats, now: float) -> float | None:
    """Seconds until the budget is spent, from the estimated time per iteration (RunStats.seconds_per_iteration):
    `workers` iterations go at once (Little's law), so while more remain than that, remaining x that time /
    workers; once every remaining iteration can be in flight, what is left of the mean time for the youngest of
    them (at least a quarter of it). None before the first commit. A run that stops when solved may end sooner:
    its budget is what this estimates."""
    per_iteration = stats.seconds_per_iteration(now)
    if per_iteration is None:
        return None
    remaining = max(0, stats.iterations_target - stats.iterations_done)
    if remaining == 0:
        return 0.0
    workers = max(1, stats.workers)
    if remaining > workers:
        return remaining * per_iteration / workers
    youngest = min((now - started for started in stats.iteration_starts.values()), default=0.0)
    return max(per_iteration - youngest, 0.25 * per_iteration)


def waiting_on(stats: RunStats) -> str:
    """What a run that has not finished an iteration in this process is doing ("" once it has)."""
    if stats.iterations_done > stats.iterations_at_start or stats.stopped:
        return ""
    if stats.in_flight:
        tokens = f", {stats.live_tokens()} tokens generated so far" if stats.live_tokens is not None else ""
        return f"waiting for the first completion ({requests(stats.in_flight)} in flight{tokens})"
    if stats.evaluating:
        return "evaluating the seed program" if stats.best is None else f"evaluating {stats.evaluating} children"
    return "starting" if stats.best is None else "starting the first iterations"


def clock(seconds: float | None) -> str:
    """'42s', '3m 05s', '1h 02m'; '-' for an unknown time."""
    if seconds is None:
        return "-"
    whole = int(round(seconds))
    hours, rest = divmod(whole, 3600)
    minutes, secs = divmod(rest, 60)
    if hours:
        return f"{hours}h {minutes:02d}m"
    return f"{minutes}m {secs:02d}s" if minutes else f"{secs}s"


def pace_text(stats: RunStats) -> str:
    """One line of the same facts the live panel shows: elapsed, ETA, requests in flight, evaluations running."""
    now = pace(stats)
    return (f"elapsed {clock(now.elapsed_s)}, ETA {clock(now.eta_s)}, {requests(stats.in_flight)} in flight, "
            f"{stats.evaluating} evaluating")


def requests(count: int) -> str:
    return f"{count} request{'s' * (count != 1)}"


class Heartbeat:
    """In plain output, a line from `line()` whenever `every_s` seconds pass with nothing else printed, so a run
    that sits at 0/N still shows it is alive and what it waits on. Runs on its own daemon thread."""

    def __init__(self, line: Callable[[], str], emit: Callable[[str], None], every_s: float = 30.0) -> None:
        self._line = line
        self._emit = emit
        self.every_s = every_s
        self._last = time.monotonic()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._beat, daemon=True, name="evolve-heartbeat")

    def printed(self) -> None:
        """Something else was printed: the next beat waits a whole period from now."""
        self._last = time.monotonic()

    def _beat(self) -> None:
        while not self._stop.wait(min(1.0, self.every_s / 4)):
            if time.monotonic() - self._last >= self.every_s:
                self._last = time.monotonic()
                self._emit(self._line())

    def __enter__(self) -> Heartbeat:
        self._thread.start()
        return self

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        self._stop.set()
        self._thread.join(timeout=5)
