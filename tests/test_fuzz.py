"""Fuzzing (hypothesis) of everything that parses untrusted text: a policy's completion through the edit path, and a
candidate's result line and a problem evaluator's return value on their way to the store. Nothing may raise but the
module's own failure, and every failure must carry a reason that the store can hold.

Parse-level only (no process per example). EVOLVE_FUZZ_EXAMPLES sets the examples per test: 2,000 by default (CI),
10,000 for the full fuzz (`EVOLVE_FUZZ_EXAMPLES=10000 .venv/bin/python -m pytest -q tests/test_fuzz.py`).
"""

from __future__ import annotations

import ast
import json
import math
import os
import time
from collections.abc import Iterator
from dataclasses import asdict
from decimal import Decimal
from fractions import Fraction
from pathlib import Path
from typing import Any, get_args

import numpy as np
import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from evolve.evaluator_api import CandidateFailure, EvaluationResult
from evolve.policies.base import PolicyError
from evolve.policies.openai_api import _parse as parse_server_reply
from evolve.problems.evaluation import _parse_worker_output
from evolve.problems.problem import Problem, load_problem
from evolve.problems.returned import EvaluatorMistake, check_result
from evolve.program_format import EVOLVE_END, EVOLVE_START
from evolve.records import Evaluation, FailureKind
from evolve.sandbox.core import Sandbox, SandboxLimits
from evolve.sandbox.supervisor import RunningChild, parse_result
from evolve.search.edits import (
    EditError,
    apply_diff,
    apply_rewrite,
    block_body,
    defined_names,
    find_blocks,
    salvage_code,
    split_answers,
)

ROOT = Path(__file__).resolve().parents[1]
EXAMPLES = int(os.environ.get("EVOLVE_FUZZ_EXAMPLES", "2000"))
FUZZ = settings(max_examples=EXAMPLES, deadline=None, database=None,
                suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much, HealthCheck.data_too_large])

# ---------------------------------------------------------------- parents and the pieces of a malformed completion

FIZZBUZZ = (ROOT / "programs" / "fizzbuzz" / "initial.py").read_text()
TWO_BLOCKS = f'''"""Two blocks, the second indented in a class."""
import math

{EVOLVE_START}
def area(r: float) -> float:
    return math.pi * r * r
{EVOLVE_END}


class Shape:
    {EVOLVE_START}
    def sides(self) -> int:
        return 0
    {EVOLVE_END}
'''
PARENTS = [FIZZBUZZ, TWO_BLOCKS]
PARENT_LINES = sorted({line for parent in PARENTS for line in parent.split("\n")})
PIECES = [
    EVOLVE_START, EVOLVE_END, "```python", "```", "~~~", "<<<<<<< SEARCH", "<<<<<<<SEARCH", "=======", "=====",
    ">>>>>>> REPLACE", ">>>>>>>", "<response_1>", "</response_1>", "<response_2 >", "</response_2", "<respon",
    "<RESPONSE_3>", "</response_9>", "<answer_1>", "def fizzbuzz(n: int) -> str:", "def fizzbuzz(n):", "    return str(n)",
    '    return "FizzBuzz"', "    if n % 15 == 0:", "def area(r):", "    def sides(self):", "        return 4",
    "print(fizzbuzz(3))", "fizzbuzz(15)", "Here is the improved code:", "Explanation: it is faster.", "(" * 300,
    "[" * 2000, "{" * 50, ")))", "]]", "\x00", "\ud800", "\udfff", "\ufeff", "\t", "\f", "\r\n", "\r", "\u2028",
    "\x1c", '"""', "'''", "\\", "    ", "        ", "if __name__ == '__main__':", "    main()", "return", "lambda: (",
    "class A:", "@functools.cache", "x = 10**10**10", "async def f():", "    await g()", "# comment", "é", "🙂",
    "assert fizzbuzz(3) == 'Fizz'", "import os", "from math import *", "    yield n", "global n", "nonlocal n",
    "def f(x, x):", "    return", "else:", "try:", "except:", "    pass", "f'{", "b'\\xff'", "0x", "1_000", "\x7f",
]
SURROGATE = st.characters(categories=["Cs"])
PIECE = st.one_of(st.sampled_from(PIECES), st.sampled_from(PARENT_LINES), st.text(max_size=12),
                  st.text(alphabet=SURROGATE, min_size=1, max_size=2))
SEPARATOR = st.sampled_from(["\n", "\n", "\n", "", " ", "\n\n", "\r\n"])
JUNK = st.lists(st.tuples(PIECE, SEPARATOR), max_size=16).map(lambda parts: "".join(a + b for a, b in parts))


@st.composite
def diff_answers(draw: st.DrawFn) -> tuple[str, str]:
    """(parent, answer): SEARCH/REPLACE blocks whose SEARCH text is often real parent lines, so edits apply."""
    parent = draw(st.sampled_from(PARENTS))
    lines = parent.split("\n")
    blocks = []
    for _ in range(draw(st.integers(1, 3))):
        start = draw(st.integers(0, len(lines) - 1))
        search = "\n".join(lines[start : start + draw(st.integers(0, 4))])
        search = draw(st.one_of(st.just(search), JUNK))
        replace = draw(st.one_of(JUNK, st.just(search.replace("0", "1").replace("str", "repr"))))
        closing = draw(st.sampled_from([">>>>>>> REPLACE", "", ">>>>>>> REPLACE\n```"]))
        blocks.append(f"<<<<<<< SEARCH\n{search}\n=======\n{replace}\n{closing}")
    noise = draw(JUNK)
    return parent, draw(st.sampled_from(["", "```diff\n"])) + "\n".join(blocks) + draw(st.sampled_from(["", noise]))


@st.composite
def rewrite_answers(draw: st.DrawFn) -> tuple[str, str, str, int]:
    """(parent, answer, prefill, block index): junk, or code near the block's own with junk spliced in."""
    parent = draw(st.sampled_from(PARENTS))
    index = draw(st.integers(-3, 3))
    try:
        body = block_body(parent, index)
    except EditError:
        body = ""
    lines = body.split("\n")
    cut = draw(st.integers(0, len(lines)))
    near = "\n".join(lines[:cut] + [draw(JUNK)] + lines[cut:])
    answer = draw(st.one_of(JUNK, st.just(near), st.builds(lambda a, b: f"{a}\n```python\n{b}\n```\n", JUNK, st.just(near))))
    prefill = draw(st.sampled_from(["", "```python\n", lines[0] + "\n" if lines else ""]))
    return parent, answer, prefill, index


def assert_a_reason(error: EditError) -> None:
    assert error.reason.strip() and "\n" not in error.reason and len(error.reason) <= 200, repr(error.reason)


def assert_storable(text: str) -> None:
    text.encode("utf-8")  # SQLite and PostgreSQL reject lone surrogates: a crash at the store, not an attempt row


def outside_blocks(code: str) -> list[str]:
    lines = [line.rstrip() for line in code.split("\n")]
    inside = {number for start, end in find_blocks(code) for number in range(start, end)}
    return [line for number, line in enumerate(lines) if number not in inside]


def assert_a_valid_child(parent: str, child: str) -> None:
    ast.parse(child)
    assert_storable(child)
    assert child.strip() != parent.strip()
    assert len(find_blocks(child)) == len(find_blocks(parent))
    assert outside_blocks(child) == outside_blocks(parent)


# ---------------------------------------------------------------- (a) completions through the edit path


@FUZZ
@given(st.one_of(JUNK, st.builds(lambda parts: "".join(parts), st.lists(st.sampled_from(PIECES[14:21]), max_size=30))),
       st.integers(-1, 5), st.sampled_from(["response", "answer", "a.b*", "x" * 40]))
def test_splitting_any_completion_into_answers_never_raises(text: str, m: int, tag: str) -> None:
    answers = split_answers(text, m, tag)
    if m <= 1:
        assert answers == [text]
    else:
        assert len(answers) <= m and all(answer.strip() for answer in answers)


@FUZZ
@given(rewrite_answers())
@example((FIZZBUZZ, '# EVOLVE-BLOCK-START# EVOLVE-BLOCK-START\n        return "Fizz"\n', "def fizzbuzz(n: int) -> str:\n", 0))
def test_a_malformed_rewrite_answer_is_a_child_or_an_edit_error_with_a_reason(case: tuple[str, str, str, int]) -> None:
    parent, answer, prefill, index = case
    try:
        child = apply_rewrite(parent, answer, prefill, index)
    except EditError as error:
        assert_a_reason(error)
        return
    assert_a_valid_child(parent, child)
    assert defined_names(block_body(parent, index)) <= defined_names(block_body(child, index))


@FUZZ
@given(diff_answers())
def test_a_malformed_diff_is_a_child_or_an_edit_error_with_a_reason(case: tuple[str, str]) -> None:
    parent, answer = case
    try:
        child = apply_diff(parent, answer)
    except EditError as error:
        assert_a_reason(error)
        return
    assert_a_valid_child(parent, child)


@FUZZ
@given(JUNK, st.sampled_from([set(), {"fizzbuzz"}, {"area", "Shape"}]))
def test_salvaging_code_from_junk_gives_parsing_code_or_an_edit_error(text: str, required: set[str]) -> None:
    try:
        code = salvage_code(text, required)
    except EditError as error:
        assert_a_reason(error)
        return
    ast.parse(code)
    assert required <= defined_names(code)


# ---------------------------------------------------------------- (b) a problem evaluator's return value


@pytest.fixture(scope="module")
def problem() -> Problem:
    return load_problem("circle_packing", ROOT / "programs")  # three objectives, so exact dicts are often drawn


OBJECTIVES = ("sum_ratio", "containment", "separation")
NUMBERS = st.one_of(
    st.floats(allow_nan=True, allow_infinity=True), st.integers(), st.booleans(),
    st.integers(300, 6000).map(lambda digits: -(10**digits)),  # past 4300 digits repr() raises ValueError
    st.integers(300, 400).map(lambda digits: Fraction(10**digits, 3)),
    st.sampled_from([Fraction(1, 3), Decimal("1.5"), Decimal("NaN"),
                     complex(1, 1), np.float64("nan"), np.float32(3.5), np.int64(7), np.bool_(True), np.float64(1e308),
                     np.array([1.0]), float("-inf")]),
)
SCALARS = st.one_of(NUMBERS, st.none(), st.text(max_size=8), st.text(alphabet=SURROGATE, max_size=3),
                    st.binary(max_size=8), st.sampled_from(OBJECTIVES))
KEYS = st.one_of(st.sampled_from(OBJECTIVES), st.text(max_size=6), st.integers(), st.none(), st.booleans(),
                 st.tuples(st.integers()), st.frozensets(st.integers(), max_size=2))
ANY = st.recursive(SCALARS, lambda inner: st.one_of(st.lists(inner, max_size=4), st.tuples(inner),
                                                    st.dictionaries(KEYS, inner, max_size=4)), max_leaves=12)
DEEP = st.integers(1, 3000).map(lambda depth: _nested(depth))


def _nested(depth: int) -> list[Any]:
    value: list[Any] = []
    for _ in range(depth):
        value = [value]
    return value


@st.composite
def score_dicts(draw: st.DrawFn) -> dict[Any, Any]:
    """Mostly the declared objectives (some dropped, some extra), each a number, a non-number or junk."""
    scores = {name: draw(st.one_of(NUMBERS, ANY)) for name in OBJECTIVES if draw(st.integers(0, 9))}
    scores.update(draw(st.dictionaries(KEYS, ANY, max_size=2)))
    return scores


ARTIFACTS = st.one_of(st.dictionaries(st.one_of(st.text(max_size=8), KEYS), st.one_of(st.text(), ANY), max_size=3),
                      ANY, st.text(alphabet=SURROGATE, max_size=3).map(lambda text: {"feedback": "x" + text}))
RETURNED = st.one_of(ANY, DEEP, score_dicts(), st.builds(EvaluationResult, st.one_of(score_dicts(), ANY), ARTIFACTS))


def worker_evaluation(problem: Problem, returned: Any) -> Evaluation:
    """What the worker makes of evaluate()'s return value (evaluate_in_this_process less the import and the call)."""
    try:
        scores, artifacts = check_result(problem, returned)
    except EvaluatorMistake as mistake:
        return Evaluation(ok=False, failure="evaluator_error", detail=f"evaluator.py: {mistake}"[:500])
    return Evaluation(ok=True, scores=scores, artifacts=artifacts)


def assert_a_recordable_evaluation(evaluation: Evaluation) -> None:
    assert isinstance(evaluation.ok, bool)
    if evaluation.ok:
        assert evaluation.failure is None
        assert all(isinstance(name, str) for name in evaluation.scores)
        assert all(type(value) is float and math.isfinite(value) for value in evaluation.scores.values())
    else:
        assert evaluation.failure in get_args(FailureKind) and evaluation.detail.strip(), evaluation
    assert isinstance(evaluation.artifacts, dict)
    for text in (evaluation.detail, *evaluation.artifacts, *evaluation.artifacts.values()):
        assert isinstance(text, str)
        assert_storable(text)


@FUZZ
@given(RETURNED)
def test_any_evaluator_return_value_is_scores_or_an_evaluator_error_with_a_reason(problem: Problem, returned: Any) -> None:
    evaluation = worker_evaluation(problem, returned)
    if evaluation.ok:
        assert list(evaluation.scores) == list(OBJECTIVES)
    else:
        assert evaluation.failure == "evaluator_error"
    # the worker writes it as one JSON line; the engine parses that line back
    line = json.dumps(asdict(evaluation)).encode() + b"\n"
    parsed = _parse_worker_output(line)
    assert parsed is not None
    assert_a_recordable_evaluation(parsed)
    assert parsed.ok == evaluation.ok and parsed.scores == evaluation.scores


def test_a_failing_return_value_names_what_is_wrong(problem: Problem) -> None:
    evaluation = worker_evaluation(problem, {"sum_ratio": 10**400, "containment": 1.0, "separation": 1.0})
    assert evaluation.failure == "evaluator_error" and "sum_ratio" in evaluation.detail, evaluation
    evaluation = worker_evaluation(problem, {"sum_ratio": [10**5000], "containment": 1.0, "separation": 1.0})
    assert evaluation.failure == "evaluator_error" and "sum_ratio" in evaluation.detail, evaluation


# ---------------------------------------------------------------- (b) bytes on the worker's stdout and the result pipe

def to_json(value: Any) -> str:
    """JSON text of whatever was drawn (tuple keys skipped, odd objects as their repr)."""
    try:
        return json.dumps(value, default=repr, skipkeys=True)
    except (ValueError, RecursionError):  # an int past 4300 digits
        return '"unencodable"'


JSON_TEXT = st.one_of(
    ANY.map(lambda value: to_json(value)),
    st.integers(1, 5000).map(lambda depth: "[" * depth), st.integers(1, 3000).map(lambda n: '{"a":' * n + "1" + "}" * n),
    st.integers(4000, 5000).map(lambda digits: "9" * digits),
    st.sampled_from(["1e999999", "-1e999999", "NaN", "Infinity", "-Infinity", '"\\ud800"', "{", '{"ok"',
                     '{"ok": true, "value": [1, 2', '{"ok": false, "kind": "crash", "detail": "\\ud800\\udfff"}',
                     '{"ok": false, "kind": "memory"}', '{"ok": false, "kind": ["crash"], "detail": 5}', '{"ok": 1}',
                     '{"ok": true, "value": NaN}', '{"ok": false, "kind": "evaluator_error", "detail": "x"}', "\x00",
                     '{"ok": true, "scores": {"a": 1}, "failure": null}', '{"ok": false, "failure": "crash"}',
                     '{"ok": true, "scores": {"a": "1"}}', '{"ok": true, "scores": {"a": Infinity}}',
                     '{"ok": false, "failure": "nope", "detail": "d"}', '{"ok": false, "failure": "timeout"}',
                     '{"ok": true, "scores": [], "artifacts": {"k": 1}}', '{"ok": true, "detail": 3}',
                     '{"ok": false, "failure": "crash", "detail": "\\udc80", "artifacts": {"\\ud800": "\\udfff"}}',
                     '{"ok": true, "scores": {}, "artifacts": {}, "wall_s": "slow"}', '{"ok": true, "extra": 1}']),
    st.fixed_dictionaries({"ok": st.one_of(st.booleans(), ANY)}, optional={
        "scores": st.one_of(st.dictionaries(st.text(max_size=4), NUMBERS, max_size=3), ANY),
        "failure": st.one_of(st.sampled_from([*get_args(FailureKind), "other"]), ANY),
        "detail": st.one_of(st.text(), st.text(alphabet=SURROGATE, min_size=1, max_size=2), ANY),
        "kind": st.one_of(st.sampled_from(["timeout", "memory", "crash", "bad_output", "other"]), ANY),
        "value": ANY, "artifacts": ARTIFACTS, "wall_s": st.one_of(st.floats(), ANY)}).map(
        lambda message: to_json(message)),
)
RAW = st.one_of(
    st.binary(max_size=64),
    st.tuples(JSON_TEXT, st.sampled_from(["", "\n", "\n\n", "\nmore", "\r\n"]), st.integers(0, 64)).map(
        lambda parts: (parts[0][: len(parts[0]) - parts[2]] if parts[2] % 5 == 0 else parts[0]) + parts[1]).map(
        lambda text: text.encode("utf-8", "surrogatepass")),
)


@FUZZ
@given(RAW)
def test_any_bytes_on_the_evaluator_workers_stdout_are_an_evaluation_or_none(raw: bytes) -> None:
    evaluation = _parse_worker_output(raw)
    if evaluation is not None:
        assert_a_recordable_evaluation(evaluation)


@pytest.fixture(scope="module")
def finished_child(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RunningChild]:
    """A real sandbox child, run and closed: its _from_message turns result lines into results, as in every call."""
    program = tmp_path_factory.mktemp("fuzz") / "program.py"
    program.write_text("def solve(x):\n    return x\n")
    sandbox = Sandbox(SandboxLimits(wall_time_s=5.0))
    started = time.monotonic()
    child = sandbox._start(False, program, "solve", [1], session=False)
    try:
        assert child.conclude(child.read(started + 5.0), started).value == 1
    finally:
        child.close()
    yield child


@FUZZ
@given(RAW)
def test_any_bytes_on_the_result_pipe_are_a_result_or_bad_output_never_an_exception(
        finished_child: RunningChild, raw: bytes) -> None:
    message = parse_result(raw)
    if message is None:
        return  # the caller records bad_output ("the result pipe held something other than one result line")
    assert isinstance(message, dict)
    if "ok" not in message:
        return  # likewise bad_output
    result = finished_child._from_message(message, time.monotonic())
    assert result.status in ("ok", "timeout", "memory", "crash", "bad_output")
    if result.status != "ok":
        assert isinstance(result.detail, str)
        with pytest.raises(CandidateFailure) as failure:  # how an evaluator passes it on
            raise CandidateFailure(result.status, result.detail)
        assert failure.value.kind == result.status


# ---------------------------------------------------------------- (a) an OpenAI-compatible server's reply

JSON_VALUES = ANY.map(lambda value: json.loads(to_json(value)))  # what a server's JSON can hold
COMPLETION_TEXT = st.one_of(JUNK, st.text(alphabet=SURROGATE, min_size=1, max_size=3), JSON_VALUES)
REPLIES = st.one_of(JSON_VALUES, st.fixed_dictionaries(
    {"choices": st.one_of(JSON_VALUES, st.lists(st.one_of(JSON_VALUES, st.fixed_dictionaries(
        {}, optional={"message": st.one_of(JSON_VALUES, st.fixed_dictionaries({}, optional={"content": COMPLETION_TEXT})),
                      "text": COMPLETION_TEXT, "finish_reason": JSON_VALUES})), max_size=2))},
    optional={"usage": JSON_VALUES}))


@FUZZ
@given(REPLIES, st.sampled_from(["chat", "completions"]))
def test_any_server_reply_is_a_storable_completion_or_a_policy_error(reply: Any, api: str) -> None:
    try:
        text, finish_reason, usage = parse_server_reply(reply, api)
    except PolicyError as error:
        assert str(error).strip()
        return
    assert_storable(text)  # the completion is stored with its attempt
    assert isinstance(finish_reason, str) and isinstance(usage, dict)
