"""Trusted evaluator for fizzbuzz: one objective per test input; expected strings are computed here only, and
the feedback shows what the candidate returned, never them."""

from pathlib import Path

from evolve.evaluator_api import CandidateFailure, EvaluationResult, Sandbox, fail_unless_ok

DRIVER = Path(__file__).with_name("driver.py")
INPUTS = [*range(1, 16), 30, 33, 50, 98, 105]


def reference(n: int) -> str:
    return "Fizz" * (n % 3 == 0) + "Buzz" * (n % 5 == 0) or str(n)


def evaluate(program_path: str, sandbox: Sandbox) -> EvaluationResult:
    reply = fail_unless_ok(sandbox.run_driver(program_path, DRIVER, INPUTS)).value
    outputs = reply.get("outputs") if isinstance(reply, dict) else None
    errors = reply.get("errors") if isinstance(reply, dict) else None
    if not (isinstance(outputs, list) and isinstance(errors, list) and len(outputs) == len(errors) == len(INPUTS)):
        raise CandidateFailure("bad_output", "the driver did not return one output per test case")
    if all(output is None for output in outputs):
        raise CandidateFailure("crash", f"fizzbuzz failed on every input: {errors[0]}")
    scores, failures = {}, []
    for number, (n, output, error) in enumerate(zip(INPUTS, outputs, errors, strict=True)):
        expected = reference(n)
        scores[f"test_{number:02d}"] = 1.0 if output == expected else 0.0
        if output != expected:
            what = (error or "gave no answer") if output is None else f"got {output!r}, which is wrong"
            failures.append(f"fizzbuzz({n}) {what}")  # never the expected string: the policy could copy it
    feedback = "all tests pass" if not failures else "; ".join(failures[:3])
    return EvaluationResult(scores=scores, artifacts={"feedback": feedback})
