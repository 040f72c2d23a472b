"""What a run reports while it runs: RunStats (the live counters the progress panel draws) and the one-line
description of each committed iteration."""

from __future__ import annotations

import math
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field

from evolve.records import Program
from evolve.store.program_store import AttemptRecord, ChildRecord


@dataclass
class RunStats:
    """Live counters for the progress display; derived from what the controller committed."""

    iterations_target: int
    iterations_done: int = 0
    policy_calls: int = 0
    children: int = 0
    iterations_with_child: int = 0
    outcomes: Counter[str] = field(default_factory=Counter)
    best: Program | None = None
    first_solved: Program | None = None
    completion_tokens: int = 0
    generation_s: float = 0.0
    started_at: float = field(default_factory=time.monotonic)
    recent: list[str] = field(default_factory=list)
    in_flight: int = 0  # policy requests generating now
    evaluating: int = 0  # programs being scored now (the seed, children)
    iterations_at_start: int = 0  # iterations a resumed run had done before this process: the rate leaves them out
    stopped: str = ""  # why the run stopped before its budget (StopRule.reason), "" when it did not
    run_id: int = 0
    programs: int = 0  # the run's stored programs so far
    best_number: int = 0  # the best program's number in the run (1..programs), as `evolve show RUN:N` takes it
    solved_number: int = 0  # the first solved program's number
    workers: int = 1  # iterations this process drives at once (each worker takes the next iteration when it commits)
    iteration_starts: dict[int, float] = field(default_factory=dict)  # iterations in flight -> when they started
    iteration_seconds: float = 0.0  # start -> commit, summed over the iterations this process committed
    iterations_timed: int = 0
    live_tokens: Callable[[], int] | None = None  # tokens the policy's model has generated so far, where it says

    def iteration_started(self, iteration: int, now: float) -> None:
        self.iteration_starts[iteration] = now

    def iteration_ended(self, iteration: int, now: float, committed: bool) -> None:
        """An iteration left flight: committed (its time counts towards the pace) or dropped (it does not)."""
        started = self.iteration_starts.pop(iteration, None)
        if committed and started is not None:
            self.iteration_seconds += now - started
            self.iterations_timed += 1

    def seconds_per_iteration(self, now: float) -> float | None:
        """The mean start-to-commit time of an iteration, estimated at `now`; None before the first commit here.

        Iterations start together and short ones commit first, so the mean of the committed ones is too low while
        long ones are still in flight, and their time plus the time in flight so far, per commit, is too high
        (as if no iteration in flight would ever end): the estimate is the geometric mean of the two, which meets
        both as the run goes on (tests/test_eta.py replays recorded runs against it)."""
        if not self.iterations_timed:
            return None
        committed = self.iteration_seconds / self.iterations_timed
        in_flight = sum(max(0.0, now - started) for started in self.iteration_starts.values())
        return math.sqrt(committed * (self.iteration_seconds + in_flight) / self.iterations_timed)

    def note(self, line: str) -> None:
        self.recent.append(line)
        del self.recent[:-8]

    def consider(self, program: Program) -> None:
        """Count a stored program (called once per program, in store order, so `programs` is its number in the
        run, as `evolve show RUN:N` numbers it) and keep the best and the first solved."""
        self.programs += 1
        if self.best is None or program.scalar > self.best.scalar:
            self.best, self.best_number = program, self.programs
        if program.solved and self.first_solved is None:
            self.first_solved, self.solved_number = program, self.programs


def describe_iteration(
    iteration: int, island: int, programs: list[Program], records: list[AttemptRecord | ChildRecord],
    first_label: str = "",
) -> str:
    """One line for an iteration; `first_label` is RUN:N of its first child (the others follow it), else store ids."""
    if programs:
        index, best = max(enumerate(programs), key=lambda pair: pair[1].scalar)
        run, _, number = first_label.partition(":")
        label = f"{run}:{int(number) + index}" if number.isdigit() else f"#{best.id}"
        solved = " SOLVED" if best.solved else ""
        return f"it {iteration:>4} island {island}: child {label} scalar {best.scalar:.4f}{solved}"
    failures = [r for r in records if isinstance(r, AttemptRecord) and r.kind != "policy_call"]
    if failures:
        return f"it {iteration:>4} island {island}: {failures[0].kind}: {failures[0].reason or ''}"[:120]
    return f"it {iteration:>4} island {island}: no answer"
