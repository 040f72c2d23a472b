"""What runs and experiments report while they go: one stream of events, observed by the live panel, the plain log
and any API caller (`evolve.run(..., on_event=print)`).

A run's events carry its live counters (`stats`, the same object throughout the run: read it when the event comes,
copy what must outlast the next one). An experiment's cells forward their runs' events wrapped in `CellRunEvent`.
Observers are called on the thread that drives the run, between its steps: they must return quickly.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING

from evolve.engine.cells import CellProgress, ExperimentOutcome
from evolve.engine.run_stats import RunStats

if TYPE_CHECKING:
    from evolve.config import RunConfig
    from evolve.problems.problem import Problem


@dataclass(frozen=True)
class RunLoading:
    """A run's problem and settings are usable; its policies load next (seconds to minutes)."""

    config: RunConfig
    resuming: bool


@dataclass(frozen=True)
class RunStarted:
    """The run is in the store, its lease held and its policies loaded; iterations come next."""

    run_id: int
    config: RunConfig
    problem: Problem
    resuming: bool
    stats: RunStats


@dataclass(frozen=True)
class RunProgressed:
    """The seed program is scored (or a resumed run's state read): the counters hold the run's state so far."""

    stats: RunStats


@dataclass(frozen=True)
class IterationStarted:
    """A worker took up `iteration`: its parent chosen and its prompt built, its requests go out next."""

    stats: RunStats
    iteration: int


@dataclass(frozen=True)
class RequestStarted:
    stats: RunStats
    iteration: int
    attempt: int


@dataclass(frozen=True)
class RequestEnded:
    """A policy request ended: `tokens` generated in `seconds`, or `error` (one line) when it failed."""

    stats: RunStats
    iteration: int
    attempt: int
    tokens: int = 0
    seconds: float = 0.0
    error: str = ""


@dataclass(frozen=True)
class EvaluationStarted:
    stats: RunStats


@dataclass(frozen=True)
class EvaluationEnded:
    stats: RunStats


@dataclass(frozen=True)
class IterationCommitted:
    """An iteration is in the store; `line` describes it (its best child, or why it has none)."""

    stats: RunStats
    iteration: int
    line: str


RunEvent = (RunLoading | RunStarted | RunProgressed | IterationStarted | RequestStarted | RequestEnded
            | EvaluationStarted | EvaluationEnded | IterationCommitted)


@dataclass(frozen=True)
class ExperimentPlanned:
    """Every cell of the experiment, with its resting status read from the store, before any runs."""

    name: str
    cells: tuple[CellProgress, ...]
    parallel_cells: int = 1  # cells run at once (of one policy: policies take turns)


@dataclass(frozen=True)
class CellStarted:
    cell: CellProgress


@dataclass(frozen=True)
class CellChanged:
    """A cell's status or note moved without a run event (waiting for a slot, a model loading)."""

    cell: CellProgress


@dataclass(frozen=True)
class CellRunEvent:
    """An event of the run behind `cell`."""

    cell: CellProgress
    event: RunEvent


@dataclass(frozen=True)
class CellEnded:
    """The cell rests: cell.status is finished, failed or interrupted (cell.detail says why)."""

    cell: CellProgress


@dataclass(frozen=True)
class ExperimentEnded:
    """The experiment stopped: every cell finished, or it was interrupted, or it stopped on errors (`outcome`)."""

    name: str
    outcome: ExperimentOutcome


ExperimentEvent = ExperimentPlanned | CellStarted | CellChanged | CellRunEvent | CellEnded | ExperimentEnded
Event = RunEvent | ExperimentEvent
Observer = Callable[[Event], None]


def ignore(event: Event) -> None:
    """The observer of a caller that watches nothing."""
