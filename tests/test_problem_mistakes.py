"""A problem author's mistakes (problem.toml, initial.py, evaluator.py) read as one clear error naming the file, and
an evaluation that is stopped (deadline, cancel) leaves no process or file behind."""

from __future__ import annotations

import asyncio
import json
import os
import tempfile
import time
from pathlib import Path

import pytest

from evolve.problems.evaluation import evaluate_program
from evolve.problems.problem import KNOWN_LISTED, Problem, ProblemError, list_problems, load_problem
from evolve.records import Evaluation

PROGRAMS = Path(__file__).resolve().parents[1] / "programs"


def evaluate(problem: Problem, code: str, timeout_s: float | None = None) -> Evaluation:
    return asyncio.run(evaluate_program(problem, code, timeout_s))


# ---------------------------------------------------------------- problem.toml mistakes

TOY_TOML = """\
name = "toy"
description = "Make f(2) large."
provenance = "a test fixture"
objectives = ["a", "b"]

[solved]
all_at_least = 1.0

[limits]
wall_time_s = 5
cpu_time_s = 5
"""

TOY_INITIAL = """\
# EVOLVE-BLOCK-START
def f(x):
    return x
# EVOLVE-BLOCK-END
"""

TOY_EVALUATOR = """\
from evolve.evaluator_api import fail_unless_ok


def evaluate(program_path, sandbox):
    value = fail_unless_ok(sandbox.call(program_path, "f", 2)).value
    return {"a": value / 4, "b": 1.0}
"""


def make_problem(tmp_path: Path, toml: str = TOY_TOML, initial: str | None = TOY_INITIAL,
                 evaluator: str = TOY_EVALUATOR) -> Path:
    folder = tmp_path / "toy"
    folder.mkdir()
    (folder / "problem.toml").write_text(toml)
    if initial is not None:
        (folder / "initial.py").write_text(initial)
    (folder / "evaluator.py").write_text(evaluator)
    return folder


def load_error(folder: Path) -> str:
    with pytest.raises(ProblemError) as error:
        load_problem("toy", folder.parent)
    message = str(error.value)
    assert "\n" not in message
    return message


def test_toy_problem_loads_and_evaluates(tmp_path: Path) -> None:
    problem = load_problem("toy", make_problem(tmp_path).parent)
    assert problem.objectives == ("a", "b") and problem.limits.wall_time_s == 5
    result = evaluate(problem, problem.initial_code)
    assert result.ok and result.scores == {"a": 0.5, "b": 1.0}
    assert problem.scalar(result.scores) == 0.75 and not problem.is_solved(result.scores)


@pytest.mark.parametrize(
    ("edit", "fragments"),
    [
        (lambda t: t.replace("provenance", "provenence"), ["unknown key 'provenence'", "allowed here:"]),
        (lambda t: t + "\n[score]\nreductoin = 'mean'\n", ["unknown key 'score.reductoin'", "reduction, weights"]),
        (lambda t: t.replace("[limits]", "[limits]\nmemory = 5"), ["unknown key 'limits.memory'", "memory_mb"]),
        (lambda t: t.replace('objectives = ["a", "b"]', ""), ["missing key 'objectives'"]),
        (lambda t: t.replace('["a", "b"]', '["a", "a"]'), ["'objectives'", "repeated: a"]),
        (lambda t: t.replace("wall_time_s = 5", "wall_time_s = -1"), ["'limits.wall_time_s'", "-1"]),
        (lambda t: t.replace('"toy"', '"toy2"'), ["name = 'toy2'", "folder name 'toy'"]),
        (lambda t: t.replace("[solved]", "[score]\nreduction = 'weighted'\nweights = {a = 1.0}\n[solved]"),
         ["score.weights", "missing: b"]),
        (lambda t: t + "\n[map_elites]\nfeatures = ['speed']\n", ["map_elites.features", "speed"]),
        (lambda t: t.replace("[limits]", "[limits"), ["not valid TOML"]),
    ],
)
def test_problem_toml_mistake_is_one_line_naming_file_and_key(tmp_path: Path, edit, fragments: list[str]) -> None:
    folder = make_problem(tmp_path, toml=edit(TOY_TOML))
    message = load_error(folder)
    assert message.startswith(str(folder / "problem.toml") + ":"), message
    for fragment in fragments:
        assert fragment in message, message


def test_missing_initial_program_is_named(tmp_path: Path) -> None:
    folder = make_problem(tmp_path, initial=None)
    message = load_error(folder)
    assert message.startswith(str(folder / "initial.py")) and "file not found" in message


def test_initial_program_without_evolve_markers_says_how_to_mark_it(tmp_path: Path) -> None:
    folder = make_problem(tmp_path, initial="def f(x):\n    return x\n")
    message = load_error(folder)
    assert message.startswith(str(folder / "initial.py"))
    assert "# EVOLVE-BLOCK-START" in message and "# EVOLVE-BLOCK-END" in message


def test_evaluator_without_evaluate_function_is_named_at_load(tmp_path: Path) -> None:
    folder = make_problem(tmp_path, evaluator="def score(path):\n    return {}\n")
    message = load_error(folder)
    assert message.startswith(str(folder / "evaluator.py")) and "evaluate" in message


def unknown_name_error(name: str, programs: Path) -> str:
    with pytest.raises(ProblemError) as error:
        load_problem(name, programs)
    return str(error.value)


def test_unknown_problem_name_suggests_the_close_one_and_names_or_counts_the_problems_there() -> None:
    message = unknown_name_error("symbolic_regresion", PROGRAMS)  # however many problems are imported under programs/
    names = list_problems(PROGRAMS)
    assert "no such problem folder" in message and "did you mean symbolic_regression?" in message
    listed = ", ".join(names) if len(names) <= KNOWN_LISTED else f"{len(names)} of them, `evolve problems` lists them"
    assert f"(problems in {PROGRAMS}: {listed})" in message


def test_unknown_problem_name_lists_a_few_problems_and_counts_many(tmp_path: Path) -> None:
    for count in (3, KNOWN_LISTED + 180):  # hundreds imported (evolve import generated) keep the message short
        programs = tmp_path / str(count)
        for index in range(count):
            (programs / "generated" / f"gl_d1_{index:04d}").mkdir(parents=True)
            (programs / "generated" / f"gl_d1_{index:04d}" / "problem.toml").write_text("")
        message = unknown_name_error("gl_d1_000", programs)
        assert "did you mean gl_d1_0" in message and len(message) < 400
        if count == 3:
            assert message.endswith("(problems in " + str(programs) + ": gl_d1_0000, gl_d1_0001, gl_d1_0002)")
        else:
            assert message.endswith(f": {count} of them, `evolve problems` lists them)")


def test_weighted_reduction_is_the_weighted_mean_and_solved_needs_every_condition(tmp_path: Path) -> None:
    toml = TOY_TOML.replace("[solved]\nall_at_least = 1.0", "[score]\nreduction = 'weighted'\n"
                            "weights = {a = 3.0, b = 1.0}\n[solved]\nall_at_least = 0.5\nscalar_at_least = 0.8")
    problem = load_problem("toy", make_problem(tmp_path, toml=toml).parent)
    assert problem.scalar({"a": 1.0, "b": 0.0}) == 0.75
    assert not problem.is_solved({"a": 1.0, "b": 0.4})  # scalar 0.85 but b under 0.5
    assert not problem.is_solved({"a": 0.7, "b": 1.0})  # every entry >= 0.5 but scalar 0.775
    assert problem.is_solved({"a": 0.8, "b": 0.9})


# ---------------------------------------------------------------- evaluator mistakes


@pytest.mark.parametrize(
    ("body", "fragments"),
    [
        ("return 1 / 0", ["evaluator.py (line 6) raised ZeroDivisionError: division by zero"]),
        ("return [value, 1.0]", ["returned list", "dict[str, float]"]),
        ("return {'a': float('nan'), 'b': 1.0}", ["objective 'a' is nan"]),
        ("return {'a': float('inf'), 'b': 1.0}", ["objective 'a' is inf"]),
        ("return {'a': 'high', 'b': 1.0}", ["objective 'a' is str"]),
        ("return {'a': 1.0, 'c': 1.0}", ["missing ['b']", "unexpected ['c']"]),
        ("raise CandidateFailure('slow')", ["CandidateFailure kind must be one of"]),
        ("raise SystemExit(3)", ["raised SystemExit: 3"]),
    ],
)
def test_evaluator_mistake_is_a_clear_evaluator_error(tmp_path: Path, body: str, fragments: list[str]) -> None:
    evaluator = ("from evolve.evaluator_api import CandidateFailure, fail_unless_ok\n\n\n"
                 "def evaluate(program_path, sandbox):\n"
                 "    value = fail_unless_ok(sandbox.call(program_path, 'f', 2)).value\n"
                 f"    {body}\n")
    problem = load_problem("toy", make_problem(tmp_path, evaluator=evaluator).parent)
    result = evaluate(problem, problem.initial_code)
    assert (result.ok, result.failure) == (False, "evaluator_error"), result
    for fragment in fragments:
        assert fragment in result.detail, result.detail


def test_evaluator_that_fails_to_import_is_an_evaluator_error(tmp_path: Path) -> None:
    evaluator = "import no_such_module_anywhere\n\n\ndef evaluate(program_path):\n    return {}\n"
    problem = load_problem("toy", make_problem(tmp_path, evaluator=evaluator).parent)
    result = evaluate(problem, problem.initial_code)
    assert (result.ok, result.failure) == (False, "evaluator_error")
    assert "ModuleNotFoundError" in result.detail and "no_such_module_anywhere" in result.detail


def test_candidate_failure_from_the_evaluator_keeps_its_kind(tmp_path: Path) -> None:
    evaluator = ("from evolve.evaluator_api import CandidateFailure\n\n\n"
                 "def evaluate(program_path, sandbox):\n"
                 "    raise CandidateFailure('bad_output', 'f(2) must be even')\n")
    problem = load_problem("toy", make_problem(tmp_path, evaluator=evaluator).parent)
    result = evaluate(problem, problem.initial_code)
    assert result == Evaluation(ok=False, failure="bad_output", detail="f(2) must be even", wall_s=result.wall_s)


def test_one_argument_evaluator_and_its_prints_do_not_disturb_the_result(tmp_path: Path) -> None:
    evaluator = ("import os\n\n\ndef evaluate(program_path):\n"
                 "    print('{\"ok\": true, \"scores\": {\"a\": 99.0, \"b\": 99.0}}')\n"
                 "    os.system('echo \"{}\"')\n"
                 "    return {'a': 0.25, 'b': 0.5}\n")
    problem = load_problem("toy", make_problem(tmp_path, evaluator=evaluator).parent)
    result = evaluate(problem, problem.initial_code)
    assert result.ok and result.scores == {"a": 0.25, "b": 0.5}


WATCHING_EVALUATOR = """
import json, os, threading, time

def watch():
    while True:
        kids = []
        for pid in filter(str.isdigit, os.listdir("/proc")):
            try:
                with open(f"/proc/{pid}/stat") as handle:
                    stat = handle.read()
            except OSError:
                continue
            if stat.rsplit(")", 1)[1].split()[1] == str(os.getpid()):
                kids.append(int(pid))
        if kids:
            with open(LOG, "w") as handle:
                handle.write(json.dumps(kids))
            return
        time.sleep(0.05)

def evaluate(program_path, sandbox):
    threading.Thread(target=watch, daemon=True).start()
    sandbox.call(program_path, "f", 2)
    return {"a": 1.0, "b": 1.0}
"""
SLEEPER = "import time\n\n# EVOLVE-BLOCK-START\ndef f(x):\n    time.sleep(300)\n# EVOLVE-BLOCK-END\n"


def running(pid: int) -> bool:
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False


def sandbox_dirs() -> set[str]:
    return {name for name in os.listdir(tempfile.gettempdir()) if name.startswith(("evolve-sandbox-", "evolve-eval-"))}


@pytest.mark.parametrize("how", ["deadline", "cancelled"])
def test_stopped_evaluation_kills_its_sandbox_child_and_cleans_up(tmp_path: Path, how: str,
                                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    scratch = tmp_path / "tmp"  # its own temporary folder: other evolve processes on the machine write to /tmp
    scratch.mkdir()
    monkeypatch.setenv("TMPDIR", str(scratch))  # the evaluator process and its sandboxes
    monkeypatch.setattr(tempfile, "tempdir", str(scratch))  # this process
    log = tmp_path / "children.json"
    toml = TOY_TOML.replace("wall_time_s = 5", "wall_time_s = 60").replace("cpu_time_s = 5", "cpu_time_s = 60")
    evaluator = f"LOG = {str(log)!r}\n" + WATCHING_EVALUATOR
    problem = load_problem("toy", make_problem(tmp_path, toml=toml, evaluator=evaluator).parent)
    before = sandbox_dirs()

    async def cancel_after_two_seconds() -> None:
        task = asyncio.create_task(evaluate_program(problem, SLEEPER))
        await asyncio.sleep(2.0)
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task

    started = time.monotonic()
    if how == "deadline":
        result = evaluate(problem, SLEEPER, timeout_s=2.0)
        assert (result.ok, result.failure) == (False, "timeout") and "over 2s" in result.detail
    else:
        asyncio.run(cancel_after_two_seconds())
    assert time.monotonic() - started < 45.0  # stopped, not left to the 60-s wall limit or the 300-s sleep
    children = json.loads(log.read_text())
    deadline = time.monotonic() + 30.0
    while any(running(pid) for pid in children) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert children and not any(running(pid) for pid in children)
    assert sandbox_dirs() <= before


def test_evaluations_leave_no_temporary_program_files() -> None:
    from evolve.sandbox.housekeeping import owner_tag

    problem = load_problem("run_length", PROGRAMS)
    mine = f"evolve-eval-{owner_tag()}-"  # this process's folders: other test processes evaluate at the same time

    def folders() -> set[str]:
        return {name for name in os.listdir(tempfile.gettempdir()) if name.startswith(mine)}

    before = folders()
    evaluate(problem, problem.initial_code)
    assert folders() <= before
