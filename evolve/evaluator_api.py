"""What a problem's evaluator.py imports: its result type, the candidate-failure exception, the sandbox."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import get_args

from evolve.records import FailureKind
from evolve.sandbox.core import Sandbox, SandboxLimits, SandboxResult, SandboxSession

__all__ = ["CANDIDATE_FAILURE_KINDS", "FEEDBACK_CHARS", "CandidateFailure", "EvaluationResult", "Sandbox",
           "SandboxLimits", "SandboxResult", "SandboxSession", "call_failure", "fail_unless_any_ok", "fail_unless_ok",
           "int_answer_failure", "join_feedback"]

FEEDBACK_CHARS = 200  # the prompt drops longer feedback: tables of numbers make a small model copy them into code
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


def fail_unless_any_ok(results: Sequence[SandboxResult]) -> Sequence[SandboxResult]:
    """The results of call_each / run_driver_each when at least one call ran fine (a failing call then costs
    its own test only); else CandidateFailure: "timeout" when every call ran out of time, otherwise the status
    and reason of the first failure (a program that fails on every input is broken as a whole)."""
    if any(result.ok for result in results) or not results:
        return results
    if all(result.status == "timeout" for result in results):
        raise CandidateFailure("timeout", f"every test ran past its time limit ({results[0].detail})")
    first = next(result for result in results if result.status != "timeout")
    raise CandidateFailure(first.status, first.detail)


def join_feedback(failures: Sequence[str], max_chars: int = FEEDBACK_CHARS) -> str:
    """One feedback line for the next prompt: as many whole failure lines as fit in max_chars, "; "-joined
    (the first one cut short if it alone does not fit); "all tests pass" when there are none."""
    if not failures:
        return "all tests pass"
    text = failures[0] if len(failures[0]) <= max_chars else failures[0][: max_chars - 3] + "..."
    for failure in failures[1:]:
        if len(text) + 2 + len(failure) > max_chars:
            break
        text += "; " + failure
    return text


def call_failure(call: str, run: SandboxResult, limit_s: float) -> str | None:
    """Why a timed call (one of call_each's results) gave no answer, as one feedback line about `call`; None
    when it returned a value."""
    if run.status == "timeout":
        return f"{call} too slow, stopped at the {limit_s:g} s limit"
    if not run.ok:
        return f"{call} failed: {run.detail}"
    return None


def int_answer_failure(call: str, run: SandboxResult, expected: int, limit_s: float, *,
                       reveal: bool = False) -> str | None:
    """Why a timed call that should return the int `expected` failed its test, as one feedback line; None when
    it passed (a bool is not an int; a numpy integer arrives as one). The line says what the candidate returned
    and never shows `expected` (the policy could hard-code a hidden test's answer); reveal=True adds it, for
    tests whose expected answers are public anyway (the shipped evaluators never pass it)."""
    failure = call_failure(call, run, limit_s)
    if failure is not None:
        return failure
    if type(run.value) is not int:
        return f"{call} returned {type(run.value).__name__}, not int"
    if run.value == expected:
        return None
    if reveal:
        return f"{call} should be {expected} but got {run.value!r}"
    return f"{call} got {run.value!r}, which is wrong"
