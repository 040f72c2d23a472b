"""evolve import generated: seeded, distinct, every step needed, hidden tests out of the prompt, solvable in the
sandbox by the reference."""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from evolve.cli.main import main
from evolve.problems.check import check_problem, check_solution
from evolve.problems.generated.folders import import_generated, initial_program, reference_program
from evolve.problems.generated.generator import (
    DIFFICULTIES,
    LEVELS,
    GeneratedProblem,
    _passes,
    _shorter,
    compile_chain,
    generate,
    level,
    passing_pairs,
    problem_name,
)
from evolve.problems.generated.operations import KINDS, is_easy
from evolve.problems.problem import ProblemError, load_problem

POOL = {difficulty: generate(60, difficulty, 0) for difficulty in DIFFICULTIES}
BETWEEN = {name: generate(300, name, 0) for name in ("2e", "2ee")}  # the levels between one step and two


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
    assert passing_pairs([problem for pool in POOL.values() for problem in pool]) == []
    assert passing_pairs(BETWEEN["2e"][:100] + BETWEEN["2ee"][:100]) == []  # disjoint tiers, behaviours apart too


def test_across_streams_a_problem_may_pass_another_s_tests_and_passing_pairs_finds_it() -> None:
    # streams are drawn apart: a longer chain may behave as one of another level (negate, largest, squared is
    # smallest, squared) or pass a shorter one's tests (append 6 then smallest passes gl_d1_0037's, smallest)
    pairs = passing_pairs(POOL[1] + POOL[3] + BETWEEN["2e"][:100] + BETWEEN["2ee"][:60])
    assert ("gl_d2e_0073", "gl_d1_0037") in pairs and ("gl_d3_0040", "gl_d2ee_0035") in pairs


def test_every_step_is_needed_to_pass_the_hidden_tests() -> None:
    for problem in POOL[2] + POOL[3] + POOL[4]:
        assert len(problem.operations) == problem.difficulty
        for shorter in _shorter(problem.operations):
            assert not _passes(compile_chain(shorter), problem.tests), (problem.name, shorter)


def test_tests_vary_and_are_at_least_ten_and_examples_are_other_inputs() -> None:
    for problem in (problem for pool in [*POOL.values(), *BETWEEN.values()] for problem in pool):
        assert len(problem.tests) >= 10 and len({repr(case.expected) for case in problem.tests}) > 1
        shown = {repr(case.argument) for case in problem.examples}
        assert len(problem.examples) == 3 and not shown & {repr(case.argument) for case in problem.tests}


def test_the_levels_between_one_and_two_steps_draw_their_easy_steps_from_the_easy_tier_only() -> None:
    for name, easy in (("2e", (False, True)), ("2ee", (True, True))):
        problems = BETWEEN[name]
        assert len({problem.function for problem in problems}) == 300  # hundreds of distinct problems
        assert [problem.name for problem in problems[:2]] == [f"gl_d{name}_0001", f"gl_d{name}_0002"]
        for problem in problems:
            assert problem.difficulty == 2 and problem.level == name and len(problem.operations) == 2
            assert [is_easy(operation) for operation in problem.operations] == list(easy), problem.function
            for shorter in _shorter(problem.operations):
                assert not _passes(compile_chain(shorter), problem.tests), (problem.name, shorter)
    assert generate(20, "2e", 0) == BETWEEN["2e"][:20] and generate(5, "2E", 0) == BETWEEN["2e"][:5]


def test_the_easy_tier_is_a_proper_part_of_every_type_of_operation() -> None:
    for takes in {kind.takes for kind in KINDS}:
        kinds = [kind for kind in KINDS if kind.takes == takes]
        assert any(is_easy(kind) for kind in kinds), takes  # a step after any output type can be easy
    assert not all(is_easy(kind) for kind in KINDS)


def test_step_counts_keep_their_names_and_streams_and_new_levels_are_named_apart() -> None:
    assert level(2) is level("2") is LEVELS["2"] and level(2).steps == 2 and level("2ee").easy == (True, True)
    assert problem_name("2e", 0, 7) == "gl_d2e_0007" and problem_name("2ee", 3, 7) == "gl_s3_d2ee_0007"
    assert [problem.level for problem in POOL[2]] == [""] * 60
    assert {problem.name for problem in BETWEEN["2ee"]}.isdisjoint({problem.name for problem in POOL[2]})
    with pytest.raises(ProblemError, match="--difficulty 1.5: choose one of 1, 2, 3, 4, 2e, 2ee"):
        generate(1, "1.5", 0)


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
    for name in BETWEEN:  # `evolve import generated --difficulty` takes a number: the levels come in by the function
        import_generated(3, name, 0, out)
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


def test_a_forced_import_leaves_unchanged_files_alone_and_mends_a_damaged_one_whole(tmp_path: Path) -> None:
    """The calibration imports the pool again while a piece runs on it: a file already right is not rewritten (its
    mtime stays), a damaged one is replaced, and no partial file is left behind."""
    from evolve.problems.generated.folders import import_generated

    (folder,) = [imported.folder for imported in import_generated(1, 1, out=tmp_path)]
    stamps = {path.name: path.stat().st_mtime_ns for path in folder.iterdir()}
    (folder / "evaluator.py").write_text("damaged")
    import_generated(1, 1, out=tmp_path, force=True)
    assert {path.name for path in folder.iterdir()} == set(stamps)
    assert "damaged" not in (folder / "evaluator.py").read_text()
    assert {name: (folder / name).stat().st_mtime_ns for name in stamps if name != "evaluator.py"} == \
        {name: stamp for name, stamp in stamps.items() if name != "evaluator.py"}


def reference_file(problem: GeneratedProblem, folder: Path) -> Path:
    path = folder / f"{problem.name}_reference.py"
    path.write_text(reference_program(problem))
    return path


def test_references_solve_and_stubs_score_zero_in_the_sandbox(programs: Path, tmp_path: Path) -> None:
    sample = [problem for pool in [*POOL.values(), *BETWEEN.values()] for problem in pool[:3]]

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
    provenance = " ".join((programs / BETWEEN["2e"][0].name / "problem.toml").read_text().split())
    assert "Problem 1 of level 2e (two operations composed, the first from outside the easy tier, the second from it)" in provenance
