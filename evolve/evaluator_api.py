"""What a problem's evaluator.py may import: its result type, the candidate-failure exception, a helper."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, get_args

from evolve.records import FailureKind
from evolve.sandbox import SandboxResult

CANDIDATE_FAILURE_KINDS: tuple[str, ...] = tuple(kind for kind in get_args(FailureKind) if kind != "evaluator_error")


@dataclass(frozen=True)
class EvaluationResult:
    """Scores (one per declared objective) plus short text artifacts, e.g. feedback for the next prompt."""

    scores: dict[str, float]
    artifacts: dict[str, str] = field(default_factory=dict)


class CandidateFailure(Exception):
    """Raised by an evaluator when the candidate, not the evaluator, failed (kind: timeout, memory, crash, bad_output)."""

    def __init__(self, kind: str, detail: str = "") -> None:
        if kind not in CANDIDATE_FAILURE_KINDS:
            raise ValueError(f"CandidateFailure kind must be one of {', '.join(CANDIDATE_FAILURE_KINDS)}, not {kind!r}")
        super().__init__(f"{kind}: {detail}" if detail else kind)
        self.kind = kind
        self.detail = detail


def candidate_value(result: SandboxResult) -> Any:
    """The value the candidate returned, or CandidateFailure carrying the sandbox's status and reason."""
    if result.status != "ok":
        raise CandidateFailure(result.status, result.detail)
    return result.value
