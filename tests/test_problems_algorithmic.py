"""The algorithmic problems (lis, shortest_paths, meeting_rooms, coin_change) score as documented, time limits included.

A test that expects a program to pass the big tests runs under unhurried limits (x10): what it checks is the
answers; a test that expects "too slow" keeps the problem's own limits (the programs it stops are far slower)."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest
from unhurried import unhurried

from evolve.problems.evaluation import evaluate_program
from evolve.problems.problem import Problem, load_problem
from evolve.records import Evaluation

ROOT = Path(__file__).resolve().parents[1]
PROGRAMS = ROOT / "programs"
SOLUTIONS = Path(__file__).parent / "solutions"
FEEDBACK_CHARS = 200  # the prompt drops longer feedback


def evaluate(problem: Problem, code: str) -> Evaluation:
    result = asyncio.run(evaluate_program(problem, code))
    assert result.ok, result
    assert list(result.scores) == list(problem.objectives)
    assert set(result.scores.values()) <= {0.0, 1.0}
    assert 0 < len(result.artifacts["feedback"]) <= FEEDBACK_CHARS
    return result


def failed(result: Evaluation) -> list[str]:
    return [name for name, score in result.scores.items() if score == 0.0]


def names(*numbers: int) -> list[str]:
    return [f"test_{number:02d}" for number in numbers]


def solution(name: str) -> str:
    return (SOLUTIONS / f"{name}.py").read_text()


def variant(code: str, old: str, new: str) -> str:
    assert old in code, old
    return code.replace(old, new)


# ---------------------------------------------------------------- lis


def test_lis_initial_quadratic_program_passes_the_small_tests_and_is_stopped_on_the_big_ones() -> None:
    problem = load_problem("lis", PROGRAMS)
    result = evaluate(problem, problem.initial_code)
    assert failed(result) == names(12, 13, 14, 15)  # 200,000 numbers each: O(n^2) is stopped at 1 s
    assert problem.scalar(result.scores) == pytest.approx(12 / 16)
    assert not problem.is_solved(result.scores)
    assert result.artifacts["feedback"].startswith(
        "test_12: lis_length(<200,000 random ints below 1,000,000,000>) too slow, stopped at the 1 s limit; "
        "test_13: lis_length(<200,000 increasing ints>) too slow")


def test_lis_known_good_solution_is_solved(tmp_path: Path) -> None:
    problem = unhurried("lis", tmp_path)
    result = evaluate(problem, solution("lis"))
    assert problem.is_solved(result.scores), result.scores
    assert result.artifacts["feedback"] == "all tests pass"


def test_lis_non_strict_variant_loses_exactly_the_tests_with_repeated_values(tmp_path: Path) -> None:
    problem = unhurried("lis", tmp_path)
    result = evaluate(problem, variant(solution("lis"), "bisect_left", "bisect_right"))
    assert failed(result) == names(2, 9, 10, 14)
    feedback = result.artifacts["feedback"]
    assert feedback.startswith("test_02: lis_length([5, 5, 5, 5]) got 4, which is wrong; ")
    assert "test_10: lis_length(<300 random ints below 50>) got 37, which is wrong" in feedback  # answer not shown


def test_lis_candidate_failing_every_test_is_a_crash_with_its_reason() -> None:
    problem = load_problem("lis", PROGRAMS)
    result = asyncio.run(evaluate_program(problem, "def lis_length(nums):\n    return nums[0] + undefined\n"))
    assert (result.ok, result.failure) == (False, "crash")
    assert "IndexError" in result.detail or "NameError" in result.detail


def test_lis_candidate_rigging_its_clocks_still_loses_the_tests_it_is_too_slow_for() -> None:
    """The time is taken on the trusted side of the sandbox's pipe: a right answer that comes too late is a
    timeout however the candidate rewrites time.perf_counter, time.monotonic or signal.setitimer."""
    problem = load_problem("lis", PROGRAMS)
    rig = ("import signal\nimport sys\nimport time\n\n"  # this fooled the driver that timed lis in its process
           "for _module in (time, *[m for n, m in list(sys.modules.items()) if 'driver' in n]):\n"
           "    for _name in ('perf_counter', 'monotonic', 'time', 'process_time'):\n"
           "        setattr(_module, _name, lambda: 0.0)\nsignal.setitimer = lambda *args, **kwargs: (0.0, 0.0)\n"
           "signal.alarm = lambda *args: 0\n_sleep = time.sleep\n")
    slow = variant(solution("lis"), "    return len(tails)\n",
                   "    if len(nums) > 100_000:\n        _sleep(1.5)\n    return len(tails)\n")
    result = evaluate(problem, rig + slow)
    assert failed(result) == names(12, 13, 14, 15)
    assert "too slow, stopped at the 1 s limit" in result.artifacts["feedback"]


# ---------------------------------------------------------------- shortest_paths


def test_shortest_paths_initial_bellman_ford_passes_the_small_tests_and_is_stopped_on_the_big_ones() -> None:
    problem = load_problem("shortest_paths", PROGRAMS)
    result = evaluate(problem, problem.initial_code)
    assert failed(result) == names(12, 13, 14, 15)  # ~100,000 edges each: n - 1 passes over them are stopped at 1 s
    assert problem.scalar(result.scores) == pytest.approx(12 / 16)
    assert not problem.is_solved(result.scores)
    assert result.artifacts["feedback"] == ("test_12: shortest_paths(<random graph, 20,000 nodes, 100,000 edges>, 0) "
                                            "too slow, stopped at the 1 s limit")


def test_shortest_paths_known_good_dijkstra_is_solved(tmp_path: Path) -> None:
    problem = unhurried("shortest_paths", tmp_path)
    result = evaluate(problem, solution("shortest_paths"))
    assert problem.is_solved(result.scores), result.scores


def test_shortest_paths_dijkstra_settling_nodes_when_first_reached_loses_every_test_with_a_detour(tmp_path: Path) -> None:
    problem = unhurried("shortest_paths", tmp_path)
    code = variant(solution("shortest_paths"), "            if distance[v] < 0 or d + w < distance[v]:",
                   "            if distance[v] < 0:")
    result = evaluate(problem, code)
    assert failed(result) == names(3, 5, 7, 8, 9, 10, 11, 12, 13, 14, 15)
    assert result.artifacts["feedback"] == ("test_03: shortest_paths(3, [[0, 1, 10], [0, 2, 1], [2, 1, 2]], 0) "
                                            "got [0, 10, 1], which is wrong")


def test_shortest_paths_infinity_for_unreachable_nodes_loses_exactly_the_tests_with_unreachable_nodes(tmp_path: Path) -> None:
    problem = unhurried("shortest_paths", tmp_path)
    code = variant(solution("shortest_paths"), "    return distance",
                   "    return [d if d >= 0 else float('inf') for d in distance]")
    result = evaluate(problem, code)
    assert failed(result) == names(1, 4, 9, 10, 11, 12, 15)
    assert result.artifacts["feedback"].startswith(
        "test_01: shortest_paths(3, [], 1) returned float inf for node 0, not int; ")


# ---------------------------------------------------------------- meeting_rooms


def test_meeting_rooms_initial_program_counts_touching_meetings_as_overlapping_and_is_too_slow() -> None:
    problem = load_problem("meeting_rooms", PROGRAMS)
    result = evaluate(problem, problem.initial_code)
    assert failed(result) == names(4, 7, 9, 10, 12, 13, 14, 15)  # back-to-back meetings, and 200,000 meetings
    assert problem.scalar(result.scores) == pytest.approx(8 / 16)
    assert not problem.is_solved(result.scores)
    assert result.artifacts["feedback"] == ("test_04: min_rooms([[1, 2], [2, 3], [3, 4]]) got 2, which is wrong; "
                                            "test_07: min_rooms([[5, 8], [1, 5], [8, 9], [2, 6]]) got 3, which "
                                            "is wrong")


def test_meeting_rooms_known_good_sweep_is_solved(tmp_path: Path) -> None:
    problem = unhurried("meeting_rooms", tmp_path)
    result = evaluate(problem, solution("meeting_rooms"))
    assert problem.is_solved(result.scores), result.scores


def test_meeting_rooms_sweep_that_keeps_a_room_busy_at_its_end_time_loses_exactly_the_back_to_back_tests(tmp_path: Path) -> None:
    problem = unhurried("meeting_rooms", tmp_path)
    result = evaluate(problem, variant(solution("meeting_rooms"), "ends[ended] <= start", "ends[ended] < start"))
    assert failed(result) == names(4, 7, 9, 10, 14, 15)
    assert "test_15" not in result.artifacts["feedback"]  # two lines fill the 200 characters


# ---------------------------------------------------------------- coin_change


def test_coin_change_initial_exhaustive_recursion_passes_the_small_amounts_only() -> None:
    problem = load_problem("coin_change", PROGRAMS)
    result = evaluate(problem, problem.initial_code)
    assert failed(result) == names(10, 11, 12, 13, 14, 15)  # amounts from 300 up: stopped at 1 s, or too deep
    assert problem.scalar(result.scores) == pytest.approx(10 / 16)
    assert not problem.is_solved(result.scores)
    assert result.artifacts["feedback"] == ("test_10: min_coins([1, 2, 5, 10, 20, 50], 300) too slow, stopped at "
                                            "the 1 s limit; test_11: min_coins([186, 419, 83, 408], 6249) too "
                                            "slow, stopped at the 1 s limit")


def test_coin_change_known_good_dynamic_program_is_solved(tmp_path: Path) -> None:
    problem = unhurried("coin_change", tmp_path)
    result = evaluate(problem, solution("coin_change"))
    assert problem.is_solved(result.scores), result.scores


GREEDY = '''
def min_coins(coins: list[int], amount: int) -> int:
    count = 0
    for coin in sorted(coins, reverse=True):
        count += amount // coin
        amount %= coin
    return count if amount == 0 else -1
'''


def test_coin_change_largest_coin_first_greedy_loses_exactly_the_tests_where_greedy_fails(tmp_path: Path) -> None:
    problem = unhurried("coin_change", tmp_path)
    result = evaluate(problem, GREEDY)
    assert failed(result) == names(4, 5, 7, 8, 9, 11, 12, 14, 15)
    assert result.artifacts["feedback"] == ("test_04: min_coins([1, 3, 4], 6) got 3, which is wrong; test_05: "
                                            "min_coins([1, 5, 6, 9], 11) got 3, which is wrong; test_07: "
                                            "min_coins([4, 7], 15) got -1, which is wrong")
