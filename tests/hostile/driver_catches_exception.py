"""A problem author's driver (not a candidate): each input in its own `except Exception`, so that a failing input
costs that input only. It does not re-raise MemoryError, as the shipped drivers now do: a memory bomb must still be
scored `memory`, not retried input after input until the wall clock runs out."""

from types import ModuleType


def drive(candidate: ModuleType, inputs: list[int]) -> dict:
    outputs: list[object] = []
    for number in inputs:
        try:
            outputs.append(candidate.solve(number))
        except Exception as exc:  # noqa: BLE001 - the pattern under test
            outputs.append(f"raised {type(exc).__name__}")
    return {"outputs": outputs}
