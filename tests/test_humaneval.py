"""evolve import humaneval: folders, one objective per executed assert, tagged values, canonical solutions solved."""

from __future__ import annotations

import asyncio
import math
import random
import re
import tomllib
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from evolve.cli.main import main
from evolve.evaluator_api import Sandbox, SandboxLimits
from evolve.problems.check import check_problem, check_solution
from evolve.problems.evaluation import evaluate_program
from evolve.problems.humaneval import (
    STUB_BODY,
    HumanEvalTask,
    import_humaneval,
    parse_ids,
    read_tasks,
    toml_string,
)
from evolve.problems.humaneval_check import CallResult, evaluate_check, run_check
from evolve.problems.humaneval_codec import EncodeError, decode, encode
from evolve.problems.problem import ProblemError, load_problem
from evolve.records import MutationRequest, Program
from evolve.rl.rollouts import seed_parent
from evolve.search.prompts import build_prompt

TASKS = read_tasks()
LOOPS = [task.number for task in TASKS if re.search(r"^\s+for ", task.test, re.MULTILINE)]
FLOATS = [task.number for task in TASKS if re.search(r"\d\.\d|abs\(|math\.|isclose", task.test)]
# the test compares with the entry point itself (33), asserts truthiness both ways (52, 56, 61), `is True` (72),
# a helper in the prompt (10)
SPECIAL = [10, 33, 52, 56, 61, 72]
SAMPLE = sorted(set(random.Random(13).sample(range(len(TASKS)), 30)) | set(LOOPS) | set(FLOATS) | set(SPECIAL))


@pytest.fixture(scope="module")
def programs(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("humaneval")
    assert main(["import", "humaneval", "--out", str(out)]) == 0
    return out


def solution_file(task: HumanEvalTask, folder: Path) -> Path:
    path = folder / f"{task.name}_solution.py"
    path.write_text(task.prompt + task.canonical_solution)
    return path


def in_process(function: object) -> object:
    def call(args: tuple) -> CallResult:
        try:
            return CallResult("ok", decode(encode(function(*args))))  # type: ignore[operator]
        except Exception as exc:  # noqa: BLE001
            return CallResult("crash", detail=type(exc).__name__)

    return call


def test_import_writes_a_loadable_folder_per_task_without_the_canonical_solution(programs: Path) -> None:
    folders = sorted(path.name for path in programs.iterdir())
    assert folders == [f"he_{number:03d}" for number in range(164)]
    for task in TASKS:
        problem = load_problem(task.name, programs)
        assert problem.prompt.docstrings and problem.prompt.context == "all" and problem.prompt.description_chars == 0
        assert sorted(path.name for path in problem.path.iterdir() if path.is_file()) == [
            "check.py", "evaluator.py", "initial.py", "problem.toml"]
        assert problem.reduction == "mean" and problem.solved_all_at_least == 1.0
        body = task.canonical_solution.strip()
        if len(body) > 40:  # a one-line body such as `return x + y` could occur in a prompt by chance
            for path in problem.path.iterdir():
                assert body not in path.read_text(), (task.task_id, path.name)
    assert len(load_problem("he_000", programs).objectives) == 7
    assert len(load_problem("he_032", programs).objectives) == 100  # a loop of 100 generated polynomials
    assert len(load_problem("he_053", programs).objectives) == 105  # 5 fixed asserts and 100 random pairs


def test_initial_program_is_the_prompt_as_written_with_the_function_as_the_block(programs: Path) -> None:
    task = TASKS[32]
    code = load_problem(task.name, programs).initial_code
    assert code.replace("# EVOLVE-BLOCK-START\n", "").startswith(task.prompt.rstrip())
    before, block = code.split("# EVOLVE-BLOCK-START\n")
    assert "def poly(" in before and block.startswith("def find_zero(xs: list):\n")
    assert block.endswith(f"    {STUB_BODY}\n# EVOLVE-BLOCK-END\n")


def test_import_refuses_existing_folders_unless_forced(programs: Path, tmp_path: Path) -> None:
    with pytest.raises(ProblemError, match="he_003: already exists; pass --force"):
        import_humaneval(programs, [3])
    (tmp_path / "he_003").mkdir()
    (tmp_path / "he_003" / "notes.txt").write_text("mine")
    assert [p.name for p in import_humaneval(tmp_path, [3, 4], force=True)] == ["he_003", "he_004"]
    assert (tmp_path / "he_003" / "notes.txt").read_text() == "mine"
    assert parse_ids("0-2, 7,2", 164) == [0, 1, 2, 7]
    for bad in ("5-2", "164", "x", ""):
        with pytest.raises(ProblemError, match="--ids"):
            parse_ids(bad, 164)
    assert main(["import", "humaneval", "--out", str(tmp_path), "--ids", "170"]) == 1


def test_a_loop_over_generated_inputs_gives_one_fixed_objective_per_input() -> None:
    task = TASKS[53]  # add(x, y): 5 fixed asserts, then 100 random pairs in 0..1000

    def wrong_above_1000(x: int, y: int) -> int:
        return x + y if x + y <= 1000 else 0

    calls: list[tuple] = []

    def recorded(args: tuple) -> CallResult:
        calls.append(args)
        return in_process(wrong_above_1000)(args)  # type: ignore[operator]

    outcomes, stopped = run_check(task.check_source, "check.py", task.entry_point, recorded)
    assert stopped == "" and len(outcomes) == 105
    assert [outcome.passed for outcome in outcomes] == [x + y <= 1000 for x, y in calls]
    assert 10 < sum(not outcome.passed for outcome in outcomes) < 90
    again: list[tuple] = []
    run_check(task.check_source, "check.py", task.entry_point, lambda args: again.append(args) or CallResult("ok", 0))
    assert again == calls  # the generated inputs are the same at every evaluation
    failing = next(outcome for outcome in outcomes if not outcome.passed)
    assert re.fullmatch(r"add\(\d+, \d+\) returned 0, which fails the test", failing.failure)


def test_sandbox_scores_match_the_trusted_run_on_a_partly_wrong_program(programs: Path) -> None:
    problem = load_problem("he_053", programs)
    wrong = problem.initial_code.replace(STUB_BODY, "return x + y if x < 500 else x - y")
    evaluation = asyncio.run(evaluate_program(problem, wrong))
    assert evaluation.ok, evaluation.detail

    def expected(x: int, y: int) -> int:
        return x + y if x < 500 else x - y

    outcomes, _ = run_check(TASKS[53].check_source, "check.py", "add", in_process(expected))  # type: ignore[arg-type]
    assert [evaluation.scores[name] for name in problem.objectives] == [float(o.passed) for o in outcomes]
    assert 0 < problem.scalar(evaluation.scores) < 1
    assert "which fails the test" in evaluation.artifacts["feedback"]


def test_values_round_trip_with_their_python_types() -> None:
    value = [(1, 2), {3, 4}, frozenset({"a"}), {1: "x", (2, 3): [None, True]}, 1.0, 1, math.inf, -math.inf, -0.0,
             "text \"quoted\" \n", [], (), {}, set(), [[[(False,)]]], 10**30]
    back = decode(encode(value))
    assert back == value and [type(item) for item in back] == [type(item) for item in value]
    assert back[1] == {3, 4} and back[4] == 1.0 and type(back[4]) is float and type(back[5]) is int
    assert math.copysign(1, back[8]) == -1
    assert math.isnan(decode(encode(math.nan)))
    assert decode(encode((1, 2))) == (1, 2) and decode(encode((1, 2))) != [1, 2]


def test_decode_refuses_what_no_encoder_writes() -> None:
    deep: object = 0
    for _ in range(200):
        deep = [deep]
    for hostile in ({"tuple": [1], "set": [2]}, {"eval": "1"}, {"float": "1" * 100}, {"float": 3},
                    {"set": [[1]]}, {"dict": [[[1], 2]]}, {"dict": [1]}, {"tuple": "ab"}, deep):
        with pytest.raises(ValueError):
            decode(hostile)
    with pytest.raises(EncodeError):
        encode(object())


class _Sandboxed:
    """A synthetic check (check.py written here) run against candidate programs in the real sandbox."""

    CHECK = '''
def check(candidate):
    assert candidate(0) == (1, 2)
    assert candidate(1) == {1: "a", (2, 3): {4.5}}
    assert candidate(2) is True
    assert abs(candidate(3) - 0.1) < 1e-9
    assert candidate(4) == 4
'''

    def __init__(self, folder: Path) -> None:
        self.folder = folder
        self.check = folder / "check.py"
        self.check.write_text(self.CHECK)

    def scores(self, body: str) -> tuple[list[float], str]:
        program = self.folder / "candidate.py"
        program.write_text("import os, sys\n\ndef f(n):\n" + "".join(f"    {line}\n" for line in body.splitlines()))
        limits = SandboxLimits(wall_time_s=20, cpu_time_s=20, memory_mb=1024, max_processes=8,
                               max_output_bytes=1_000_000)
        result = evaluate_check(self.check, "f", 5, str(program), Sandbox(limits))
        return [result.scores[f"test_{index:03d}"] for index in range(5)], result.artifacts["feedback"]


GOOD = 'return [(1, 2), {1: "a", (2, 3): {4.5}}, True, 0.1, 4][n]'


def test_a_candidate_in_the_sandbox_gets_tuples_dicts_sets_and_bools_back_as_written(tmp_path: Path) -> None:
    sandboxed = _Sandboxed(tmp_path)
    assert sandboxed.scores(GOOD) == ([1.0] * 5, "all tests pass")
    lists, feedback = sandboxed.scores(GOOD.replace("(1, 2)", "[1, 2]").replace("True", "1"))
    assert lists == [0.0, 1.0, 0.0, 1.0, 1.0]  # a list is not a tuple, and 1 is not True
    assert "f(0) returned [1, 2], which fails the test" in feedback


@pytest.mark.parametrize("hostile, reason", [
    ("x = []\nfor _ in range(100000):\n    x = [x]\nreturn x", "cannot be sent back"),
    ("return 'x' * 5_000_000", "output over the"),
    ("class Equal:\n    def __eq__(self, other):\n        return True\nreturn Equal()", "cannot be sent back"),
    ("class Sly(int):\n    def __eq__(self, other):\n        return True\nreturn Sly(7)", "returned 7"),
    ("os.write(int(sys.argv[1]), b'{\"ok\": true, \"value\": {\"value\": ' + b'[' * 100000 + b']' * 100000"
     " + b'}}\\n')\nimport time\ntime.sleep(5)", "the reply was not a result line"),  # the sandbox parses safely
    ("os.write(int(sys.argv[1]), b'{\"ok\": true, \"value\": {\"value\": {\"exec\": 1}}}\\n')\nimport time\n"
     "time.sleep(5)", "cannot be read"),
])
def test_a_hostile_return_value_fails_its_own_test_only(tmp_path: Path, hostile: str, reason: str) -> None:
    body = f"if n != 4:\n    return {GOOD.removeprefix('return ')}\n" + hostile
    scores, feedback = _Sandboxed(tmp_path).scores(body)
    assert scores == [1.0, 1.0, 1.0, 1.0, 0.0]
    assert reason in feedback and feedback.startswith("test_004: f(4")


def test_a_program_that_does_not_load_or_loops_forever_is_a_failed_candidate(programs: Path) -> None:
    problem = load_problem("he_000", programs)
    missing = asyncio.run(evaluate_program(problem, "def other():\n    return 1\n"))
    assert (missing.ok, missing.failure) == (False, "crash") and "has_close_elements" in missing.detail
    slow = problem.initial_code.replace(STUB_BODY, "while True:\n        pass")
    looping = asyncio.run(evaluate_program(problem, slow))
    assert (looping.ok, looping.failure) == (False, "timeout")
    assert looping.detail.endswith("; 3 made, the rest not run")  # three calls ran out of their 2 s


def test_initial_program_scores_zero_and_is_admitted_as_the_seed(programs: Path) -> None:
    problem = load_problem("he_038", programs)
    seed = asyncio.run(seed_parent(problem))  # what evolve run and evolve train do first; raises if not admitted
    assert seed.scalar == 0.0 and set(seed.scores.values()) == {0.0} and len(seed.scores) == 100
    assert "NotImplementedError" in seed.artifacts["feedback"]
    report = check_problem("he_038", programs)
    assert report.ok, report.findings


def test_canonical_solutions_are_solved_by_evolve_check_solution(programs: Path, tmp_path: Path) -> None:
    def solved(number: int) -> tuple[int, bool, str]:
        task = TASKS[number]
        report = check_solution(task.name, programs, solution_file(task, tmp_path))
        return number, report.ok, report.findings[-1].message

    with ThreadPoolExecutor(2) as pool:
        results = list(pool.map(solved, SAMPLE))
    assert [(number, message) for number, ok, message in results if not ok] == []
    assert all("solved" in message for _, _, message in results)


def test_evolve_check_solution_exit_code_and_lines(programs: Path, tmp_path: Path,
                                                   capsys: pytest.CaptureFixture[str]) -> None:
    task = TASKS[2]
    assert main(["check", task.name, "--programs-dir", str(programs), "--solution",
                 str(solution_file(task, tmp_path))]) == 0
    assert "5 of 5" not in capsys.readouterr().out  # he_002 has 3 tests
    wrong = tmp_path / "wrong.py"
    wrong.write_text(task.prompt + "    return number - int(number) + 0.001\n")
    assert main(["check", str(programs / task.name), "--solution", str(wrong)]) == 1
    out = capsys.readouterr().out
    assert "not solved" in out and "0 of 3 objectives pass" in out
    assert main(["check", str(programs / task.name), "--solution", str(tmp_path / "absent.py")]) == 1
    assert "cannot be read" in capsys.readouterr().out


def seed_prompt_text(programs: Path, name: str) -> str:
    problem = load_problem(name, programs)
    parent = Program(id=1, run_id=1, code=problem.initial_code, parent_id=None, island=0, iteration=0, policy="",
                     edit="", scores={n: 0.0 for n in problem.objectives}, scalar=0.0, solved=False)
    request = MutationRequest(iteration=1, island=0, parent=parent, inspirations=(),
                              problem_description=problem.description, objective_names=problem.objectives)
    return build_prompt(request, problem=problem.prompt).messages[-1]["content"]


def test_prompt_shows_the_docstring_as_written_and_the_helper_the_function_needs(programs: Path) -> None:
    task = TASKS[32]
    text = seed_prompt_text(programs, task.name)
    docstring = task.prompt[task.prompt.index("def find_zero"):].rstrip()
    assert docstring in text  # signature and docstring, line breaks and examples as written
    helper = task.prompt[task.prompt.index("def poly"):task.prompt.index("\n\n\ndef find_zero")]
    assert helper in text and "Already imported: import math" in text
    longest = max(TASKS, key=lambda t: len(t.prompt))
    assert len(longest.prompt) > 1000
    assert longest.prompt[longest.prompt.index(f"def {longest.entry_point}"):].rstrip() in \
        seed_prompt_text(programs, longest.name)
    assert "def is_palindrome(string: str) -> bool:" in seed_prompt_text(programs, "he_010")


@pytest.mark.parametrize("text", ['a """quoted""" docstring\n  indented\\n', "it's '''triple''' and ends with '",
                                  "tab\tand\rcontrol\x01chars", "plain\nlines\n"])
def test_toml_strings_round_trip_whatever_quotes_they_hold(text: str) -> None:
    assert tomllib.loads(f"description = {toml_string(text)}")["description"] == text


def test_a_description_with_triple_quotes_loads_as_written(programs: Path, tmp_path: Path) -> None:
    folder = tmp_path / "he_quoted"
    folder.mkdir()
    for name in ("initial.py", "evaluator.py", "check.py"):
        (folder / name).write_text((programs / "he_000" / name).read_text())
    description = 'Write f:\n    """Docstring with "quotes" and \\ backslashes."""\n    >>> f()\n    \'\'\'x\'\'\''
    toml = (programs / "he_000" / "problem.toml").read_text().replace('name = "he_000"', 'name = "he_quoted"')
    start = toml.index("description = ")
    end = toml.index("provenance = ")
    (folder / "problem.toml").write_text(toml[:start] + f"description = {toml_string(description)}\n" + toml[end:])
    assert load_problem(str(folder), tmp_path).description == description
