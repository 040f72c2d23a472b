"""Discovery problems (circle_packing, cap_set): documented seed scores, known-good solutions, invalid output."""

from __future__ import annotations

import asyncio
import math
import textwrap
from pathlib import Path

import pytest

from evolve.problems.evaluation import evaluate_in_this_process, evaluate_program
from evolve.problems.problem import Problem, load_problem
from evolve.records import Evaluation

ROOT = Path(__file__).resolve().parents[1]
PROGRAMS = ROOT / "programs"
SOLUTIONS = Path(__file__).parent / "solutions"


def evaluate(problem: Problem, code: str) -> Evaluation:
    return asyncio.run(evaluate_program(problem, code))


def shipped(name: str) -> Problem:
    return load_problem(name, PROGRAMS)


def packing_program(circles: str) -> str:
    """A circle_packing candidate whose construct_packing() returns the Python expression `circles`."""
    return textwrap.dedent(f"""\
        import math


        # EVOLVE-BLOCK-START
        def construct_packing():
            grid = [(0.1 + 0.2 * i, 0.1 + 0.2 * j, 0.1) for i in range(5) for j in range(5)]
            gap = 0.1 * (math.sqrt(2) - 1)
            return {circles}
        # EVOLVE-BLOCK-END
        """)


# ---------------------------------------------------------------- circle_packing


def test_circle_packing_initial_grid_is_valid_with_sum_2_5414() -> None:
    problem = shipped("circle_packing")
    result = evaluate(problem, problem.initial_code)
    assert result.ok, result
    total = 2.5 + 0.1 * (math.sqrt(2) - 1)
    assert result.scores == pytest.approx({"sum_ratio": total / 2.635, "containment": 1.0, "separation": 1.0})
    assert result.scores["sum_ratio"] == pytest.approx(0.964486, abs=1e-6)
    assert problem.scalar(result.scores) == pytest.approx(0.8 * total / 2.635 + 0.2)
    assert problem.scalar(result.scores) == pytest.approx(0.971589, abs=1e-6)
    assert not problem.is_solved(result.scores)
    assert "sum of radii 2.541421; valid packing" in result.artifacts["feedback"]


def test_circle_packing_known_good_packing_is_valid_and_solved() -> None:
    problem = shipped("circle_packing")
    result = evaluate(problem, (SOLUTIONS / "circle_packing.py").read_text())
    assert result.ok, result
    assert result.scores["containment"] == result.scores["separation"] == 1.0
    assert result.scores["sum_ratio"] * 2.635 >= 2.62
    assert problem.is_solved(result.scores)
    assert "valid packing" in result.artifacts["feedback"]


def test_circle_packing_out_of_square_and_overlapping_gets_partial_credit_only() -> None:
    problem = shipped("circle_packing")
    # circle 0 grows to r = 0.15 at (0.1, 0.1): it leaves the square and overlaps (0.1, 0.3), (0.3, 0.1) and the gap
    code = packing_program("[(0.1, 0.1, 0.15)] + grid[1:] + [(0.2, 0.2, gap)]")
    result = evaluate(problem, code)
    assert result.ok, result
    assert result.scores["containment"] == pytest.approx(25 / 26)
    assert result.scores["separation"] == pytest.approx(22 / 26)
    claimed = 2.55 + 0.1 * (math.sqrt(2) - 1)
    assert result.scores["sum_ratio"] < claimed / 2.635
    assert not problem.is_solved(result.scores)
    assert "invalid: circles [0] leave the square, 3 overlapping pairs" in result.artifacts["feedback"]


def test_circle_packing_invalid_packing_ranks_below_valid_one_with_the_same_radii() -> None:
    problem = shipped("circle_packing")
    valid = evaluate(problem, problem.initial_code)
    shifted = evaluate(problem, packing_program("grid + [(0.15, 0.2, gap)]"))  # same radii, gap circle moved
    assert valid.ok and shifted.ok, (valid, shifted)
    assert shifted.scores["separation"] < 1.0 and shifted.scores["sum_ratio"] < valid.scores["sum_ratio"]
    assert problem.scalar(shifted.scores) < problem.scalar(valid.scores)


@pytest.mark.parametrize(
    ("circles", "fragment"),
    [
        ("grid", "must return 26 circles, got 25"),
        ("grid + [(0.2, 0.2, gap), (0.4, 0.4, 0.0)]", "must return 26 circles, got 27"),
        ("grid + [(0.2, 0.2, -gap)]", "negative radius"),
        ("grid + [(0.2, float('nan'), gap)]", "not finite"),
        ("grid + [(0.2, 0.2)]", "has 2 values instead of 3"),
        ("2.6", "sequence of (x, y, r) triples"),
    ],
)
def test_circle_packing_malformed_packing_is_bad_output(circles: str, fragment: str) -> None:
    result = evaluate(shipped("circle_packing"), packing_program(circles))
    assert (result.ok, result.failure) == (False, "bad_output"), result
    assert fragment in result.detail


def test_circle_packing_forged_driver_output_is_verified_not_trusted() -> None:
    problem = shipped("circle_packing")
    forger = problem.initial_code + textwrap.dedent("""
        import sys
        sys.modules["evolve_driver"].as_circles = lambda packing: [[0.5, 0.5, 1.0]] * 26
        """)
    result = evaluate(problem, forger)
    assert result.ok, result
    assert result.scores == {"sum_ratio": 0.0, "containment": 0.0, "separation": 0.0}
    assert "sum of radii 26.000000" in result.artifacts["feedback"]
    forged_count = problem.initial_code + textwrap.dedent("""
        import sys
        sys.modules["evolve_driver"].as_circles = lambda packing: [[0.5, 0.5, 0.1]] * 30
        """)
    result = evaluate(problem, forged_count)
    assert (result.ok, result.failure) == (False, "bad_output") and "expected 26 circles, got 30" in result.detail


@pytest.mark.parametrize(("circle", "says"), [
    ("(0.2, math.nan, gap)", "circle 25 is not finite"),
    ("(0.2, 0.2, math.inf)", "circle 25 is not finite"),
    ("(0.2, 0.2, 10 ** 400)", "circle 25 is not finite"),  # an int no float holds
])
def test_a_circle_packing_candidate_that_patches_the_drivers_checks_is_its_own_bad_output(
        circle: str, says: str, tmp_path: Path) -> None:
    hostile = tmp_path / "hostile.py"
    hostile.write_text("import builtins\nimport math\n\nmath.isfinite = lambda value: True\n"
                       "builtins.float = lambda value: value\n\n" + packing_program(f"grid + [{circle}]"))
    result = evaluate_in_this_process(shipped("circle_packing"), hostile)  # the candidate in the real Sandbox
    assert (result.ok, result.failure, result.detail) == (False, "bad_output", says), result


def test_circle_packing_radii_whose_sum_overflows_are_scored_not_an_evaluator_error() -> None:
    result = evaluate(shipped("circle_packing"), packing_program("[(0.5, 0.5, 1e308)] * 26"))
    assert result.ok, result
    assert result.scores["containment"] == 0.0 and "sum of radii inf" in result.artifacts["feedback"]


# ---------------------------------------------------------------- cap_set


def forge_cap_sets(problem: Problem, body: str) -> str:
    """The initial program plus an import-time patch replacing the driver's greedy with `body` (uses n)."""
    return problem.initial_code + textwrap.dedent(f"""
        import sys


        def _forged(priority, n):
            return {body}


        sys.modules["evolve_driver"].greedy_cap_set = _forged
        """)


def test_cap_set_initial_constant_priority_gives_two_to_the_n() -> None:
    problem = shipped("cap_set")
    result = evaluate(problem, problem.initial_code)
    assert result.ok, result
    expected = {"n3": 8 / 9, "n4": 16 / 20, "n5": 32 / 45, "n6": 64 / 112, "n7": 128 / 236}
    assert result.scores == pytest.approx(expected)
    assert problem.scalar(result.scores) == pytest.approx(0.7028, abs=1e-4)
    assert not problem.is_solved(result.scores)
    assert "n = 7: 128 (best known 236)" in result.artifacts["feedback"]


def test_cap_set_known_good_priority_reaches_best_known_up_to_n6_and_224_for_n7() -> None:
    problem = shipped("cap_set")
    result = evaluate(problem, (SOLUTIONS / "cap_set.py").read_text())
    assert result.ok, result
    assert result.scores == pytest.approx({"n3": 1.0, "n4": 1.0, "n5": 1.0, "n6": 1.0, "n7": 224 / 236})
    assert problem.is_solved(result.scores)


def test_cap_set_solved_rule_needs_best_known_sizes_in_low_dimensions() -> None:
    problem = shipped("cap_set")
    best = {"n3": 1.0, "n4": 1.0, "n5": 1.0, "n6": 1.0, "n7": 224 / 236}
    assert problem.is_solved(best)
    assert not problem.is_solved({**best, "n3": 8 / 9})
    assert not problem.is_solved({**best, "n4": 19 / 20})
    assert not problem.is_solved({**best, "n6": 111 / 112})
    assert not problem.is_solved({**best, "n7": 223 / 236})


@pytest.mark.parametrize(
    ("body", "fragment"),
    [
        ("[[0] * n, [1] * n, [2] * n]", "n = 3: not a cap set, [0, 0, 0] + [1, 1, 1] + [2, 2, 2] == 0 mod 3"),
        ("[[0] * n, [0] * n]", "n = 3: the set repeats a vector"),
        ("[[3] * n]", "is not a vector of 3 entries in 0, 1, 2"),
        ("[[0] * (n + 1)]", "is not a vector of 3 entries in 0, 1, 2"),
        ("[[True] * n]", "is not a vector of 3 entries in 0, 1, 2"),
        ("'cap'", "n = 3: expected a list of vectors"),
    ],
)
def test_cap_set_forged_driver_output_that_is_not_a_cap_set_is_bad_output(body: str, fragment: str) -> None:
    problem = shipped("cap_set")
    result = evaluate(problem, forge_cap_sets(problem, body))
    assert (result.ok, result.failure) == (False, "bad_output"), result
    assert fragment in result.detail


def test_cap_set_forged_line_hidden_in_a_large_set_is_found() -> None:
    problem = shipped("cap_set")
    # {0, 1}^n is a cap set; adding (2, ..., 2) makes the line 0...0, 1...1, 2...2 (among others)
    body = "[list(v) for v in __import__('itertools').product((0, 1), repeat=n)] + [[2] * n]"
    result = evaluate(problem, forge_cap_sets(problem, body))
    assert (result.ok, result.failure) == (False, "bad_output"), result
    assert "n = 3: not a cap set" in result.detail


def test_cap_set_priority_returning_a_non_number_is_bad_output() -> None:
    problem = shipped("cap_set")
    code = problem.initial_code.replace("return 0.0", "return 'high'")
    assert code != problem.initial_code
    result = evaluate(problem, code)
    assert (result.ok, result.failure) == (False, "bad_output"), result
    assert "priority must return a number, got str for n = 3" in result.detail
