"""novelty.in_flight: a child that copies a sibling accepted but not yet committed (generated at the same time,
being evaluated) is rejected too, the rejection naming the sibling's iteration; nothing stays held once its
iteration is committed. A real controller, store and evaluator processes; the policy is scripted in process so
that two iterations generate at once."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from evolve.config import ConfigError, RunConfig, load_config
from evolve.engine.controller import Controller
from evolve.problems.problem import Problem, load_problem
from evolve.records import Completion
from evolve.search.novelty import ChildrenInFlight, NoveltyIndex, NoveltySettings
from evolve.search.prompts import Prompt
from evolve.store.program_store import ProgramStore

EVALUATOR = """\
from evolve.evaluator_api import Sandbox, fail_unless_ok


def evaluate(program_path, sandbox: Sandbox):
    result = fail_unless_ok(sandbox.call(program_path, "f", 41))
    return {"right": 1.0 if result.value == 42 else 0.0}
"""
INITIAL = "# EVOLVE-BLOCK-START\ndef f(x):\n    total = x + 2\n    return total\n# EVOLVE-BLOCK-END\n"
# the same program twice, written with other names: never equal code, always the same structure
TWINS = ["def f(x):\n    return x + 1", "def f(y):\n    return y + 1"]


class TwinPolicy:
    """Answers no call before `together` calls are waiting, then answers them TWINS in arrival order: the
    iterations asking together get near-identical children at the same time."""

    name = "twins"

    def __init__(self, together: int) -> None:
        self.together = together
        self.calls = 0
        self.waiting = 0
        self.all_here = asyncio.Event()

    async def generate(self, prompt: Prompt, seed: int) -> Completion:
        answer = TWINS[self.calls % len(TWINS)]
        self.calls += 1
        self.waiting += 1
        if self.waiting >= self.together:
            self.all_here.set()
        await self.all_here.wait()
        return Completion(f"```python\n{answer}\n```", completion_tokens=5)

    async def close(self) -> None:
        return None


@pytest.fixture
def add_one(tmp_path: Path) -> Problem:
    folder = tmp_path / "problems" / "add_one"
    folder.mkdir(parents=True)
    (folder / "problem.toml").write_text('name = "add_one"\ndescription = "f(x) returns x + 1."\n'
                                         'provenance = "a test fixture"\nobjectives = ["right"]\n')
    (folder / "initial.py").write_text(INITIAL)
    (folder / "evaluator.py").write_text(EVALUATOR)
    return load_problem("add_one", tmp_path / "problems")


def run_twins(problem: Problem, db: Path, in_flight: bool) -> tuple[ProgramStore, int, Controller]:
    """Two iterations generating at once (concurrency 2), each answering one of TWINS."""
    config = RunConfig.model_validate({
        "run": {"problem": "add_one", "programs_dir": str(problem.path.parent), "iterations": 2,
                "concurrency": 2, "eval_workers": 1},
        "policy": {"prefill": False},
        "novelty": {"enabled": True, "in_flight": in_flight},
    })
    store = ProgramStore(str(db))
    run_id = store.create_run("r", problem.name, "twins", 0, config.model_dump_json(), 2)
    controller = Controller(config, problem, store, TwinPolicy(together=2), run_id)  # type: ignore[arg-type]
    asyncio.run(controller.run())
    return store, run_id, controller


def test_a_child_copying_a_sibling_in_flight_is_rejected_only_with_in_flight(add_one: Problem,
                                                                              tmp_path: Path) -> None:
    store, run_id, controller = run_twins(add_one, tmp_path / "on.db", in_flight=True)
    counts = store.attempt_counts(run_id)
    assert counts.get("child", 0) == 2 and counts.get("duplicate", 0) == 1  # the seed, one twin; the other rejected
    (duplicate,) = [a for a in store.attempts(run_id) if a.kind == "duplicate"]
    (child,) = [p for p in store.programs(run_id) if p.iteration >= 1]
    assert duplicate.reason == (f"same structure: a child of iteration {child.iteration} in flight up to names, "
                                "comments and docstrings")
    assert duplicate.child_code is not None and duplicate.child_code != child.code
    assert sum(cost.evaluations for cost in store.iteration_costs(run_id)) == 1
    assert controller.in_flight is not None and len(controller.in_flight) == 0  # released at each commit

    plain, plain_run, plain_controller = run_twins(add_one, tmp_path / "off.db", in_flight=False)
    assert plain.attempt_counts(plain_run).get("child", 0) == 3  # both twins evaluated: neither was committed
    assert plain.attempt_counts(plain_run).get("duplicate", 0) == 0 and plain_controller.in_flight is None


def test_children_in_flight_are_compared_until_their_iteration_is_released() -> None:
    index = NoveltyIndex(NoveltySettings(threshold=0.8))
    held = ChildrenInFlight(threshold=0.8)
    body = "def f(values):\n" + "".join(f"    values = values * {k} + {k}\n" for k in range(12)) + "    return values\n"
    held.hold(5, *index.fingerprint(body))
    held.hold(6, *index.fingerprint("def g(x):\n    return [x] * 3\n"))
    near = held.near_duplicate_of(*index.fingerprint(body.replace("* 11 + 11", "* 11 - 11")))
    assert near is not None and near.in_flight_iteration == 5 and near.program_id is None
    assert 0.8 <= near.jaccard < 1.0 and not near.same_structure
    assert near.reason == f"near-duplicate: jaccard {near.jaccard:.2f} with a child of iteration 5 in flight"
    assert held.near_duplicate_of(*index.fingerprint("def h(q):\n    return q - 1\n")) is None
    held.release(5)
    assert len(held) == 1 and held.near_duplicate_of(*index.fingerprint(body)) is None
    assert index.near_duplicate(body) is None  # holding never adds to the committed index


def test_a_bad_in_flight_setting_is_one_config_line() -> None:
    with pytest.raises(ConfigError) as error:
        load_config(None, {"novelty.in_flight": "sometimes"})
    assert "novelty.in_flight" in str(error.value) and "\n" not in str(error.value)
