"""Trusted evaluator for coin_change: one objective per test, each right only if exact and within its time limit.

Only the inputs go to the candidate's child, one test at a time (sandbox.call_each); the sandbox times each
call from this side and stops it at its limit, so the candidate cannot fake its time. The expected answers
are computed here by a reference dynamic program and never leave this process.
"""

import random
from typing import Any

from evolve.evaluator_api import EvaluationResult, Sandbox, fail_unless_any_ok, int_answer_failure, join_feedback

FUNCTION = "min_coins"
SMALL_LIMIT_S = 1.0
BIG_LIMIT_S = 1.0

# ([coins, amount] given in full | generate spec ["coins", seed, count, low, high, step, amount, extra], limit)
TESTS: list[tuple[list[Any], float]] = [
    ([[1, 2, 5], 0], SMALL_LIMIT_S),
    ([[2], 3], SMALL_LIMIT_S),
    ([[1], 7], SMALL_LIMIT_S),
    ([[1, 2, 5], 11], SMALL_LIMIT_S),
    ([[1, 3, 4], 6], SMALL_LIMIT_S),
    ([[1, 5, 6, 9], 11], SMALL_LIMIT_S),
    ([[3, 7], 11], SMALL_LIMIT_S),
    ([[4, 7], 15], SMALL_LIMIT_S),
    ([[25, 10, 1], 30], SMALL_LIMIT_S),
    ([[5, 1, 7, 10], 14], SMALL_LIMIT_S),
    ([[1, 2, 5, 10, 20, 50], 300], SMALL_LIMIT_S),
    ([[186, 419, 83, 408], 6249], SMALL_LIMIT_S),
    (["coins", 12, 20, 100, 5000, 1, 100_000, []], BIG_LIMIT_S),
    (["coins", 13, 20, 2, 2000, 2, 99_999, []], BIG_LIMIT_S),
    (["coins", 14, 19, 1000, 30_000, 1, 99_991, [1]], BIG_LIMIT_S),
    (["coins", 15, 20, 50, 999, 1, 100_000, []], BIG_LIMIT_S),
]


def build(spec: list[Any]) -> tuple[list[int], int]:
    """(coins, amount) of a generated test: `count` distinct coins drawn from range(low, high + 1, step) in
    random order, then the `extra` coins; only Random.random() is used, so they are the same on every Python
    version."""
    kind, seed, count, low, high, step, amount, extra = spec
    if kind != "coins":
        raise ValueError(f"unknown test kind {kind!r}")
    rng = random.Random(seed)
    coins: list[int] = []
    while len(coins) < count:
        coin = low + step * int(rng.random() * ((high - low) // step + 1))
        if coin not in coins:
            coins.append(coin)
    return coins + [coin for coin in extra if coin not in coins], amount


def is_generated(given: list[Any]) -> bool:
    return isinstance(given[0], str)


def reference_coins(coins: list[int], amount: int) -> int:
    """fewest[t]: the fewest coins summing to t, amount + 1 while no sum is known."""
    fewest = [0] + [amount + 1] * amount
    for coin in coins:
        for total in range(coin, amount + 1):
            if fewest[total - coin] + 1 < fewest[total]:
                fewest[total] = fewest[total - coin] + 1
    return fewest[amount] if fewest[amount] <= amount else -1


def label(given: list[Any]) -> str:
    if is_generated(given):
        _, _, count, low, high, step, amount, extra = given
        what = f"{count} {'even ' if step == 2 else ''}coins in [{low}, {high}]" + "".join(f" + {c}" for c in extra)
        return f"min_coins(<{what}>, {amount})"
    return f"min_coins({given[0]!r}, {given[1]})"


def evaluate(program_path: str, sandbox: Sandbox) -> EvaluationResult:
    inputs = [list(build(given)) if is_generated(given) else given for given, _ in TESTS]  # [coins, amount]
    runs = fail_unless_any_ok(sandbox.call_each(program_path, FUNCTION, inputs,
                                                [limit_s for _, limit_s in TESTS]))
    scores, failures = {}, []
    for number, ((given, limit_s), (coins, amount), run) in enumerate(zip(TESTS, inputs, runs, strict=True)):
        name = f"test_{number:02d}"
        failure = int_answer_failure(f"{name}: {label(given)}", run, reference_coins(coins, amount), limit_s)
        scores[name] = 0.0 if failure else 1.0
        if failure:
            failures.append(failure)
    return EvaluationResult(scores=scores, artifacts={"feedback": join_feedback(failures)})
