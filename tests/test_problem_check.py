"""`evolve check` and `evolve new-problem`: the scaffold works, and each mistake gets one message naming its file."""

from __future__ import annotations

from pathlib import Path

import pytest

from evolve.cli.main import main
from evolve.problems.check import CheckReport, check_problem, new_problem
from evolve.problems.problem import ProblemError, list_problems, load_problem

ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="module")
def scaffold(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return new_problem("stairs", tmp_path_factory.mktemp("programs"))


def scaffold_copy(tmp_path: Path, scaffold: Path) -> Path:
    folder = tmp_path / "stairs"
    folder.mkdir()
    for file in scaffold.iterdir():
        (folder / file.name).write_text(file.read_text())
    return folder


def errors(report: CheckReport) -> list[str]:
    return [finding.message for finding in report.findings if finding.severity == "error"]


def warnings(report: CheckReport) -> list[str]:
    return [finding.message for finding in report.findings if finding.severity == "warning"]


def test_new_problem_scaffold_loads_and_passes_the_check(scaffold: Path) -> None:
    assert sorted(path.name for path in scaffold.iterdir()) == ["driver.py", "evaluator.py", "initial.py",
                                                                 "problem.toml"]
    assert list_problems(scaffold.parent) == ["stairs"]
    report = check_problem("stairs", scaffold.parent)
    assert report.ok and not warnings(report), report.findings
    assert report.initial is not None and report.initial.ok
    # solve(n) = n is right for n = 1, 2, 3 only: partial credit to start from, far from solved
    assert [name for name, value in report.initial.scores.items() if value == 1.0] == ["test_00", "test_01",
                                                                                      "test_02"]
    assert load_problem("stairs", scaffold.parent).scalar(report.initial.scores) == pytest.approx(3 / 14)


def test_scaffold_is_solved_by_the_right_program(scaffold: Path) -> None:
    import asyncio

    from evolve.problems.evaluation import evaluate_program
    from evolve.program_format import replace_block

    problem = load_problem("stairs", scaffold.parent)
    right = replace_block(problem.initial_code, "def solve(n: int) -> int:\n    a, b = 1, 1\n"
                                                "    for _ in range(n):\n        a, b = b, a + b\n    return a\n")
    result = asyncio.run(evaluate_program(problem, right))
    assert result.ok and problem.is_solved(result.scores)


@pytest.mark.parametrize("name", ["Stairs", "1st", "has-dash", "class", ""])
def test_new_problem_refuses_a_name_that_is_not_an_identifier(tmp_path: Path, name: str) -> None:
    with pytest.raises(ProblemError, match="lower-case letters"):
        new_problem(name, tmp_path)


def test_new_problem_never_overwrites_a_folder(scaffold: Path) -> None:
    before = (scaffold / "evaluator.py").read_text()
    with pytest.raises(ProblemError, match="already exists"):
        new_problem("stairs", scaffold.parent)
    assert (scaffold / "evaluator.py").read_text() == before


EVALUATE_LINE = "    reply = fail_unless_ok(sandbox.run_driver(program_path, DRIVER, INPUTS)).value\n"


@pytest.mark.parametrize(
    ("file", "edit", "where", "fragments"),
    [
        ("initial.py", None, "initial.py", ["file not found"]),
        ("evaluator.py", None, "evaluator.py", ["file not found"]),
        ("problem.toml", None, "problem.toml", ["file not found"]),
        ("initial.py", lambda text: text.replace("# EVOLVE-BLOCK-START\n", ""), "initial.py",
         ["# EVOLVE-BLOCK-START"]),
        ("evaluator.py", lambda text: text.replace("def evaluate(", "def score("), "evaluator.py", ["evaluate"]),
        ("evaluator.py", lambda text: text.replace(EVALUATE_LINE, EVALUATE_LINE + "    1 / 0\n"), "evaluator.py",
         ["ZeroDivisionError", "fix evaluate()"]),
        ("evaluator.py", lambda text: text.replace("return EvaluationResult(scores=scores, artifacts={"
                                                   "\"feedback\": feedback})", "return list(scores.values())"),
         "evaluator.py", ["returned list", "fix evaluate()"]),
        ("evaluator.py", lambda text: text.replace("1.0 if right else 0.0", "float('nan')"), "evaluator.py",
         ["is nan"]),
        ("evaluator.py", lambda text: text.replace("1.0 if right else 0.0", "float('inf')"), "evaluator.py",
         ["is inf"]),
        ("evaluator.py", lambda text: text.replace("scores[f\"test_{number:02d}\"]", "scores[f\"t{number}\"]"),
         "evaluator.py", ["missing", "unexpected"]),
        ("driver.py", None, "initial.py", ["driver.py"]),
    ],
    ids=["no-initial", "no-evaluator", "no-toml", "no-marker", "no-evaluate", "raises", "non-dict", "nan", "inf",
         "wrong-names", "no-driver"],
)
def test_each_mistake_is_one_error_naming_its_file(tmp_path: Path, scaffold: Path, file: str, edit, where: str,
                                                  fragments: list[str]) -> None:
    folder = scaffold_copy(tmp_path, scaffold)
    path = folder / file
    if edit is None:
        path.unlink()
    else:
        edited = edit(path.read_text())
        assert edited != path.read_text(), "the edit must change the file"
        path.write_text(edited)
    report = check_problem("stairs", tmp_path)
    assert not report.ok
    [message] = errors(report)
    assert "\n" not in message
    assert str(folder / where) in message or (where == "problem.toml" and "stairs" in message), message
    for fragment in fragments:
        assert fragment in message, message


def test_vector_that_changes_length_between_evaluations_is_an_error(tmp_path: Path, scaffold: Path) -> None:
    folder = scaffold_copy(tmp_path, scaffold)
    evaluator = folder / "evaluator.py"
    counter = tmp_path / "count"
    evaluator.write_text(evaluator.read_text().replace(
        "    feedback =",
        f"    counter = Path({str(counter)!r})\n"
        "    calls = int(counter.read_text()) if counter.exists() else 0\n"
        "    counter.write_text(str(calls + 1))\n"
        "    if calls == 1:\n"
        "        scores.pop('test_13')\n"
        "    feedback ="))
    report = check_problem("stairs", tmp_path)
    [message] = errors(report)
    assert message.startswith(str(evaluator)) and "second evaluation" in message and "test_13" in message


def test_nondeterministic_evaluator_is_a_warning_naming_the_objectives(tmp_path: Path, scaffold: Path) -> None:
    folder = scaffold_copy(tmp_path, scaffold)
    evaluator = folder / "evaluator.py"
    evaluator.write_text("import random\n" + evaluator.read_text().replace(
        "    feedback =", "    scores['test_13'] = random.random()\n    feedback ="))
    report = check_problem("stairs", tmp_path)
    assert report.ok
    [message] = warnings(report)
    assert message.startswith(str(evaluator)) and "test_13" in message and "seed" in message


def test_evaluator_blaming_itself_for_a_broken_candidate_is_an_error(tmp_path: Path, scaffold: Path) -> None:
    folder = scaffold_copy(tmp_path, scaffold)
    evaluator = folder / "evaluator.py"
    evaluator.write_text(evaluator.read_text().replace(EVALUATE_LINE, "    reply = sandbox.run_driver("
                                                       "program_path, DRIVER, INPUTS).value\n    reply = list(reply)\n"))
    report = check_problem("stairs", tmp_path)
    [message] = errors(report)
    assert message.startswith(str(evaluator)) and "fail_unless_ok" in message


def test_already_solved_initial_program_is_a_warning(tmp_path: Path, scaffold: Path) -> None:
    folder = scaffold_copy(tmp_path, scaffold)
    initial = folder / "initial.py"
    initial.write_text(initial.read_text().replace("    return n\n", "    a, b = 1, 1\n    for _ in range(n):\n"
                                                   "        a, b = b, a + b\n    return a\n"))
    report = check_problem("stairs", tmp_path)
    assert report.ok
    assert any("already meets the solved rule" in message for message in warnings(report))


def test_cli_check_exit_codes_and_problems_listing(tmp_path: Path, scaffold: Path, capsys) -> None:
    assert main(["check", "stairs", "--programs-dir", str(scaffold.parent)]) == 0
    assert "stairs: passes the check" in capsys.readouterr().out
    broken = scaffold_copy(tmp_path, scaffold)
    (broken / "initial.py").unlink()
    assert main(["check", "stairs", "--programs-dir", str(tmp_path)]) == 1
    out = capsys.readouterr().out
    assert "error:" in out and "FAILS the check" in out
    assert main(["problems", "--programs-dir", str(scaffold.parent)]) == 0
    out = capsys.readouterr().out
    assert "stairs" in out and "14" in out and "every objective >= 1" in out


def test_cli_new_problem_then_check_by_folder_path(tmp_path: Path, capsys) -> None:
    assert main(["new-problem", "knapsack", "--programs-dir", str(tmp_path)]) == 0
    assert "created" in capsys.readouterr().out
    assert main(["check", str(tmp_path / "knapsack")]) == 0
    assert main(["new-problem", "knapsack", "--programs-dir", str(tmp_path)]) == 1
    assert "already exists" in capsys.readouterr().out


def test_a_seed_scoring_0_everywhere_is_a_warning_unless_problem_toml_calls_it_a_stub(tmp_path: Path,
                                                                                      scaffold: Path) -> None:
    folder = scaffold_copy(tmp_path, scaffold)
    initial = folder / "initial.py"
    initial.write_text(initial.read_text().replace("    return n\n", "    return -1\n"))
    report = check_problem("stairs", tmp_path)
    assert report.initial is not None and set(report.initial.scores.values()) == {0.0}
    assert any("every objective of initial.py is 0" in message for message in warnings(report))  # unexpected

    toml = folder / "problem.toml"
    toml.write_text("stub_seed = true\n" + toml.read_text())
    report = check_problem("stairs", tmp_path)
    assert report.ok and warnings(report) == []
    assert "initial.py scores 0 on every objective, as the stub seed it is should (problem.toml: stub_seed = true)" \
        in [finding.message for finding in report.findings if finding.severity == "ok"]


def test_an_imported_humaneval_task_passes_the_check_without_the_all_zero_warning(tmp_path: Path) -> None:
    from evolve.problems.humaneval import import_humaneval

    (imported,) = import_humaneval(tmp_path, [0])
    report = check_problem(imported.name, tmp_path)
    assert report.ok and report.problem is not None and report.problem.stub_seed
    assert report.initial is not None and set(report.initial.scores.values()) == {0.0}
    assert warnings(report) == []
