"""Warm evaluator processes (EvaluatorPool): fresh-process results, hostile evaluators recorded, no job lost."""

from __future__ import annotations

import asyncio
import os
import signal
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import TypeVar

import pytest
from host_processes import alive

from evolve.config import RunConfig
from evolve.engine.controller import Controller
from evolve.policies.base import PolicyUnavailable
from evolve.problems.evaluation import evaluate_program
from evolve.problems.evaluator_pool import EvaluatorPool
from evolve.problems.humaneval import import_humaneval
from evolve.problems.problem import Problem, load_problem
from evolve.records import Completion, Evaluation
from evolve.search.prompts import Prompt
from evolve.store.program_store import ProgramStore

ROOT = Path(__file__).resolve().parents[1]
PROGRAMS = ROOT / "programs"
T = TypeVar("T")

TOML = """\
name = "moody"
description = "The evaluator does what the program's first line asks."
provenance = "a test fixture"
objectives = ["length", "pid"]

[solved]
all_at_least = 1e12

[limits]
wall_time_s = 2
cpu_time_s = 2
"""

# OpenEvolve's one-argument evaluate: the evaluator itself misbehaves on request (the candidate never runs)
EVALUATOR = """\
import os
import sys
import time

CALLS = []


def evaluate(program_path):
    code = open(program_path).read()
    CALLS.append(code)
    first = code.splitlines()[0] if code else ""
    if first == "# crash":
        os._exit(3)
    if first == "# hang":
        time.sleep(60)
    if first == "# garbage":
        print('{"ok": true, "scores": {"length": 99.0, "pid": 0.0}}')
        sys.stdout.flush()
        os.write(1, b"not json at all\\n")
    if first == "# exit":
        sys.exit(0)
    if first == "# raise":
        raise ValueError("asked to raise")
    if first == "# calls":
        return {"length": float(len(CALLS)), "pid": float(os.getpid())}
    if first == "# slow":
        with open(code.splitlines()[1][2:], "w") as mark:
            mark.write(str(os.getpid()))
        time.sleep(1.5)
    return {"length": float(len(code)), "pid": float(os.getpid())}
"""

INITIAL = "# EVOLVE-BLOCK-START\nx = 1\n# EVOLVE-BLOCK-END\n"


def run(make: Callable[[], Awaitable[T]]) -> T:
    return asyncio.run(make())  # type: ignore[arg-type]


@pytest.fixture
def moody(tmp_path: Path) -> Problem:
    folder = tmp_path / "moody"
    folder.mkdir()
    (folder / "problem.toml").write_text(TOML)
    (folder / "initial.py").write_text(INITIAL)
    (folder / "evaluator.py").write_text(EVALUATOR)
    return load_problem("moody", tmp_path)


def same_result(left: Evaluation, right: Evaluation) -> bool:
    return (left.ok, left.scores, left.failure, left.detail, left.artifacts) == \
        (right.ok, right.scores, right.failure, right.detail, right.artifacts)


# every shipped kind (numpy, a driver, a session, humaneval); coin_change, lis, meeting_rooms and shortest_paths
# agree too (checked by hand) but take seconds each
QUICK_PROBLEMS = ["bin_packing", "cap_set", "circle_packing", "fizzbuzz", "run_length", "symbolic_regression"]


def assert_warm_equals_fresh(problems: list[Problem]) -> None:

    async def compare() -> list[tuple[str, Evaluation, Evaluation, Evaluation]]:
        fresh = await asyncio.gather(*(evaluate_program(problem, problem.initial_code) for problem in problems))
        async with EvaluatorPool(1, max_idle=len(problems)) as pool:
            first = await asyncio.gather(*(pool.evaluate(problem, problem.initial_code) for problem in problems))
            again = await asyncio.gather(*(pool.evaluate(problem, problem.initial_code) for problem in problems))
            assert pool.started == len(problems)  # the second round ran on the same, warm processes
        return [(p.name, *results) for p, *results in zip(problems, fresh, first, again, strict=True)]

    for name, fresh, first, again in run(compare):
        assert fresh.ok, (name, fresh)
        assert same_result(first, fresh), (name, first, fresh)
        assert same_result(again, fresh), (name, again, fresh)


def test_warm_results_equal_the_fresh_process_on_the_quick_shipped_seed_programs(tmp_path: Path) -> None:
    (humaneval,) = import_humaneval(tmp_path, [0])  # generated folders are not in the repository
    assert_warm_equals_fresh([load_problem(name, PROGRAMS) for name in QUICK_PROBLEMS]
                             + [load_problem(humaneval.name, tmp_path)])


def test_module_state_is_kept_between_jobs_and_reset_by_recycling(moody: Problem) -> None:
    async def calls() -> list[tuple[float, float]]:
        async with EvaluatorPool(1, recycle_after=3) as pool:
            results = [await pool.evaluate(moody, "# calls\n") for _ in range(5)]
            assert pool.started == 2
        return [(result.scores["length"], result.scores["pid"]) for result in results]

    counts = run(calls)
    assert [count for count, _ in counts] == [1.0, 2.0, 3.0, 1.0, 2.0]  # imported once per process, not per job
    assert len({pid for _, pid in counts[:3]}) == 1 and counts[3][1] != counts[0][1]


@pytest.mark.parametrize(("first_line", "failure", "detail", "processes"), [
    ("# crash", "evaluator_error", "exit code 3", 3),  # a warm process died: retried once on a fresh one
    ("# exit", "evaluator_error", "raised SystemExit", 2),
    ("# raise", "evaluator_error", "asked to raise", 2),
    ("# hang", "timeout", "took over 2s", 2),
])
def test_a_failing_evaluator_is_recorded_and_its_process_replaced_losing_no_job(
        moody: Problem, first_line: str, failure: str, detail: str, processes: int) -> None:
    async def scenario() -> tuple[Evaluation, Evaluation, Evaluation, int, list[int]]:
        async with EvaluatorPool(1) as pool:
            before = await pool.evaluate(moody, "x = 1\n")
            bad = await pool.evaluate(moody, f"{first_line}\n", timeout_s=2.0)
            after = await pool.evaluate(moody, "x = 22\n")
            started, pids = pool.started, pool.pids()
        return before, bad, after, started, pids

    before, bad, after, started, pids = run(scenario)
    assert bad.failure == failure and detail in bad.detail, bad
    assert before.ok and after.ok and after.scores["length"] == 7.0
    assert after.scores["pid"] != before.scores["pid"]  # the failed process was not used again
    assert started == processes and not [pid for pid in pids if alive(pid)]


def test_idle_processes_of_all_problems_together_are_bounded_longest_idle_first(moody: Problem) -> None:
    other_folder = moody.path.parent / "moody_too"
    other_folder.mkdir()
    for name in ("problem.toml", "initial.py", "evaluator.py"):
        (other_folder / name).write_text((moody.path / name).read_text().replace('"moody"', '"moody_too"'))
    other = load_problem("moody_too", moody.path.parent)

    async def scenario() -> tuple[Evaluation, Evaluation, Evaluation, int]:
        async with EvaluatorPool(1, max_idle=1) as pool:
            first = await pool.evaluate(moody, "x = 1\n")
            await pool.evaluate(other, "x = 1\n")  # moody's idle process is retired to make room
            await asyncio.sleep(0.5)
            assert len(pool.pids()) == 1
            again = await pool.evaluate(moody, "x = 1\n")
            other_again = await pool.evaluate(other, "x = 1\n")
            return first, again, other_again, pool.started

    first, again, other_again, started = run(scenario)
    assert again.scores["pid"] != first.scores["pid"] and started == 4


def test_what_the_evaluator_prints_cannot_be_taken_for_the_result(moody: Problem) -> None:
    async def scenario() -> tuple[Evaluation, Evaluation]:
        async with EvaluatorPool(1) as pool:
            return await pool.evaluate(moody, "# garbage\n"), await pool.evaluate(moody, "# garbage\nmore\n")

    first, second = run(scenario)
    assert first.ok and first.scores["length"] == len("# garbage\n"), first
    assert second.ok and second.scores["pid"] == first.scores["pid"]  # and the process stays healthy


def test_a_warm_process_killed_mid_job_has_its_job_retried_once_on_a_fresh_one(moody: Problem, tmp_path: Path) -> None:
    mark = tmp_path / "pid"

    async def scenario() -> tuple[Evaluation, Evaluation, int, int]:
        async with EvaluatorPool(1) as pool:
            warm_up = await pool.evaluate(moody, "x = 1\n")
            job = asyncio.ensure_future(pool.evaluate(moody, f"# slow\n# {mark}\n"))
            while not mark.exists() or not mark.read_text():
                await asyncio.sleep(0.02)
            os.kill(int(mark.read_text()), signal.SIGKILL)
            mark.unlink()
            result = await job
            return warm_up, result, pool.retried, pool.started

    warm_up, result, retried, started = run(scenario)
    assert result.ok, result  # the retry on a fresh process scored it
    assert result.scores["pid"] != warm_up.scores["pid"]
    assert (retried, started) == (1, 2)


def test_a_fresh_process_killed_mid_job_is_an_evaluator_error(moody: Problem, tmp_path: Path) -> None:
    mark = tmp_path / "pid"

    async def scenario() -> tuple[Evaluation, int]:
        async with EvaluatorPool(1) as pool:
            job = asyncio.ensure_future(pool.evaluate(moody, f"# slow\n# {mark}\n"))
            while not mark.exists() or not mark.read_text():
                await asyncio.sleep(0.02)
            os.kill(int(mark.read_text()), signal.SIGKILL)
            return await job, pool.retried

    result, retried = run(scenario)
    assert result.failure == "evaluator_error" and "ended without a result" in result.detail, result
    assert retried == 0


def test_close_leaves_no_process_and_no_folder_behind(moody: Problem) -> None:
    async def scenario() -> tuple[list[int], list[Evaluation]]:
        pool = EvaluatorPool(3)
        results = await asyncio.gather(*(pool.evaluate(moody, f"x = {i}\n") for i in range(3)))
        hanging = asyncio.ensure_future(pool.evaluate(moody, "# hang\n"))
        await asyncio.sleep(0.5)
        pids = pool.pids()
        folder = pool._folder
        hanging.cancel()
        await asyncio.gather(hanging, return_exceptions=True)
        await pool.close()
        assert folder is not None and not folder.exists()
        return pids, results

    pids, results = run(scenario)
    assert all(result.ok for result in results) and len(pids) >= 3
    deadline = time.monotonic() + 2
    while any(alive(pid) for pid in pids) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not [pid for pid in pids if alive(pid)]


class PoolWatcher:
    """A policy that notes the pool's processes at its first call and then reports itself unavailable."""

    name = "watcher"

    def __init__(self) -> None:
        self.controller: Controller | None = None
        self.seen: list[int] | None = None

    async def generate(self, prompt: Prompt, seed: int) -> Completion:
        assert self.controller is not None
        pool = self.controller.scorer.pool
        self.seen = pool.pids() if pool is not None else []
        raise PolicyUnavailable("the watcher has seen enough")


@pytest.mark.parametrize("warm", [True, False])
def test_a_run_scores_on_a_pool_of_its_own_when_warm_and_closes_it(moody: Problem, tmp_path: Path,
                                                                     warm: bool) -> None:
    config = RunConfig.model_validate({"run": {"problem": "moody", "programs_dir": str(moody.path.parent),
                                               "iterations": 2, "concurrency": 1, "warm_evaluators": warm}})
    store = ProgramStore(str(tmp_path / "run.db"))
    run_id = store.create_run("r", "moody", "watcher", 0, config.model_dump_json(), 2)
    watcher = PoolWatcher()
    controller = Controller(config, moody, store, watcher, run_id)  # type: ignore[arg-type]
    watcher.controller = controller
    with pytest.raises(PolicyUnavailable):
        asyncio.run(controller.run())
    (seed,) = store.programs(run_id)
    assert watcher.seen is not None and controller.scorer.pool is None
    assert (int(seed.scores["pid"]) in watcher.seen) is warm  # the seed was scored by a process the pool kept
    assert not [pid for pid in watcher.seen if alive(pid)]


def test_a_job_in_flight_when_the_pool_closes_ends_as_an_evaluator_error_and_starts_nothing(moody: Problem) -> None:
    async def scenario() -> tuple[Evaluation, list[int], int]:
        pool = EvaluatorPool(1)
        await pool.evaluate(moody, "x = 1\n")  # the hanging job lands on a warm process, which would be retried
        hanging = asyncio.ensure_future(pool.evaluate(moody, "# hang\n"))
        await asyncio.sleep(0.5)
        pids = pool.pids()
        await pool.close()
        return await hanging, pids, pool.started

    result, pids, started = run(scenario)
    assert result.failure == "evaluator_error" and started == 1, result
    assert not [pid for pid in pids if alive(pid)]
