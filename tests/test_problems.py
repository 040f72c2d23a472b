"""Problems and the trusted evaluator process: shipped problems score as documented, mistakes read clearly."""

from __future__ import annotations

import asyncio
import textwrap
from pathlib import Path

import pytest
from unhurried import unhurried

from evolve.problems.evaluation import evaluate_in_this_process, evaluate_program, evaluation_timeout
from evolve.problems.problem import Problem, list_problems, load_problem
from evolve.records import Evaluation

ROOT = Path(__file__).resolve().parents[1]
PROGRAMS = ROOT / "programs"
SOLUTIONS = Path(__file__).parent / "solutions"
# the folders directly in programs/: imported ones (programs/humaneval/, programs/generated/) are not shipped
SHIPPED = [name for name in list_problems(PROGRAMS) if (PROGRAMS / name).is_dir()]


def evaluate(problem: Problem, code: str, timeout_s: float | None = None) -> Evaluation:
    return asyncio.run(evaluate_program(problem, code, timeout_s))


def shipped(name: str) -> Problem:
    return load_problem(name, PROGRAMS)


# ---------------------------------------------------------------- shipped problems


def test_every_shipped_problem_loads_with_its_declared_objectives() -> None:
    assert {"bin_packing", "run_length", "symbolic_regression"} <= set(SHIPPED)
    for name in SHIPPED:
        problem = shipped(name)
        assert problem.name == name and problem.path == PROGRAMS / name
        assert problem.description and problem.provenance
        assert len(problem.objectives) >= 3
        assert (SOLUTIONS / f"{name}.py").exists(), f"every shipped problem needs a known-good tests/solutions/{name}.py"
        assert "# EVOLVE-BLOCK-START" in problem.initial_code
        assert problem.features == ("code_length", "scalar")


def test_symbolic_regression_initial_program_scores_low_per_region() -> None:
    problem = shipped("symbolic_regression")
    result = evaluate(problem, problem.initial_code)
    assert result.ok, result
    assert list(result.scores) == list(problem.objectives)
    expected = [0.0086, 0.2303, 0.9906, 0.5967, 0.0216, 0.0018]
    assert [result.scores[name] for name in problem.objectives] == pytest.approx(expected, abs=1e-4)
    assert problem.scalar(result.scores) == pytest.approx(0.3083, abs=1e-4)
    assert not problem.is_solved(result.scores)
    assert "region_2_3: mean(f - target)" in result.artifacts["feedback"]


def test_bin_packing_initial_first_fit_scores_lower_bound_over_bins() -> None:
    problem = shipped("bin_packing")
    result = evaluate(problem, problem.initial_code)
    assert result.ok, result
    lower_bounds, bins = [103, 100, 100, 102, 100, 102], [108, 106, 106, 109, 105, 108]
    expected = [bound / used for bound, used in zip(lower_bounds, bins, strict=True)]
    assert [result.scores[name] for name in problem.objectives] == pytest.approx(expected)
    assert problem.scalar(result.scores) == pytest.approx(0.9455, abs=1e-4)
    assert not problem.is_solved(result.scores)


def test_bin_packing_threshold_lies_between_best_fit_and_funsearch() -> None:
    problem = shipped("bin_packing")
    best_fit = problem.initial_code.replace("return -np.arange(len(bins), dtype=float)", "return -(bins - item)")
    assert best_fit != problem.initial_code
    result = evaluate(problem, best_fit)
    assert result.ok, result
    assert problem.scalar(result.scores) == pytest.approx(0.9514, abs=1e-4)
    assert not problem.is_solved(result.scores)


def test_run_length_initial_program_passes_only_runs_of_one() -> None:
    problem = shipped("run_length")
    result = evaluate(problem, problem.initial_code)
    assert result.ok, result
    passed = [name for name in problem.objectives if result.scores[name] == 1.0]
    assert passed == ["test_00", "test_01", "test_02", "test_08"]
    assert set(result.scores.values()) == {0.0, 1.0}
    assert problem.scalar(result.scores) == pytest.approx(4 / 12)
    assert "encode('aaa') got '1a1a1a', which is wrong" in result.artifacts["feedback"]


def test_fizzbuzz_initial_program_misses_every_multiple_of_five() -> None:
    problem = shipped("fizzbuzz")
    result = evaluate(problem, problem.initial_code)
    assert result.ok, result
    failed = [name for name in problem.objectives if result.scores[name] == 0.0]
    assert failed == ["test_04", "test_09", "test_14", "test_15", "test_17", "test_19"]  # 5, 10, 15, 30, 50, 105
    assert problem.scalar(result.scores) == pytest.approx(14 / 20)
    assert "fizzbuzz(5) got '5', which is wrong" in result.artifacts["feedback"]


def test_limits_time_scale_stretches_the_sandbox_limits_and_the_evaluation_deadline(tmp_path: Path) -> None:
    nominal, scaled = shipped("meeting_rooms"), unhurried("meeting_rooms", tmp_path, time_scale=4)
    assert (nominal.limits.time_scale, scaled.limits.time_scale) == (1.0, 4.0)
    assert scaled.limits.wall_time_s == nominal.limits.wall_time_s  # the sandbox multiplies them when it starts
    assert evaluation_timeout(scaled) == pytest.approx(evaluation_timeout(nominal) + 3 * 2 * nominal.limits.wall_time_s)


@pytest.mark.parametrize("name", SHIPPED)
def test_known_good_solution_solves_the_problem(name: str, tmp_path: Path) -> None:
    problem = unhurried(name, tmp_path)  # answers, not speed: a loaded machine must not fail it
    result = evaluate(problem, (SOLUTIONS / f"{name}.py").read_text())
    assert result.ok, result
    assert problem.is_solved(result.scores), result.scores


# ---------------------------------------------------------------- candidates that fail or cheat


def test_candidate_raising_at_import_is_a_crash_with_its_reason() -> None:
    problem = shipped("symbolic_regression")
    result = evaluate(problem, "raise RuntimeError('no model today')\n")
    assert not result.ok and result.failure == "crash"
    assert "RuntimeError: no model today" in result.detail


def test_candidate_with_an_undefined_name_is_a_crash() -> None:
    problem = shipped("bin_packing")
    code = problem.initial_code.replace("return -np.arange(len(bins), dtype=float)", "return -scipy.ones(3)")
    result = evaluate(problem, code)
    assert (result.ok, result.failure) == (False, "crash")
    assert "NameError" in result.detail and "scipy" in result.detail


def test_non_finite_output_zeroes_only_its_region() -> None:
    problem = shipped("symbolic_regression")
    code = problem.initial_code.replace("return x", "return float('inf') if x > 2 else x")
    result = evaluate(problem, code)
    assert result.ok, result
    assert result.scores["region_2_3"] == 0.0
    assert result.scores["region_-1_0"] == pytest.approx(0.9906, abs=1e-4)
    assert "region_2_3: f failed or was not finite" in result.artifacts["feedback"]


@pytest.mark.parametrize("value", ["math.nan", "-math.inf", "10 ** 400", "'a string'"])
def test_a_candidate_that_patches_math_isfinite_in_the_sandbox_fails_its_regions_not_the_evaluator(
        value: str, tmp_path: Path) -> None:
    problem = shipped("symbolic_regression")
    hostile = tmp_path / "hostile.py"
    hostile.write_text(textwrap.dedent(f"""\
        import builtins
        import math

        math.isfinite = lambda value: True  # the driver's check, in this process, now passes anything
        builtins.float = lambda value: value  # and float() no longer converts


        # EVOLVE-BLOCK-START
        def f(x):
            return ({value}) if x > 2 else x
        # EVOLVE-BLOCK-END
        """))
    result = evaluate_in_this_process(problem, hostile)  # the evaluator here, the candidate in the real Sandbox
    assert result.ok, result  # a normal score, not an evaluator_error
    assert result.scores["region_2_3"] == 0.0
    assert result.scores["region_-1_0"] == pytest.approx(0.9906, abs=1e-4)
    assert "region_2_3: f failed or was not finite" in result.artifacts["feedback"]
    assert not problem.is_solved(result.scores)


def test_huge_finite_values_score_zero_not_an_overflow_in_the_evaluator() -> None:
    problem = shipped("symbolic_regression")
    result = evaluate(problem, problem.initial_code.replace("return x", "return 1e308 if x > 0 else -1e308"))
    assert result.ok, result
    assert all(score == 0.0 for score in result.scores.values()), result.scores


def test_priority_with_the_wrong_shape_is_bad_output() -> None:
    problem = shipped("bin_packing")
    code = problem.initial_code.replace("return -np.arange(len(bins), dtype=float)", "return 1.0")
    result = evaluate(problem, code)
    assert (result.ok, result.failure) == (False, "bad_output")
    assert "one score per bin" in result.detail


def test_bin_packing_candidate_never_sees_an_item_before_it_arrives() -> None:
    """The packing loop runs in the trusted evaluator: the candidate's process holds no instance to peek at
    (a priority that searches its whole heap for the item list would crash if it found one), and rewriting
    its driver changes nothing but what its own priority returns."""
    problem = shipped("bin_packing")
    snoop = problem.initial_code + textwrap.dedent("""
        import gc
        import sys

        _first_fit = priority

        def priority(item, bins):
            for thing in gc.get_objects():
                if isinstance(thing, list) and len(thing) >= 250 and all(type(x) is int and 20 <= x <= 100 for x in thing):
                    raise RuntimeError("found the instance")
            return _first_fit(item, bins)

        sys.modules["evolve_driver"].pack = lambda priority, items, capacity: [0] * len(items)
    """)
    first_fit = evaluate(problem, problem.initial_code)
    snooped = evaluate(problem, snoop)
    assert snooped.ok, snooped
    assert snooped.scores == first_fit.scores


def test_run_length_candidate_failing_every_test_is_a_crash_but_one_failure_costs_one_test() -> None:
    problem = shipped("run_length")
    everywhere = evaluate(problem, "def encode(s):\n    return s[0] + undefined\n")
    assert (everywhere.ok, everywhere.failure) == (False, "crash")
    assert "IndexError" in everywhere.detail or "NameError" in everywhere.detail
    solution = (SOLUTIONS / "run_length.py").read_text()
    once = solution.replace("    parts = []", "    if s == 'AaAa':\n        raise KeyError(s)\n    parts = []")
    result = evaluate(problem, once)
    assert result.ok, result
    assert [name for name, score in result.scores.items() if score == 0.0] == ["test_08"]
    assert "test_08: encode('AaAa') raised KeyError" in result.artifacts["feedback"]


CHEATER = '''
import os

def _parent_arguments(pid):
    with open(f"/proc/{pid}/status") as handle:
        parent = next(line.split()[1] for line in handle if line.startswith("PPid:"))
    with open(f"/proc/{parent}/cmdline", "rb") as handle:
        return parent, handle.read().decode().split("\\0")

def _steal():
    """Find the problem folder on the evaluator process's command line and read the hidden target."""
    pid, seen = os.getpid(), []
    for _ in range(3):
        pid, arguments = _parent_arguments(pid)
        seen += arguments
    folders = [a for a in seen if os.path.basename(a.rstrip("/")) == "symbolic_regression"]
    if not folders:
        raise RuntimeError(f"no problem folder on the command lines: {seen}")
    with open(os.path.join(folders[0], "evaluator.py")) as handle:
        source = handle.read()
    namespace = {}
    exec(source[source.index("def target"):source.index("def regions")], namespace)
    return namespace["target"]

TARGET = _steal()

# EVOLVE-BLOCK-START
def f(x):
    return TARGET(x)
# EVOLVE-BLOCK-END
'''


def test_candidate_cannot_read_the_hidden_target_from_the_evaluator() -> None:
    problem = shipped("symbolic_regression")
    result = evaluate(problem, CHEATER)
    assert not result.ok, "the candidate read the evaluator and reproduced the target"
    assert result.failure == "crash"
    # /proc is unreadable in the sandbox (and the evaluator's argv names no folder): it stops at the first step.
    # Landlock refuses it (PermissionError); in a mount namespace of its own /proc is an empty tmpfs (not found).
    assert "/proc/" in result.detail and result.detail.split(":")[0] in ("PermissionError", "FileNotFoundError")
