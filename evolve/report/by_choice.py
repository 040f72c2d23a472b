"""A run split by what its iterations chose: one row per policy of an ensemble, or per evolved instruction, with
its iterations, answers, valid children, the share of answers that were valid, the children that beat their
parent, and its best child. Computed from store.iteration_choices; run_summary.py renders it."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from evolve.store.choice_scans import IterationChoice


@dataclass(frozen=True)
class ChoiceRow:
    """What the iterations that chose one policy (or one instruction) brought."""

    name: str
    iterations: int
    answers: int  # answer outcomes: children, duplicates, edit and evaluation failures
    children: int  # valid, scored children
    valid_share: float | None  # children / answers
    improvements: int  # children scoring above their parent
    best: float | None  # the best child's scalar


@dataclass
class _Sum:
    iterations: int = 0
    answers: int = 0
    children: int = 0
    improvements: int = 0
    best: float | None = None

    def add(self, choice: IterationChoice) -> None:
        self.iterations += 1
        self.answers += choice.answers
        self.children += choice.children
        self.improvements += choice.improvements
        if choice.best_scalar is not None:
            self.best = choice.best_scalar if self.best is None else max(self.best, choice.best_scalar)


def _rows(sums: dict[str, _Sum]) -> tuple[ChoiceRow, ...]:
    return tuple(ChoiceRow(name, s.iterations, s.answers, s.children, s.children / s.answers if s.answers else None,
                           s.improvements, s.best) for name, s in sums.items())


def split_run(choices: Iterable[IterationChoice]) -> tuple[tuple[ChoiceRow, ...], tuple[ChoiceRow, ...]]:
    """(rows by policy, rows by instruction), each in order of first use, from one pass over the run's iterations;
    iterations stored without an instruction are in no instruction row."""
    by_policy: dict[str, _Sum] = {}
    by_instruction: dict[str, _Sum] = {}
    for choice in choices:
        by_policy.setdefault(choice.policy, _Sum()).add(choice)
        if choice.prompt_variant is not None:
            by_instruction.setdefault(choice.prompt_variant, _Sum()).add(choice)
    return _rows(by_policy), _rows(by_instruction)
