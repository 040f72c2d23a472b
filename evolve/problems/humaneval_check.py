"""Runs a HumanEval `check(candidate)` in the trusted process, one objective per assert it executes.

The test module (the problem's prompt followed by its test, both as written: check.py in the problem folder) is
executed here with every `assert` inside `check` rewritten into a call that records whether it held. `candidate`
is a stand-in: each call sends its arguments to the real candidate (in the sandbox, or a trusted function when
importing) and returns the answer, so the assert's comparison, tolerance or `is True` is evaluated here, by
trusted code, on values rebuilt with their Python types. A loop of asserts over generated inputs gives one
objective per iteration; the test's `random` is a private generator seeded with RANDOM_SEED, so the inputs are
the same at every evaluation. A call that failed (crash, timeout, a value that cannot be read) fails the next
assert executed after it, which is the one that uses its answer. A failed assert's feedback line names the call and
what the candidate returned, never the expected value; a boolean answer (the expected one being the other bool) is
named with neither its inputs nor its value.
"""

from __future__ import annotations

import ast
import builtins
import random
import types
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from evolve.evaluator_api import (
    CandidateFailure,
    EvaluationResult,
    Sandbox,
    SandboxResult,
    SandboxSession,
    join_feedback,
)
from evolve.problems.humaneval_codec import decode, encode

RANDOM_SEED = 1234  # the seed of `random` inside every check, so loop-generated inputs are fixed
CALL_LIMIT_S = 2.0  # each call of the candidate, timed in this process
MAX_TIMEOUTS = 3  # after this many calls ran past their limit, the remaining calls are not made
DRIVER = Path(__file__).with_name("humaneval_codec.py")
_ASSERT_HOOK = "__evolve_assert__"
_SHOWN_CHARS = 60


@dataclass(frozen=True)
class CallResult:
    """One call of the candidate: its answer, or the sandbox status and reason it gave none."""

    status: str  # "ok", or a sandbox failure: timeout, memory, crash, bad_output
    value: Any = None
    detail: str = ""


@dataclass(frozen=True)
class TestOutcome:
    """One executed assert: whether it held and, when not, one line saying which call and why."""

    passed: bool
    failure: str = ""


Caller = Callable[[tuple[Any, ...]], CallResult]


class _NoAnswer:
    """What a failed call returns to the test: it equals nothing, and the assert that uses it fails anyway."""

    def __repr__(self) -> str:
        return "<no answer>"


NO_ANSWER = _NoAnswer()


def short(value: Any, chars: int = _SHOWN_CHARS) -> str:
    text = repr(value)
    return text if len(text) <= chars else text[: chars - 3] + "..."


class _AssertsToHooks(ast.NodeTransformer):
    """`assert test, message` -> `__evolve_assert__(lambda: test)`; a constant test (`assert True`) is no test."""

    def visit_Assert(self, node: ast.Assert) -> ast.stmt:
        if isinstance(node.test, ast.Constant):
            return ast.copy_location(ast.Pass(), node)
        lazy = ast.Lambda(args=ast.arguments(posonlyargs=[], args=[], kwonlyargs=[], kw_defaults=[], defaults=[]),
                          body=node.test)
        call = ast.Call(func=ast.Name(_ASSERT_HOOK, ast.Load()), args=[lazy], keywords=[])
        return ast.copy_location(ast.Expr(call), node)


def instrument(source: str, filename: str) -> types.CodeType:
    """The test module's code with the asserts of its top-level `check` function turned into hook calls."""
    tree = ast.parse(source, filename=filename)
    checks = [node for node in tree.body if isinstance(node, ast.FunctionDef) and node.name == "check"]
    if not checks:
        raise ValueError(f"{filename}: defines no check(candidate)")
    _AssertsToHooks().visit(checks[-1])
    return compile(ast.fix_missing_locations(tree), filename, "exec")


def seeded_random(seed: int) -> types.ModuleType:
    """A private `random` module: its functions draw from one Random(seed); its classes are the real ones."""
    generator = random.Random(seed)
    module = types.ModuleType("random")
    for name in random.__all__:
        bound = getattr(generator, name, None)
        setattr(module, name, bound if callable(bound) and not isinstance(bound, type) else getattr(random, name))
    return module


def _builtins_with(private: dict[str, types.ModuleType]) -> dict[str, Any]:
    real_import = builtins.__import__

    def import_(name: str, globals_: Any = None, locals_: Any = None, fromlist: Any = (), level: int = 0) -> Any:
        if level == 0 and name in private:
            return private[name]
        return real_import(name, globals_, locals_, fromlist, level)

    namespace = dict(vars(builtins))
    namespace["__import__"] = import_
    return namespace


class _CheckRun:
    """The state of one check: the candidate stand-in, the calls since the last assert, and the outcomes."""

    def __init__(self, function: str, caller: Caller) -> None:
        self.function, self.caller = function, caller
        self.pending: list[tuple[str, CallResult]] = []
        self.outcomes: list[TestOutcome] = []

    def candidate(self, *args: Any, **kwargs: Any) -> Any:
        if kwargs:
            raise TypeError(f"{self.function}() is called with positional arguments only here")
        label = f"{self.function}({', '.join(short(arg, 40) for arg in args)})"
        result = self.caller(args)
        self.pending.append((label, result))
        return result.value if result.status == "ok" else NO_ANSWER

    def hook(self, test: Callable[[], Any]) -> None:
        try:
            passed, error = bool(test()), ""
        except Exception as exc:  # noqa: BLE001 - the candidate's answer made the test itself raise
            passed, error = False, f"{type(exc).__name__}"
        calls, self.pending = self.pending, []
        failed = next(((label, result) for label, result in calls if result.status != "ok"), None)
        if failed is not None:
            label, result = failed
            reason = "too slow" if result.status == "timeout" else result.status
            self.outcomes.append(TestOutcome(False, f"{label}: {reason} ({result.detail})"))
        elif passed:
            self.outcomes.append(TestOutcome(True))
        elif calls and type(calls[-1][1].value) is bool:
            # a wrong bool gives the expected answer away (the other one): the line names neither it nor the inputs
            what = f"gave a boolean answer that made the test raise {error}" if error else "gave a wrong boolean answer"
            self.outcomes.append(TestOutcome(False, f"{self.function}(...) {what}"))
        elif calls:
            label, result = calls[-1]
            because = f"made the test raise {error}" if error else "which fails the test"
            self.outcomes.append(TestOutcome(False, f"{label} returned {short(result.value)}, {because}"))
        else:
            self.outcomes.append(TestOutcome(False, f"the test failed ({error or 'false'})"))


def run_check(source: str, filename: str, function: str, caller: Caller) -> tuple[list[TestOutcome], str]:
    """Execute the test module `source` (check.py) and its check(candidate), `caller` answering each call; the
    outcome of every assert it executed, in order, and why the check stopped early ("" when it ran to the end)."""
    code = instrument(source, filename)
    run = _CheckRun(function, caller)
    namespace: dict[str, Any] = {"__name__": "humaneval_check", "__file__": filename,
                                 "__builtins__": _builtins_with({"random": seeded_random(RANDOM_SEED)})}
    exec(code, namespace)  # noqa: S102 - trusted: the problem's own prompt and test, as the dataset wrote them
    namespace[_ASSERT_HOOK] = run.hook
    namespace[function] = run.candidate  # as in HumanEval's harness, where the test sees the completed function
    try:
        namespace["check"](run.candidate)
    except Exception as exc:  # noqa: BLE001 - a failed answer used outside an assert stops the check there
        return run.outcomes, f"the test stopped after {len(run.outcomes)} asserts: {type(exc).__name__}: {exc}"
    return run.outcomes, ""


def sandbox_caller(session: SandboxSession, function: str, limit_s: float = CALL_LIMIT_S,
                   max_timeouts: int = MAX_TIMEOUTS) -> tuple[Caller, list[SandboxResult]]:
    """A caller that sends each call to the candidate in `session`, timed from here; and the list it fills
    with the sandbox's result of every call (for telling a broken program from a wrong one)."""
    made: list[SandboxResult] = []

    def call(args: tuple[Any, ...]) -> CallResult:
        timeouts = sum(1 for result in made if result.status == "timeout")
        if timeouts >= max_timeouts:
            return CallResult("timeout", detail=f"not run: {timeouts} calls already ran past the {limit_s:g} s limit")
        try:
            result = session.drive({"function": function, "args": encode(list(args))}, limit_s=limit_s)
        except (ValueError, RecursionError, MemoryError) as exc:  # a reply the sandbox could not even parse
            session.close()
            result = SandboxResult("bad_output", detail=f"unreadable reply ({type(exc).__name__})")
        made.append(result)
        if not result.ok:
            return CallResult(result.status, detail=result.detail[:200])
        return _answer(result.value)

    return call, made


def _answer(reply: Any) -> CallResult:
    if type(reply) is not dict or len(reply) != 1:
        return CallResult("bad_output", detail="the reply is not the driver's")
    if "bad_output" in reply:
        return CallResult("bad_output", detail=str(reply["bad_output"])[:200])
    if "value" not in reply:
        return CallResult("bad_output", detail="the reply is not the driver's")
    try:
        return CallResult("ok", decode(reply["value"]))
    except (ValueError, RecursionError, OverflowError, MemoryError) as exc:
        return CallResult("bad_output", detail=f"returned a value that cannot be read: {str(exc)[:100]}")


def objective_names(count: int) -> list[str]:
    return [f"test_{index:03d}" for index in range(count)]


def scores_of(outcomes: list[TestOutcome], stopped: str, count: int) -> tuple[dict[str, float], list[str]]:
    """One score per declared objective (an assert not reached scores 0) and the failure lines, named."""
    scores, failures = {}, []
    for index, name in enumerate(objective_names(count)):
        outcome = outcomes[index] if index < len(outcomes) else TestOutcome(False, stopped or "not reached")
        scores[name] = 1.0 if outcome.passed else 0.0
        if not outcome.passed:
            failures.append(f"{name}: {outcome.failure}")
    return scores, failures


def _load_failure(session: SandboxSession, function: str) -> CandidateFailure | None:
    """Why the candidate cannot be called at all (it does not import, or lacks the function), else None."""
    probe = session.drive({"function": function, "args": None}, limit_s=CALL_LIMIT_S)
    if not probe.ok:
        return CandidateFailure(probe.status, probe.detail)
    if probe.value != {"defined": True}:
        return CandidateFailure("crash", f"the program defines no function '{function}'")
    return None


def evaluate_check(check_path: Path, function: str, objectives: int, program_path: str,
                   sandbox: Sandbox) -> EvaluationResult:
    """The evaluate() of an imported HumanEval problem: one objective per executed assert of check.py.

    A program that does not import, lacks the function or runs out of time on every call is a failed candidate
    (CandidateFailure); one whose calls raise or answer wrongly scores 0 on those tests, so a stub that raises
    NotImplementedError is a seed that scores zeros."""
    with sandbox.session(program_path, driver_path=DRIVER) as session:
        failure = _load_failure(session, function)
        if failure is not None:
            raise failure
        caller, made = sandbox_caller(session, function)
        outcomes, stopped = run_check(check_path.read_text(), str(check_path), function, caller)
    if made and all(result.status == "timeout" for result in made):
        raise CandidateFailure("timeout", f"every call made ran past its time limit ({made[0].detail}); "
                                          f"{len(made)} made, the rest not run")
    scores, failures = scores_of(outcomes, stopped, objectives)
    return EvaluationResult(scores=scores, artifacts={"feedback": join_feedback(failures)})
