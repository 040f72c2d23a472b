"""Runs inside the sandbox: the candidate's encode on each test input (None and the reason where it fails)."""

from types import ModuleType


def drive(candidate: ModuleType, inputs: list[str]) -> dict:
    encode = getattr(candidate, "encode", None)
    if not callable(encode):
        raise TypeError("the program defines no function encode(s)")
    outputs: list[str | None] = []
    errors: list[str] = []
    first_failure: Exception | None = None
    for text in inputs:
        try:
            output = encode(text)
        except MemoryError:  # the whole call is `memory`: the next input would only allocate until the wall clock
            raise
        except Exception as exc:  # a failing test case costs that case only
            first_failure = first_failure or exc
            outputs.append(None)
            errors.append(f"raised {type(exc).__name__}: {exc}"[:200])
            continue
        outputs.append(output if isinstance(output, str) else None)
        errors.append("" if isinstance(output, str) else f"returned {type(output).__name__}, not str")
    if first_failure is not None and all(output is None for output in outputs):
        raise first_failure  # it fails on every input: a crash, with its reason
    return {"outputs": outputs, "errors": errors}
