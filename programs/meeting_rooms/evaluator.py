"""Trusted evaluator for meeting_rooms: one objective per test, each right only if exact and within its time limit.

Only the inputs go to the candidate's child, one test at a time (sandbox.call_each); the sandbox times each
call from this side and stops it at its limit, so the candidate cannot fake its time. The expected answers
are computed here by a reference sweep over the sorted starts and ends and never leave this process.
"""

import random
from typing import Any

from evolve.evaluator_api import EvaluationResult, Sandbox, fail_unless_any_ok, int_answer_failure, join_feedback

FUNCTION = "min_rooms"
SMALL_LIMIT_S = 1.0
BIG_LIMIT_S = 1.5  # the measured time includes receiving the 200,000 meetings (about 0.1 s)
BIG_N = 200_000
G = 10**9

# (intervals given in full | generate spec [kind, seed, n, sizes...], time limit in seconds)
TESTS: list[tuple[list[Any], float]] = [
    ([], SMALL_LIMIT_S),
    ([[1, 5]], SMALL_LIMIT_S),
    ([[0, 30], [5, 10], [15, 20]], SMALL_LIMIT_S),
    ([[7, 10], [2, 4]], SMALL_LIMIT_S),
    ([[1, 2], [2, 3], [3, 4]], SMALL_LIMIT_S),
    ([[1, 5], [1, 5], [1, 5]], SMALL_LIMIT_S),
    ([[1, 10], [2, 3], [4, 5], [6, 7]], SMALL_LIMIT_S),
    ([[5, 8], [1, 5], [8, 9], [2, 6]], SMALL_LIMIT_S),
    ([[-G, -5], [-10, G], [-7, 3]], SMALL_LIMIT_S),
    ([[1, 3], [2, 4], [3, 5], [4, 6]], SMALL_LIMIT_S),
    (["random", 10, 1000, 100, 5], SMALL_LIMIT_S),
    (["random", 11, 500, 1_000_000, 100_000], SMALL_LIMIT_S),
    (["random", 12, BIG_N, G, 10_000_000], BIG_LIMIT_S),
    (["same", 13, BIG_N, 5, 10], BIG_LIMIT_S),
    (["sliding", 14, BIG_N, 1], BIG_LIMIT_S),
    (["sliding", 15, BIG_N, 1000], BIG_LIMIT_S),
]


def build(spec: list[Any]) -> list[list[int]]:
    """The intervals of a generated test; only Random.random() is used, so they are the same on every Python
    version."""
    kind, seed, n, *sizes = spec
    rng = random.Random(seed)

    def below(high: int) -> int:
        return int(rng.random() * high)

    if kind == "random":  # starts uniform in [0, span), lengths 1..max_length
        span, max_length = sizes
        intervals = []
        for _ in range(n):
            start = below(span)
            intervals.append([start, start + 1 + below(max_length)])
        return intervals
    if kind == "same":  # n copies of one meeting
        start, end = sizes
        return [[start, end] for _ in range(n)]
    if kind == "sliding":  # [i, i + length) for i in 0..n-1, in random order: each ends where a later one starts
        (length,) = sizes
        intervals = [[start, start + length] for start in range(n)]
        for index in range(n - 1, 0, -1):  # Fisher-Yates
            other = below(index + 1)
            intervals[index], intervals[other] = intervals[other], intervals[index]
        return intervals
    raise ValueError(f"unknown test kind {kind!r}")


def is_generated(given: list[Any]) -> bool:
    return bool(given) and isinstance(given[0], str)


def reference_rooms(intervals: list[list[int]]) -> int:
    """Sweep the sorted starts; a meeting that ended at or before a start has freed its room."""
    starts = sorted(start for start, _ in intervals)
    ends = sorted(end for _, end in intervals)
    rooms = ended = 0
    for start in starts:
        if ends[ended] <= start:
            ended += 1  # reuse that room
        else:
            rooms += 1
    return rooms


def label(given: list[Any]) -> str:
    if is_generated(given):
        kind, _, n, *sizes = given
        what = {"random": lambda span, _: f"random meetings, starts below {span:,}",
                "same": lambda start, end: f"copies of [{start}, {end}]",
                "sliding": lambda length: f"meetings [i, i + {length}), shuffled"}[kind](*sizes)
        return f"min_rooms(<{n:,} {what}>)"
    text = f"min_rooms({given!r})"
    return text if len(text) <= 70 else f"min_rooms(<{len(given)} meetings>)"


def evaluate(program_path: str, sandbox: Sandbox) -> EvaluationResult:
    inputs = [build(given) if is_generated(given) else given for given, _ in TESTS]
    runs = fail_unless_any_ok(sandbox.call_each(program_path, FUNCTION, [[intervals] for intervals in inputs],
                                                [limit_s for _, limit_s in TESTS]))
    scores, failures = {}, []
    for number, ((given, limit_s), intervals, run) in enumerate(zip(TESTS, inputs, runs, strict=True)):
        name = f"test_{number:02d}"
        failure = int_answer_failure(f"{name}: {label(given)}", run, reference_rooms(intervals), limit_s)
        scores[name] = 0.0 if failure else 1.0
        if failure:
            failures.append(failure)
    return EvaluationResult(scores=scores, artifacts={"feedback": join_feedback(failures)})
