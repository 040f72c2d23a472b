"""The evaluator feedback shown with the next prompt says which tests fail and what the candidate answered, never a
hidden test's expected value (the policy could hard-code it): the six hand-written problems, and HumanEval's
scorer, where a wrong boolean answer would give the expected one away and is named without its inputs."""

from __future__ import annotations

import asyncio
import re
from collections.abc import Callable
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest
from script_modules import load_module
from unhurried import unhurried

from evolve.evaluator_api import SandboxResult, join_feedback
from evolve.problems.evaluation import evaluate_program
from evolve.problems.generated.folders import check_source, reference_program, write_problem
from evolve.problems.generated.generator import generate
from evolve.problems.generated.operations import KINDS, LIST, NUMBER, TEXT
from evolve.problems.humaneval import STUB_BODY, import_humaneval
from evolve.problems.humaneval_check import CallResult, run_check, short
from evolve.problems.problem import Problem, load_problem
from evolve.records import Evaluation

ROOT = Path(__file__).resolve().parents[1]
PROGRAMS = ROOT / "programs"
SOLUTIONS = Path(__file__).parent / "solutions"


def evaluate(problem: Problem, code: str) -> Evaluation:
    result = asyncio.run(evaluate_program(problem, code))
    assert result.ok, result
    return result


def evaluator(name: str) -> ModuleType:
    return load_module(PROGRAMS / name / "evaluator.py", f"feedback_test_{name}_evaluator")


def shifted(value: Any) -> Any:
    """The wrong answer the candidates below give: never equal to the right one, nor holding it as a token."""
    if isinstance(value, str):
        return value + "!"
    if isinstance(value, list):
        return [item + 1000 for item in value]
    return value + 1000


WRONG = '''

_right = {function}


def _shifted(value):
    if isinstance(value, str):
        return value + "!"
    if isinstance(value, list):
        return [item + 1000 for item in value]
    return value + 1000


def {function}(*args):
    return _shifted(_right(*args))
'''


def wrong_solution(name: str, function: str) -> str:
    """The known-good solution with every answer shifted (shifted()): every test fails, the answers still typed."""
    return (SOLUTIONS / f"{name}.py").read_text() + WRONG.format(function=function)


# per problem: the function, and for a test number the call as the feedback names it and the right answer,
# both from the evaluator's own tests, labels and reference
Case = Callable[[ModuleType, int], tuple[str, Any]]


def _coin_change(module: ModuleType, number: int) -> tuple[str, Any]:
    given, _ = module.TESTS[number]
    coins, amount = module.build(given) if module.is_generated(given) else given
    return module.label(given), module.reference_coins(coins, amount)


def _lis(module: ModuleType, number: int) -> tuple[str, Any]:
    given, _ = module.TESTS[number]
    return module.label(given), module.reference_lis(module.build(given) if module.is_generated(given) else given)


def _meeting_rooms(module: ModuleType, number: int) -> tuple[str, Any]:
    given, _ = module.TESTS[number]
    intervals = module.build(given) if module.is_generated(given) else given
    return module.label(given), module.reference_rooms(intervals)


def _shortest_paths(module: ModuleType, number: int) -> tuple[str, Any]:
    given, _ = module.TESTS[number]
    graph = module.build(given) if module.is_generated(given) else (given[0], given[1], given[2])
    return module.label(given, graph), module.reference_distances(*graph)


def _run_length(module: ModuleType, number: int) -> tuple[str, Any]:
    text = module.INPUTS[number]
    return f"encode({text!r})", module.reference_encode(text)


def _fizzbuzz(module: ModuleType, number: int) -> tuple[str, Any]:
    n = module.INPUTS[number]
    return f"fizzbuzz({n})", module.reference(n)


SHIPPED: dict[str, tuple[str, Case]] = {
    "coin_change": ("min_coins", _coin_change),
    "lis": ("lis_length", _lis),
    "meeting_rooms": ("min_rooms", _meeting_rooms),
    "shortest_paths": ("shortest_paths", _shortest_paths),
    "run_length": ("encode", _run_length),
    "fizzbuzz": ("fizzbuzz", _fizzbuzz),
}


def shown_expected(tail: str, expected: Any) -> bool:
    """Whether the part of a feedback line after the call holds the expected answer."""
    if isinstance(expected, int):
        return str(expected) in re.findall(r"-?\d+", tail)
    return repr(expected) in tail


@pytest.mark.parametrize("name", list(SHIPPED))
def test_a_wrong_candidate_sees_what_it_answered_and_never_the_expected_answer(name: str, tmp_path: Path) -> None:
    function, case = SHIPPED[name]
    module = evaluator(name)
    result = evaluate(unhurried(name, tmp_path), wrong_solution(name, function))
    assert set(result.scores.values()) == {0.0}  # every answer is wrong
    feedback = result.artifacts["feedback"]
    assert "should be" not in feedback
    lines = feedback.split("; ")
    assert len(lines) >= 2, feedback
    for line in lines:
        if name == "fizzbuzz":  # its lines carry no test name: fizzbuzz(n) of the n-th input
            number, prefix = module.INPUTS.index(int(line[len("fizzbuzz("):line.index(")")])), ""
        else:
            number = int(line[len("test_"):line.index(":")])
            prefix = f"test_{number:02d}: "
        if hasattr(module, "TESTS"):
            assert not module.is_generated(module.TESTS[number][0])  # hand-written: its answer used to be shown
        call, expected = case(module, number)
        assert line.startswith(prefix + call + " "), (line, call)
        tail = line[len(prefix + call):]
        assert tail == f" got {shifted(expected)!r}, which is wrong", line
        assert not shown_expected(tail, expected), (line, expected)


def test_shortest_paths_names_the_first_wrong_node_of_a_long_answer_without_its_expected_distance() -> None:
    module = evaluator("shortest_paths")
    given, limit_s = module.TESTS[8]  # distances up to 6 * 10^9: the whole answer is too long for the line
    graph = (given[0], given[1], given[2])
    expected = module.reference_distances(*graph)
    answer = [distance + (5 if node == 3 else 0) for node, distance in enumerate(expected)]
    line = module.failure_line("test_08", given, graph, expected, SandboxResult("ok", answer), limit_s)
    assert line == f"test_08: {module.label(given, graph)} wrong distance for node 3 (got {answer[3]})"
    assert str(expected[3]) not in line


# ---------------------------------------------------------------- HumanEval's scorer


@pytest.fixture(scope="module")
def humaneval(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("humaneval")
    import_humaneval(out, [0, 23, 52])
    return out


def test_a_wrong_boolean_answer_is_named_without_its_inputs_or_value(humaneval: Path) -> None:
    problem = load_problem("he_052", humaneval)  # below_threshold(l, t) -> bool
    result = evaluate(problem, problem.initial_code.replace(STUB_BODY, "return not all(x < t for x in l)"))
    assert set(result.scores.values()) == {0.0}
    feedback = result.artifacts["feedback"]
    line = r"test_\d{3}: below_threshold\(\.\.\.\) gave a wrong boolean answer"
    assert re.fullmatch(f"{line}(; {line})*", feedback), feedback
    assert "True" not in feedback and "False" not in feedback and "[1, 2, 4, 10]" not in feedback

    problem = load_problem("he_000", humaneval)  # has_close_elements(numbers, threshold) -> bool
    result = evaluate(problem, problem.initial_code.replace(STUB_BODY, "return True"))
    failed = [name for name, score in result.scores.items() if score == 0.0]
    assert failed and result.artifacts["feedback"] == join_feedback(
        [f"{name}: has_close_elements(...) gave a wrong boolean answer" for name in failed])


def test_a_boolean_answer_that_makes_the_test_raise_is_named_without_its_inputs() -> None:
    source = "def check(candidate):\n    assert candidate([3, 4], 99) + 'x' == 'yx'\n"
    outcomes, stopped = run_check(source, "check.py", "f", lambda args: CallResult("ok", True))
    assert stopped == "" and [outcome.failure for outcome in outcomes] == [
        "f(...) gave a boolean answer that made the test raise TypeError"]


def test_a_wrong_answer_of_another_type_keeps_its_line(humaneval: Path) -> None:
    problem = load_problem("he_023", humaneval)  # strlen(string) -> int
    result = evaluate(problem, problem.initial_code.replace(STUB_BODY, "return len(string) + 1"))
    assert result.artifacts["feedback"].startswith("test_000: strlen('') returned 1, which fails the test; "
                                                   "test_001: strlen('x') returned 2, which fails the test")


# ---------------------------------------------------------------- generated problems: no booleans, lines unchanged


def test_generated_problems_never_answer_with_a_bool() -> None:
    assert {kind.gives for kind in KINDS} == {LIST, NUMBER, TEXT}
    for level in (1, 2, "2e", "2ee"):
        for problem in generate(20, level, 0):
            for case in problem.tests + problem.examples:
                values = case.expected if isinstance(case.expected, list) else [case.expected]
                assert all(type(value) is not bool for value in values), (problem.name, case)


def test_a_generated_problems_feedback_line_is_the_one_it_always_was(tmp_path: Path) -> None:
    """Before booleans were hidden, a failed assert read `f(ARGS) returned VALUE, which fails the test`, its test
    name in front: a non-bool answer still gets exactly that line, so the generated pool's prompts are unchanged."""
    for problem in generate(4, 1, 0):
        outcomes, stopped = run_check(check_source(problem), "check.py", problem.function,
                                      lambda args: CallResult("ok", [-7]))
        assert stopped == "" and len(outcomes) == len(problem.tests)
        for case, outcome in zip(problem.tests, outcomes, strict=True):
            assert outcome.passed == (case.expected == [-7])
            if not outcome.passed:
                call = f"{problem.function}({short(case.argument, 40)})"
                assert outcome.failure == f"{call} returned [-7], which fails the test"
    problem = generate(1, 1, 0)[0]
    write_problem(problem, tmp_path / problem.name)
    result = evaluate(load_problem(problem.name, tmp_path),
                      reference_program(problem) + WRONG.format(function=problem.function))
    wrong = [index for index, case in enumerate(problem.tests) if shifted(case.expected) != case.expected]
    lines = [f"test_{index:03d}: {problem.function}({short(problem.tests[index].argument, 40)}) returned "
             f"{short(shifted(problem.tests[index].expected))}, which fails the test" for index in wrong]
    assert [name for name, score in result.scores.items() if score == 0.0] == [f"test_{index:03d}" for index in wrong]
    assert lines and result.artifacts["feedback"] == join_feedback(lines)
