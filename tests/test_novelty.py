"""The novelty filter: normalised-AST and MinHash near-duplicates rejected before evaluation, recorded in the store
as duplicates with their reason, and the index rebuilt from the store on resume."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from evolve.config import ConfigError, RunConfig, load_config
from evolve.engine.controller import Controller
from evolve.problems.problem import Problem, load_problem
from evolve.records import Completion
from evolve.report.run_summary import summarize
from evolve.search.novelty import NoveltyIndex, NoveltySettings, normalised_code
from evolve.search.prompts import Prompt
from evolve.store.program_store import ProgramStore

ROOT = Path(__file__).resolve().parents[1]

TOML = """\
name = "add_one"
description = "f(x) returns x + 1."
provenance = "a test fixture"
objectives = ["right"]
"""

EVALUATOR = """\
from evolve.evaluator_api import Sandbox, fail_unless_ok


def evaluate(program_path, sandbox: Sandbox):
    result = fail_unless_ok(sandbox.call(program_path, "f", 41))
    return {"right": 1.0 if result.value == 42 else 0.0}
"""

INITIAL = """\
# EVOLVE-BLOCK-START
def f(x):
    total = x + 2
    return total
# EVOLVE-BLOCK-END
"""

# what the scripted policy answers, in order: the seed renamed and commented, a real change, that change with a
# docstring and other names, that change again with other spacing, another real change (an answer that
# rebuilds its parent is the edit's "no change", before the filter)
ANSWERS = [
    "def f(y):\n    s = y + 2  # two more\n    return s",
    "def f(x):\n    return x + 1",
    'def f(value):\n    """Adds one."""\n    return value + 1',
    "def f(z):\n    return (z+1)",
    "def f(x):\n    return 1 + x",
]


class ScriptedPolicy:
    """Answers the next scripted block rewrite on every call (the controller's filter is under test)."""

    name = "scripted"

    def __init__(self) -> None:
        self.calls = 0

    async def generate(self, prompt: Prompt, seed: int) -> Completion:
        answer = ANSWERS[self.calls % len(ANSWERS)]
        self.calls += 1
        return Completion(f"```python\n{answer}\n```", completion_tokens=5)

    async def close(self) -> None:
        return None


@pytest.fixture
def add_one(tmp_path: Path) -> Problem:
    folder = tmp_path / "problems" / "add_one"
    folder.mkdir(parents=True)
    (folder / "problem.toml").write_text(TOML)
    (folder / "initial.py").write_text(INITIAL)
    (folder / "evaluator.py").write_text(EVALUATOR)
    return load_problem("add_one", tmp_path / "problems")


def run_config(problem: Problem, novelty: bool, iterations: int = len(ANSWERS)) -> RunConfig:
    return RunConfig.model_validate({
        "run": {"problem": "add_one", "programs_dir": str(problem.path.parent), "iterations": iterations,
                "concurrency": 1, "eval_workers": 1},
        "policy": {"prefill": False},
        "novelty": {"enabled": novelty},
    })


def run_scripted(problem: Problem, db: Path, novelty: bool) -> tuple[ProgramStore, int]:
    """One iteration per process, each resuming the run: iterations in flight together would not see each other's
    children (the index learns a child when its iteration commits), and every step goes through restore()."""
    store = ProgramStore(str(db))
    run_id = store.create_run("r", problem.name, "scripted", 0, run_config(problem, novelty).model_dump_json(),
                              len(ANSWERS))
    policy = ScriptedPolicy()
    for budget in range(1, len(ANSWERS) + 1):
        config = run_config(problem, novelty, iterations=budget)
        asyncio.run(Controller(config, problem, store, policy, run_id).run())  # type: ignore[arg-type]
    return store, run_id


def test_names_comments_docstrings_and_layout_do_not_change_the_normalised_code() -> None:
    first = 'def f(a, b):\n    """Sum."""\n    total = a + b  # add\n    return [t for t in range(total)]\n'
    second = "def f(x,y):\n    s=x+y\n\n    return [k for k in range(s)]\n"
    assert normalised_code(first) == normalised_code(second)
    assert normalised_code(first) != normalised_code(second.replace("x+y", "x-y"))
    assert normalised_code(first) != normalised_code(second.replace("range(s)", "range(s + 1)"))
    # globals, attributes and the function's own name are what callers see: never renamed
    assert normalised_code("def g(x):\n    return math.sqrt(x)\n") != normalised_code("def h(x):\n    return math.sqrt(x)\n")


def test_a_small_edit_of_a_long_program_is_a_near_duplicate_and_an_unrelated_one_is_not() -> None:
    lis = (ROOT / "programs" / "lis" / "initial.py").read_text()
    index = NoveltyIndex(NoveltySettings(threshold=0.8))
    index.add(7, lis)
    index.add(8, (ROOT / "programs" / "coin_change" / "initial.py").read_text())
    tweaked = lis.replace("longest[j] + 1 > longest[i]", "longest[j] >= longest[i]")
    near = index.near_duplicate(tweaked)
    assert near is not None and near.program_id == 7 and not near.same_structure
    assert 0.8 <= near.jaccard < 1.0
    assert near.reason == f"near-duplicate: jaccard {near.jaccard:.2f} with program 7"
    assert NoveltyIndex(NoveltySettings(threshold=0.99)).near_duplicate(tweaked) is None
    assert index.near_duplicate((ROOT / "programs" / "run_length" / "initial.py").read_text()) is None


def test_near_duplicates_are_recorded_without_being_evaluated(add_one: Problem, tmp_path: Path) -> None:
    store, run_id = run_scripted(add_one, tmp_path / "on.db", novelty=True)
    duplicates = [a for a in store.attempts(run_id) if a.kind == "duplicate"]
    seed_id = store.programs(run_id)[0].id
    first_child = store.programs(run_id)[1].id
    assert sorted(a.reason or "" for a in duplicates) == sorted([
        f"same structure: program {seed_id} up to names, comments and docstrings",
        f"same structure: program {first_child} up to names, comments and docstrings",
        f"same structure: program {first_child} up to names, comments and docstrings"])
    assert all(a.child_code for a in duplicates)
    counts = store.attempt_counts(run_id)
    assert counts.get("child", 0) == 3 and counts.get("eval_failed", 0) == 0  # the seed and two new programs
    assert sum(cost.evaluations for cost in store.iteration_costs(run_id)) == 2
    assert summarize(store, run_id).novelty_rejected == 3

    plain, plain_run = run_scripted(add_one, tmp_path / "off.db", novelty=False)
    assert plain.attempt_counts(plain_run).get("child", 0) == 1 + len(ANSWERS)  # every answer evaluated


def test_a_resume_rebuilds_the_index_the_live_run_held(add_one: Problem, tmp_path: Path) -> None:
    store, run_id = run_scripted(add_one, tmp_path / "run.db", novelty=True)
    config = run_config(add_one, novelty=True)
    live = Controller(config, add_one, store, ScriptedPolicy(), run_id)  # type: ignore[arg-type]
    for program in store.programs(run_id):
        live._admit(program)
    resumed = Controller(config, add_one, ProgramStore(str(tmp_path / "run.db"), mode="existing"), ScriptedPolicy(),
                         run_id)  # type: ignore[arg-type]
    assert resumed.restore()
    assert resumed.novelty is not None and live.novelty is not None
    assert len(resumed.novelty) == len(live.novelty) == 3
    for answer in [*ANSWERS, "def f(x):\n    return x * 3"]:
        code = INITIAL.replace(INITIAL.split("\n", 1)[1].rsplit("# EVOLVE", 1)[0], answer + "\n")
        assert resumed.novelty.near_duplicate(code) == live.novelty.near_duplicate(code)
    assert resumed.novelty.near_duplicate(INITIAL.replace("x + 2", "x * 3")) is None


@pytest.mark.parametrize(("key", "value"), [("threshold", 1.5), ("threshold", 0.0), ("shingle_size", 0),
                                            ("num_perm", 8), ("enabld", True)])
def test_a_bad_novelty_setting_is_one_config_line(key: str, value: object) -> None:
    with pytest.raises(ConfigError) as error:
        load_config(None, {f"novelty.{key}": value})
    assert f"novelty.{key}" in str(error.value) and "\n" not in str(error.value)
