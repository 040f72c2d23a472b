"""Trusted evaluator for lis: one objective per test, each right only if exact and within its time limit.

Only the inputs go to the candidate's child, one test at a time (sandbox.call_each); the sandbox times each
call from this side and stops it at its limit, so the candidate cannot fake its time. The expected answers
are computed here by a reference O(n log n) solution and never leave this process.
"""

import random
from bisect import bisect_left
from typing import Any

from evolve.evaluator_api import EvaluationResult, Sandbox, fail_unless_any_ok, int_answer_failure, join_feedback

FUNCTION = "lis_length"
SMALL_LIMIT_S = 1.0
BIG_LIMIT_S = 1.0  # the measured time includes receiving the 200,000 numbers (about 0.02 s)
BIG_N = 200_000

# (argument list given in full | generate spec [kind, seed, n, high], time limit in seconds)
TESTS: list[tuple[list[int] | list[Any], float]] = [
    ([], SMALL_LIMIT_S),
    ([7], SMALL_LIMIT_S),
    ([5, 5, 5, 5], SMALL_LIMIT_S),
    ([1, 2, 3, 4, 5], SMALL_LIMIT_S),
    ([5, 4, 3, 2, 1], SMALL_LIMIT_S),
    ([10, 9, 2, 5, 3, 7, 101, 18], SMALL_LIMIT_S),
    ([0, 1, 0, 3, 2, 3], SMALL_LIMIT_S),
    ([1, 3, 6, 7, 9, 4, 10, 5, 6], SMALL_LIMIT_S),
    ([-3, -1, -2, 0, -5, 4], SMALL_LIMIT_S),
    ([2, 2, 3, 3, 1, 4, 4], SMALL_LIMIT_S),
    (["random", 10, 300, 50], SMALL_LIMIT_S),
    (["random", 11, 1000, 1_000_000], SMALL_LIMIT_S),
    (["random", 12, BIG_N, 1_000_000_000], BIG_LIMIT_S),
    (["increasing", 13, BIG_N, 3], BIG_LIMIT_S),
    (["random", 14, BIG_N, 1000], BIG_LIMIT_S),
    (["sawtooth", 15, BIG_N, 500], BIG_LIMIT_S),
]


def build(spec: list[Any]) -> list[int]:
    """The input list of a generated test; only Random.random() is used, so the sequence is the same on
    every Python version."""
    kind, seed, n, high = spec
    rng = random.Random(seed)
    if kind == "random":  # uniform in [0, high)
        return [int(rng.random() * high) for _ in range(n)]
    if kind == "increasing":  # strictly increasing, random gaps 1..high
        values, value = [], 0
        for _ in range(n):
            value += 1 + int(rng.random() * high)
            values.append(value)
        return values
    if kind == "sawtooth":  # n // high blocks, each rising block above the last but falling inside itself
        return [block * high + (high - 1 - offset) for block in range(n // high) for offset in range(high)]
    raise ValueError(f"unknown test kind {kind!r}")


def is_generated(given: list[Any]) -> bool:
    return bool(given) and isinstance(given[0], str)


def reference_lis(nums: list[int]) -> int:
    tails: list[int] = []  # tails[k]: the smallest last value of an increasing subsequence of length k + 1
    for value in nums:
        index = bisect_left(tails, value)
        if index == len(tails):
            tails.append(value)
        else:
            tails[index] = value
    return len(tails)


def label(given: list[Any]) -> str:
    if is_generated(given):
        kind, _, n, high = given
        what = {"random": f"random ints below {high:,}", "increasing": "increasing ints",
                "sawtooth": f"ints in falling blocks of {high}"}[kind]
        return f"lis_length(<{n:,} {what}>)"
    text = f"lis_length({given!r})"
    return text if len(text) <= 60 else f"lis_length(<{len(given)} ints>)"


def is_big(given: list[Any]) -> bool:
    return is_generated(given) and given[2] == BIG_N


def score_tests(program_path: str, sandbox: Sandbox, numbers: list[int]) -> EvaluationResult:
    """Run the tests with these numbers; every other test scores 0 (not run)."""
    chosen = [TESTS[number] for number in numbers]
    inputs = [build(given) if is_generated(given) else given for given, _ in chosen]
    runs = fail_unless_any_ok(sandbox.call_each(program_path, FUNCTION, [[nums] for nums in inputs],
                                                [limit_s for _, limit_s in chosen]))
    scores, failures = {f"test_{number:02d}": 0.0 for number in range(len(TESTS))}, []
    for number, (given, limit_s), nums, run in zip(numbers, chosen, inputs, runs, strict=True):
        name = f"test_{number:02d}"
        failure = int_answer_failure(f"{name}: {label(given)}", run, reference_lis(nums), limit_s)
        scores[name] = 0.0 if failure else 1.0
        if failure:
            failures.append(failure)
    return EvaluationResult(scores=scores, artifacts={"feedback": join_feedback(failures)})


def evaluate_stage1(program_path: str, sandbox: Sandbox) -> EvaluationResult:
    """The cascade's cheap stage (problem.toml [[cascade]]): the 12 small tests only, the 4 big ones at 0."""
    return score_tests(program_path, sandbox, [n for n, (given, _) in enumerate(TESTS) if not is_big(given)])


def evaluate(program_path: str, sandbox: Sandbox) -> EvaluationResult:
    return score_tests(program_path, sandbox, list(range(len(TESTS))))
