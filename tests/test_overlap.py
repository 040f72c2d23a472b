"""Generation and evaluation overlap: the policy keeps `run.concurrency` requests in flight while children are scored."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from evolve.config import RunConfig
from evolve.engine.controller import Controller
from evolve.problems.problem import Problem, load_problem
from evolve.records import Completion, Evaluation
from evolve.search.prompts import Prompt
from evolve.store.program_store import ProgramStore
from tests.scripted_policy_server import write_problem

# the trusted evaluator sleeps: an evaluation lasts well past a generation
EVALUATOR = """\
import time


def evaluate(program_path):
    time.sleep(0.4)
    code = open(program_path).read()
    return {"value": float(len(code))}
"""


@pytest.fixture
def slow_scorer(tmp_path: Path) -> Problem:
    write_problem(tmp_path, "slow_scorer", "Return a number; the evaluator takes its time to score it.", EVALUATOR)
    return load_problem("slow_scorer", tmp_path)


class Watch:
    """Counts generations and evaluations in flight; notes the most generations seen while an evaluation ran."""

    def __init__(self) -> None:
        self.generating = 0
        self.evaluating = 0
        self.most_generating_while_evaluating = 0

    def note(self) -> None:
        if self.evaluating:
            self.most_generating_while_evaluating = max(self.most_generating_while_evaluating, self.generating)


class ScriptedPolicy:
    """Answers after a fixed latency with a new constant every call (the controller's scheduling is under test)."""

    name = "scripted"

    def __init__(self, watch: Watch) -> None:
        self.watch = watch
        self.calls = 0

    async def generate(self, prompt: Prompt, seed: int) -> Completion:
        self.calls += 1
        number = self.calls
        self.watch.generating += 1
        self.watch.note()
        try:
            await asyncio.sleep(0.15)
        finally:
            self.watch.generating -= 1
        return Completion(f"```python\nx = {number}\n```", completion_tokens=5)

    async def close(self) -> None:
        return None


def test_the_policy_keeps_every_request_slot_busy_while_children_are_evaluated(slow_scorer: Problem,
                                                                                tmp_path: Path) -> None:
    config = RunConfig.model_validate({
        "run": {"problem": "slow_scorer", "programs_dir": str(slow_scorer.path.parent), "iterations": 8,
                "concurrency": 2, "eval_workers": 2},
        "policy": {"prefill": False},
    })
    store = ProgramStore(str(tmp_path / "run.db"))
    run_id = store.create_run("r", "slow_scorer", "scripted", 0, config.model_dump_json(), 8)
    watch = Watch()
    policy = ScriptedPolicy(watch)
    controller = Controller(config, slow_scorer, store, policy, run_id)  # type: ignore[arg-type]
    evaluate = controller.scorer.evaluate

    async def watched_evaluate(problem: Problem, code: str, *args: object, **kwargs: object) -> Evaluation:
        watch.evaluating += 1
        watch.note()
        try:
            return await evaluate(problem, code, *args, **kwargs)  # type: ignore[arg-type]
        finally:
            watch.evaluating -= 1

    controller.scorer.evaluate = watched_evaluate  # type: ignore[method-assign]
    asyncio.run(controller.run())
    assert store.completed_iterations(run_id) == set(range(9))  # the seed and 8 iterations, each once
    assert policy.calls == 8
    # with one iteration per request slot, an evaluating iteration would hold a slot: at most 1 generation beside it
    assert watch.most_generating_while_evaluating == 2
