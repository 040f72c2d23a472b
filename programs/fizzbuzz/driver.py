"""Runs inside the sandbox: the candidate's fizzbuzz on each test input (None and the reason where it fails)."""

from types import ModuleType


def drive(candidate: ModuleType, inputs: list[int]) -> dict:
    fizzbuzz = getattr(candidate, "fizzbuzz", None)
    if not callable(fizzbuzz):
        raise TypeError("the program defines no function fizzbuzz(n)")
    outputs: list[str | None] = []
    errors: list[str] = []
    for n in inputs:
        try:
            output = fizzbuzz(n)
        except MemoryError:  # the whole call is `memory`: the next input would only allocate until the wall clock
            raise
        except Exception as exc:  # a failing test case costs that case only
            outputs.append(None)
            errors.append(f"raised {type(exc).__name__}: {exc}"[:200])
            continue
        outputs.append(output if isinstance(output, str) else None)
        errors.append("" if isinstance(output, str) else f"returned {type(output).__name__}, not str")
    return {"outputs": outputs, "errors": errors}
