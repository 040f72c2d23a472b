"""What each committed iteration chose and what it brought: its policy, its evolved instruction, its parent's and
best child's scalars. A resume replays an ensemble's bandit and the instruction population from it, and the
report splits a run by policy or instruction with it."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass

from sqlalchemy import inspect, literal, select
from sqlalchemy.orm import Session, aliased

from evolve.store.scans import STREAM_BATCH
from evolve.store.tables import AttemptRow, ScoreRow

_NOT_ANSWERS = ("policy_call", "policy_error")


@dataclass(frozen=True)
class IterationChoice:
    """One committed iteration >= 1 of a run, in commit order."""

    iteration: int
    policy: str
    prompt_variant: str | None  # None: no prompt evolution (or a store from before it)
    parent_scalar: float | None  # None when no call of the iteration reached a parent (every request failed)
    answers: int  # answer outcomes: children, duplicates, edit and evaluation failures
    children: int  # valid, scored children
    improvements: int  # children scoring above their parent
    best_scalar: float | None  # the best child's scalar; None without a child

    @property
    def gain(self) -> float:
        """What the iteration brought: how far its best child rose above its parent, 0 when none did."""
        if self.best_scalar is None or self.parent_scalar is None:
            return 0.0
        return max(0.0, self.best_scalar - self.parent_scalar)


def _has_variant_column(session: Session) -> bool:
    return any(column["name"] == "prompt_variant" for column in inspect(session.get_bind()).get_columns("attempts"))


@dataclass
class _Tally:
    iteration: int
    policy: str
    prompt_variant: str | None
    parent_scalar: float | None = None
    answers: int = 0
    children: int = 0
    improvements: int = 0
    best_scalar: float | None = None

    def add(self, kind: str, parent_scalar: float | None, child_scalar: float | None) -> None:
        if parent_scalar is not None:
            self.parent_scalar = parent_scalar
        if kind in _NOT_ANSWERS:
            return
        self.answers += 1
        if kind != "child" or child_scalar is None:
            return
        self.children += 1
        self.improvements += parent_scalar is not None and child_scalar > parent_scalar
        self.best_scalar = child_scalar if self.best_scalar is None else max(self.best_scalar, child_scalar)

    def done(self) -> IterationChoice:
        return IterationChoice(self.iteration, self.policy, self.prompt_variant, self.parent_scalar, self.answers,
                               self.children, self.improvements, self.best_scalar)


def iteration_choices(session: Session, run_id: int) -> Iterator[IterationChoice]:
    """The run's committed iterations >= 1 in commit order (an iteration's rows are written in one transaction, so
    their ids follow the commits), streamed."""
    parent_score, child_score = aliased(ScoreRow), aliased(ScoreRow)
    variant = AttemptRow.prompt_variant if _has_variant_column(session) else literal(None)
    query = (select(AttemptRow.iteration, AttemptRow.kind, AttemptRow.policy, variant, parent_score.scalar,
                    child_score.scalar)
             .outerjoin(parent_score, parent_score.program_id == AttemptRow.parent_id)
             .outerjoin(child_score, child_score.program_id == AttemptRow.program_id)
             .where(AttemptRow.run_id == run_id, AttemptRow.iteration >= 1)
             .order_by(AttemptRow.id).execution_options(yield_per=STREAM_BATCH))
    tally: _Tally | None = None
    for iteration, kind, policy, prompt_variant, parent_scalar, child_scalar in session.connection().execute(query):
        if tally is None or tally.iteration != iteration:
            if tally is not None:
                yield tally.done()
            tally = _Tally(iteration, policy, prompt_variant)
        tally.add(kind, parent_scalar, child_scalar)
    if tally is not None:
        yield tally.done()
