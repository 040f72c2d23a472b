"""Trusted evaluator for run_length: one objective per test case, expected outputs computed here.

Only the inputs go to the candidate's child; the expected outputs are computed in this trusted
process by a reference encoder and never leave it (the feedback shows what the candidate returned).
"""

from itertools import groupby
from pathlib import Path

from evolve.evaluator_api import CandidateFailure, EvaluationResult, Sandbox, fail_unless_ok

DRIVER = Path(__file__).with_name("driver.py")
INPUTS = (
    "",
    "a",
    "abc",
    "aaa",
    "aaabcc",
    "aabbaa",
    "zzzzzzzzzzzz",
    "mississippi",
    "AaAa",
    "11122",
    "  x  ",
    "a" * 100 + "b",
)


def reference_encode(text: str) -> str:
    return "".join(f"{len(list(run))}{char}" for char, run in groupby(text))


def evaluate(program_path: str, sandbox: Sandbox) -> EvaluationResult:
    reply = fail_unless_ok(sandbox.run_driver(program_path, DRIVER, list(INPUTS))).value
    outputs = reply.get("outputs") if isinstance(reply, dict) else None
    errors = reply.get("errors") if isinstance(reply, dict) else None
    if not (isinstance(outputs, list) and isinstance(errors, list) and len(outputs) == len(errors) == len(INPUTS)):
        raise CandidateFailure("bad_output", "the driver did not return one output per test case")
    scores, failures = {}, []
    for number, (text, output, error) in enumerate(zip(INPUTS, outputs, errors, strict=True)):
        expected = reference_encode(text)
        name = f"test_{number:02d}"
        scores[name] = 1.0 if output == expected else 0.0
        if output != expected:
            what = (error or "gave no answer") if output is None else f"got {output!r}, which is wrong"
            failures.append(f"{name}: encode({text!r}) {what}")  # never the expected output: the policy could copy it
    feedback = "all tests pass" if not failures else "; ".join(failures[:3])
    return EvaluationResult(scores=scores, artifacts={"feedback": feedback})
