"""When a run stops before its iteration budget: run.stop_when_solved (a program solves the problem) and
run.target_score (a program's scalar, the problem's reduction of its vector, reaches the target).

The reason is not a column of its own: it follows from what the store holds (the run's config and its programs),
so a resumed run reads the same reason and does not continue, and every report can name it."""

from __future__ import annotations

from dataclasses import dataclass

from evolve.config import RunSection
from evolve.records import Program


@dataclass(frozen=True)
class StopRule:
    stop_when_solved: bool = False
    target_score: float | None = None

    @classmethod
    def of(cls, run: RunSection) -> StopRule:
        return cls(run.stop_when_solved, run.target_score)

    @property
    def active(self) -> bool:
        return self.stop_when_solved or self.target_score is not None

    def reason(self, best: Program | None, first_solved: Program | None) -> str:
        """Why the run stops now ("" while it goes on): 'solved at iteration N' or 'target reached at ...'."""
        if self.stop_when_solved and first_solved is not None:
            return f"solved at iteration {first_solved.iteration}"
        if self.target_score is not None and best is not None and best.scalar >= self.target_score:
            return (f"target score {self.target_score:g} reached (scalar {best.scalar:.4g} at iteration "
                    f"{best.iteration})")
        return ""


def stored_stop_reason(config_json: str, best: Program | None, first_solved: Program | None) -> str:
    """Why a stored run stopped before its budget, read from its stored config and programs ("" for none, or for a
    config this version cannot read)."""
    from evolve.config import stored_config

    try:
        rule = StopRule.of(stored_config(config_json).run)
    except ValueError:  # not JSON, or a config of another version: no rule to read
        return ""
    return rule.reason(best, first_solved)
