"""What a problem's evaluator.py imports: its result type, the candidate-failure exception, the sandbox."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import get_args

from evolve.records import FailureKind
from evolve.sandbox import Sandbox, SandboxLimits, SandboxResult

__all__ = ["CANDIDATE_FAILURE_KINDS", "CandidateFailure", "EvaluationResult", "Sandbox", "SandboxLimits",
           "SandboxResult", "fail_unless_ok"]

CANDIDATE_FAILURE_KINDS: tuple[str, ...] = tuple(kind for kind in get_args(FailureKind) if kind != "evaluator_error")


@dataclass(frozen=True)
class EvaluationResult:
    """Scores (exactly the declared objectives) plus short text artifacts, e.g. feedback for the next prompt."""

    scores: dict[str, float]
    artifacts: dict[str, str] = field(default_factory=dict)


class CandidateFailure(Exception):
    """Raised by an evaluator when the candidate failed; kind is timeout, memory, crash or bad_output."""

    def __init__(self, kind: str, detail: str = "") -> None:
        if kind not in CANDIDATE_FAILURE_KINDS:
            raise ValueError(f"CandidateFailure kind must be one of {', '.join(CANDIDATE_FAILURE_KINDS)}, not {kind!r}")
        super().__init__(f"{kind}: {detail}" if detail else kind)
        self.kind = kind
        self.detail = detail


def fail_unless_ok(result: SandboxResult) -> SandboxResult:
    """The result itself when the candidate ran fine, else CandidateFailure with the sandbox's status and reason."""
    if result.status != "ok":
        raise CandidateFailure(result.status, result.detail)
    return result
