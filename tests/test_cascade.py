"""Cascade evaluation: a child below a stage's threshold is not run further and keeps that stage's partial vector;
a child that passes every stage gets the full evaluation's scores, as without a cascade; the saving is reported.
Real evaluator processes (fresh and warm), the real sandbox, a real store."""

from __future__ import annotations

import asyncio
import json
import shutil
from pathlib import Path

import pytest
from rich.console import Console

from evolve.config import RunConfig
from evolve.engine.controller import Controller
from evolve.problems.cascade import CASCADE_ARTIFACT, CascadeNote
from evolve.problems.evaluation import evaluate_program
from evolve.problems.evaluator_pool import EvaluatorPool
from evolve.problems.problem import Problem, ProblemError, load_problem
from evolve.records import Completion, Evaluation
from evolve.report.run_summary import render_run, summarize
from evolve.search.prompts import Prompt
from evolve.store.program_store import ProgramStore

ROOT = Path(__file__).resolve().parents[1]

FAST_LIS = """\
from bisect import bisect_left


def lis_length(nums):
    tails = []
    for value in nums:
        index = bisect_left(tails, value)
        if index == len(tails):
            tails.append(value)
        else:
            tails[index] = value
    return len(tails)
"""

WRONG_LIS = "def lis_length(nums):\n    return 1\n"


@pytest.fixture
def lis_copies(tmp_path: Path) -> tuple[Problem, Problem]:
    """The shipped lis problem (with its cascade) and a copy without the [[cascade]] table."""
    with_cascade = tmp_path / "with" / "lis"
    without = tmp_path / "without" / "lis"
    shutil.copytree(ROOT / "programs" / "lis", with_cascade)
    shutil.copytree(ROOT / "programs" / "lis", without)
    toml = (without / "problem.toml").read_text()
    (without / "problem.toml").write_text(toml[:toml.index("# cascade evaluation")])
    return load_problem("lis", tmp_path / "with"), load_problem("lis", tmp_path / "without")


def note_of(evaluation: Evaluation) -> CascadeNote:
    note = CascadeNote.from_artifact(evaluation.artifacts[CASCADE_ARTIFACT])
    assert note is not None
    return note


def test_the_shipped_lis_cascade_stops_a_wrong_child_and_keeps_a_passing_childs_full_scores(
        lis_copies: tuple[Problem, Problem]) -> None:
    cascaded, plain = lis_copies
    assert [stage.function for stage in cascaded.cascade] == ["evaluate_stage1"] and not plain.cascade

    async def score() -> tuple[Evaluation, Evaluation, Evaluation, Evaluation]:
        async with EvaluatorPool(size=1) as pool:
            wrong = await pool.evaluate(cascaded, WRONG_LIS)
            fast = await pool.evaluate(cascaded, FAST_LIS)
        return wrong, fast, await evaluate_program(cascaded, FAST_LIS), await evaluate_program(plain, FAST_LIS)

    wrong, fast_warm, fast_fresh, fast_plain = asyncio.run(score())
    stopped = note_of(wrong)
    assert wrong.ok and stopped.stopped and (stopped.stage, stopped.stages) == (1, 2)
    assert stopped.function == "evaluate_stage1" and stopped.threshold == 0.5 and len(stopped.seconds) == 1
    # the partial vector: [7], [5, 5, 5, 5] and [5, 4, 3, 2, 1] answer 1 (3 of the 12 small tests), the big ones
    # never ran
    assert [name for name, value in wrong.scores.items() if value] == ["test_01", "test_02", "test_04"]
    assert cascaded.scalar(wrong.scores) == stopped.scalar < 0.5
    for fast in (fast_warm, fast_fresh):
        note = note_of(fast)
        assert not note.stopped and note.stage == 2 and note.function == "evaluate" and len(note.seconds) == 2
        assert fast.scores == fast_plain.scores and all(value == 1.0 for value in fast.scores.values())
    assert CASCADE_ARTIFACT not in fast_plain.artifacts


def write_problem(folder: Path, cascade: str, evaluator: str) -> None:
    folder.mkdir(parents=True)
    (folder / "problem.toml").write_text(
        f'name = "{folder.name}"\ndescription = "d"\nprovenance = "a test fixture"\n'
        f'objectives = ["small", "big"]\n{cascade}')
    (folder / "initial.py").write_text("# EVOLVE-BLOCK-START\ndef f(x):\n    return x\n# EVOLVE-BLOCK-END\n")
    (folder / "evaluator.py").write_text(evaluator)


@pytest.mark.parametrize(("cascade", "message"), [
    ('[[cascade]]\nfunction = "stage_one"\nthreshold = 0.5\n', "names stage_one, which evaluator.py does not define"),
    ('[[cascade]]\nfunction = "evaluate"\nthreshold = 0.5\n', "evaluate is the final stage"),
    ('[[cascade]]\nfunction = "cheap"\nthreshold = 0.5\n[[cascade]]\nfunction = "cheap"\nthreshold = 0.9\n',
     "repeated: cheap"),
    ('[[cascade]]\nfunction = "cheap"\nthreshold = nan\n', "finite"),
    ('[[cascade]]\nfunction = "cheap"\n', "threshold"),
])
def test_a_wrong_cascade_declaration_is_one_line_naming_problem_toml(tmp_path: Path, cascade: str,
                                                                     message: str) -> None:
    write_problem(tmp_path / "bad", cascade, "def cheap(path):\n    return {}\n\n\ndef evaluate(path):\n    return {}\n")
    with pytest.raises(ProblemError) as error:
        load_problem("bad", tmp_path)
    assert message in str(error.value) and "problem.toml" in str(error.value)
    assert "\n" not in str(error.value)


# a two-stage problem: f(x) must return x + 1; the cheap stage tries x = 1, the full one also x = 2..4 after a pause
TWO_STAGE = """\
import time

from evolve.evaluator_api import Sandbox, fail_unless_ok


def right(program_path, sandbox, x):
    return 1.0 if fail_unless_ok(sandbox.call(program_path, "f", x)).value == x + 1 else 0.0


def cheap(program_path, sandbox: Sandbox):
    return {"small": right(program_path, sandbox, 1), "big": 0.0}


def evaluate(program_path, sandbox: Sandbox):
    time.sleep(0.3)  # the expensive part a stopped child never reaches
    small = right(program_path, sandbox, 1)
    return {"small": small, "big": min(right(program_path, sandbox, x) for x in (2, 3, 4))}
"""

ANSWERS = ["def f(x):\n    return x + 1", "def f(x):\n    return x * 2", "def f(x):\n    return 2 * x + 0",
           "def f(x):\n    raise ValueError(x)"]


class ScriptedPolicy:
    """Answers the next scripted block rewrite on every call."""

    name = "scripted"

    def __init__(self) -> None:
        self.calls = 0

    async def generate(self, prompt: Prompt, seed: int) -> Completion:
        answer = ANSWERS[self.calls % len(ANSWERS)]
        self.calls += 1
        return Completion(f"```python\n{answer}\n```", completion_tokens=5)

    async def close(self) -> None:
        return None


def test_a_run_stores_stopped_children_with_their_stage_and_the_summary_reports_the_saving(tmp_path: Path) -> None:
    write_problem(tmp_path / "problems" / "two_stage", '[[cascade]]\nfunction = "cheap"\nthreshold = 0.5\n',
                  TWO_STAGE)
    problem = load_problem("two_stage", tmp_path / "problems")
    config = RunConfig.model_validate({
        "run": {"problem": "two_stage", "programs_dir": str(tmp_path / "problems"), "iterations": len(ANSWERS),
                "concurrency": 1, "eval_workers": 2},
        "policy": {"prefill": False}})
    store = ProgramStore(str(tmp_path / "run.db"))
    run_id = store.create_run("r", problem.name, "scripted", 0, config.model_dump_json(), len(ANSWERS))
    asyncio.run(Controller(config, problem, store, ScriptedPolicy(), run_id).run())  # type: ignore[arg-type]

    programs = store.programs(run_id)
    notes = {program.code.split("return ")[1].split("\n")[0]: json.loads(program.artifacts[CASCADE_ARTIFACT])
             for program in programs}
    # the seed (f(1) = 1) stops at the cheap stage; x * 2 and 2 * x + 0 (f(1) = 2, right by chance) pass it
    assert notes["x"]["stopped"] and notes["x"]["stage"] == 1
    assert not notes["x + 1"]["stopped"] and notes["x + 1"]["stage"] == 2
    assert not notes["x * 2"]["stopped"] and not notes["2 * x + 0"]["stopped"]
    by_code = {program.code.split("return ")[1].split("\n")[0]: program for program in programs}
    assert by_code["x"].scores == {"small": 0.0, "big": 0.0}
    assert by_code["x + 1"].scores == {"small": 1.0, "big": 1.0}
    assert by_code["x * 2"].scores == {"small": 1.0, "big": 0.0}

    cascade = summarize(store, run_id).cascade
    assert cascade is not None
    assert (cascade.scored, cascade.stopped, cascade.stopped_by_stage) == (4, 1, {"cheap": 1})
    (crashed,) = [a.reason or "" for a in store.attempts(run_id) if a.kind == "eval_failed"]
    assert crashed.startswith("crash: cascade stage 1 (cheap): ") and cascade.stage_failures == 1
    assert cascade.saved_s is not None and cascade.saved_s >= 0.3  # the full stage sleeps 0.3 s
    assert cascade.spent_s > cascade.saved_s
    console = Console(record=True, width=200)
    render_run(store, run_id, console)
    assert "1 of 4 programs stopped before the full evaluation (1 at cheap)" in console.export_text()
