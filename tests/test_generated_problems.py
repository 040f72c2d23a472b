"""evolve import generated: seeded, distinct, every step needed, hidden tests out of the prompt, solvable in the
sandbox by the reference."""

from __future__ import annotations

import itertools
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from evolve.cli.main import main
from evolve.problems.check import check_problem, check_solution
from evolve.problems.generated.folders import initial_program, reference_program
from evolve.problems.generated.generator import (
    DIFFICULTIES,
    GeneratedProblem,
    _passes,
    _shorter,
    compile_chain,
    generate,
    problem_name,
)
from evolve.problems.problem import ProblemError, load_problem

POOL = {difficulty: generate(60, difficulty, 0) for difficulty in DIFFICULTIES}


def folder_bytes(folder: Path) -> dict[str, bytes]:
    return {str(path.relative_to(folder)): path.read_bytes() for path in sorted(folder.rglob("*")) if path.is_file()}


def test_the_same_arguments_write_byte_identical_folders(tmp_path: Path) -> None:
    for out in ("a", "b"):
        assert main(["import", "generated", "--count", "6", "--difficulty", "2", "--seed", "5",
                     "--out", str(tmp_path / out)]) == 0
    first = folder_bytes(tmp_path / "a")
    assert first == folder_bytes(tmp_path / "b")
    assert len(first) == 6 * 4 and "gl_s5_d2_0006/check.py" in first


def test_a_larger_count_extends_a_smaller_one_and_seeds_give_other_problems() -> None:
    assert generate(10, 3, 0) == POOL[3][:10]
    assert [problem.function for problem in generate(10, 3, 1)] != [problem.function for problem in POOL[3][:10]]
    assert problem_name(2, 0, 7) == "gl_d2_0007" and problem_name(2, 3, 7) == "gl_s3_d2_0007"


def test_no_problem_passes_the_hidden_tests_of_another() -> None:
    problems = [problem for pool in POOL.values() for problem in pool]
    functions = {problem.name: compile_chain(problem.operations) for problem in problems}
    same = [(a.name, b.name) for a, b in itertools.permutations(problems, 2)
            if a.takes == b.takes and _passes(functions[a.name], b.tests)]
    assert same == []


def test_every_step_is_needed_to_pass_the_hidden_tests() -> None:
    for problem in POOL[2] + POOL[3] + POOL[4]:
        assert len(problem.operations) == problem.difficulty
        for shorter in _shorter(problem.operations):
            assert not _passes(compile_chain(shorter), problem.tests), (problem.name, shorter)


def test_tests_vary_and_are_at_least_ten_and_examples_are_other_inputs() -> None:
    for problem in (problem for pool in POOL.values() for problem in pool):
        assert len(problem.tests) >= 10 and len({repr(case.expected) for case in problem.tests}) > 1
        shown = {repr(case.argument) for case in problem.examples}
        assert len(problem.examples) == 3 and not shown & {repr(case.argument) for case in problem.tests}


def test_difficulty_one_runs_out_of_distinct_problems_and_bad_arguments_are_errors() -> None:
    with pytest.raises(ProblemError, match="used up"):
        generate(500, 1, 0)
    with pytest.raises(ProblemError, match="--difficulty 7"):
        generate(1, 7, 0)
    with pytest.raises(ProblemError, match="--count 0"):
        generate(0, 1, 0)


@pytest.fixture(scope="module")
def programs(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("generated")
    for difficulty in DIFFICULTIES:
        assert main(["import", "generated", "--count", "3", "--difficulty", str(difficulty), "--out", str(out)]) == 0
    return out


def test_hidden_answers_stay_in_check_py_and_out_of_what_the_policy_sees(programs: Path) -> None:
    problem = POOL[2][0]
    folder = programs / problem.name
    check = (folder / "check.py").read_text()
    shown = (folder / "initial.py").read_text() + (folder / "problem.toml").read_text()
    assert (folder / "initial.py").read_text() == initial_program(problem)
    for case in problem.tests:
        assert f"candidate({case.argument!r}) == {case.expected!r}" in check
        assert repr(case.argument) not in shown
    assert all(repr(case.expected) in shown for case in problem.examples)
    assert "value = " not in shown  # the reference body is nowhere in the folder


def test_import_refuses_existing_folders_unless_forced(programs: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["import", "generated", "--count", "3", "--difficulty", "1", "--out", str(programs)]) != 0
    assert "gl_d1_0001 and 2 more: already exists; pass --force" in capsys.readouterr().out
    assert main(["import", "generated", "--count", "3", "--difficulty", "1", "--out", str(programs), "--force"]) == 0


def reference_file(problem: GeneratedProblem, folder: Path) -> Path:
    path = folder / f"{problem.name}_reference.py"
    path.write_text(reference_program(problem))
    return path


def test_references_solve_and_stubs_score_zero_in_the_sandbox(programs: Path, tmp_path: Path) -> None:
    sample = [problem for difficulty in DIFFICULTIES for problem in POOL[difficulty][:3]]

    def outcome(problem: GeneratedProblem) -> tuple[str, bool, str, bool]:
        solved = check_solution(problem.name, programs, reference_file(problem, tmp_path))
        seed = check_problem(problem.name, programs)
        return problem.name, solved.ok, solved.findings[-1].message, seed.ok

    with ThreadPoolExecutor(2) as pool:
        results = list(pool.map(outcome, sample))
    assert [(name, message) for name, ok, message, _ in results if not ok or "12 of 12" not in message] == []
    assert all(seed_ok for *_, seed_ok in results)
    loaded = load_problem(sample[-1].name, programs)
    assert loaded.stub_seed and len(loaded.objectives) == 12 and loaded.solved_all_at_least == 1.0
