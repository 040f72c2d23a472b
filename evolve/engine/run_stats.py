"""What a run reports while it runs: RunStats (the live counters the progress panel draws) and the one-line
description of each committed iteration."""

from __future__ import annotations

import time
from collections import Counter
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
