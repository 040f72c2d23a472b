"""A batch's cells start longest first: resumed ones, then the problems whose finished cells ran longest."""

from __future__ import annotations

from pathlib import Path

import pytest

from evolve.engine.cell_order import longest_first
from evolve.engine.cells import CellProgress
from evolve.engine.events import CellStarted
from evolve.engine.experiment import ExperimentRunner
from evolve.engine.experiment_spec import load_experiment
from tests.scripted_policy_server import EVALUATOR, ScriptedPolicyServer, write_problem

SOLVED_AT_ONCE = """\
def evaluate(program_path):
    return {"value": 1e12}
"""

QUICK_AND_SLOW = """\
problems = ["quick", "slow"]
seeds = [0]
iterations = 3
parallel_cells = 1
[run]
programs_dir = "{programs}"
concurrency = 1
stop_when_solved = true
""" + "".join(f'[[policies]]\nname = "{arm}"\nbackend = "openai"\nurl = "{{url}}"\nprefill = false\n' for arm in "ab")


def _cell(problem: str, run_id: int | None = None) -> CellProgress:
    return CellProgress((problem, "a", 0), run_id=run_id)


def test_resumed_cells_start_first_then_the_longest_expected_and_an_unknown_problem_counts_as_longest() -> None:
    todo = [_cell("quick"), _cell("new"), _cell("slow"), _cell("middle"), _cell("half_done", run_id=7),
            _cell("also_new")]
    order = longest_first(todo, {"quick": 2.0, "slow": 100.0, "middle": 40.0, "half_done": 1.0})
    assert [cell.key[0] for cell in order] == ["half_done", "new", "slow", "also_new", "middle", "quick"]


def test_without_estimates_the_cells_start_in_the_files_order() -> None:
    todo = [_cell(name) for name in ("c", "a", "b")]
    assert longest_first(todo, {}) == todo


def test_the_next_arms_cells_start_with_the_problem_whose_cells_ran_their_whole_budget(tmp_path: Path) -> None:
    """Arm a runs in file order (quick, then slow: nothing is known yet); quick's cell is solved by its initial
    program and slow's runs all 3 iterations, so arm b starts slow first."""
    programs = tmp_path / "programs"
    write_problem(programs, "quick", "Any x will do.", SOLVED_AT_ONCE)
    write_problem(programs, "slow", "Set x to a number; never solved.", EVALUATOR)
    started: list[tuple[str, str]] = []

    def record(event: object) -> None:
        if isinstance(event, CellStarted):
            problem, policy, _seed = event.cell.key
            started.append((policy, problem))

    with ScriptedPolicyServer("climber") as server:
        path = tmp_path / "exp.toml"
        path.write_text(QUICK_AND_SLOW.replace("{programs}", str(programs)).replace("{url}", server.url))
        outcome = ExperimentRunner(load_experiment(path), on_event=record).run()
    assert outcome.finished, outcome
    assert started == [("a", "quick"), ("a", "slow"), ("b", "slow"), ("b", "quick")]


def test_a_freed_slot_goes_to_the_waiting_cell_expected_longest_as_the_estimates_are_then() -> None:
    import asyncio

    from evolve.engine.cell_order import CellSlots

    expected: dict[str, float] = {}
    started: list[str] = []

    async def batch() -> None:
        slots = CellSlots(1, lambda waiting: longest_first(waiting, expected))

        async def cell(name: str, learned: dict[str, float]) -> None:
            async with slots.slot(_cell(name)):
                started.append(name)
                await asyncio.sleep(0)
                expected.update(learned)  # what this cell's end teaches, before its slot frees

        await asyncio.gather(cell("first", {"quick": 1.0, "slow": 90.0, "middle": 30.0}), cell("quick", {}),
                             cell("middle", {}), cell("slow", {}))

    asyncio.run(batch())
    assert started == ["first", "slow", "middle", "quick"]  # not the order they began waiting in


@pytest.mark.parametrize("when", ["while waiting", "as it was handed the slot"])
def test_a_cell_cancelled_while_waiting_or_as_it_was_handed_a_slot_loses_no_slot(when: str) -> None:
    import asyncio

    from evolve.engine.cell_order import CellSlots

    async def scenario() -> list[str]:
        slots = CellSlots(1, lambda waiting: waiting)
        ran: list[str] = []
        hold = asyncio.Event()

        async def cell(name: str, wait: bool = False) -> None:
            async with slots.slot(_cell(name)):
                ran.append(name)
                if wait:
                    await hold.wait()

        holder = asyncio.create_task(cell("holder", wait=True))
        await asyncio.sleep(0)
        cancelled, late = asyncio.create_task(cell("cancelled")), asyncio.create_task(cell("late"))
        await asyncio.sleep(0)
        if when == "while waiting":
            cancelled.cancel()  # it leaves the queue
            hold.set()
        else:
            hold.set()
            await asyncio.sleep(0)  # the holder frees its slot: "cancelled" is given it but has not resumed yet
            cancelled.cancel()  # it must pass the slot on
        # a slot lost with the cancelled cell would leave "late" waiting for ever: bound the wait (a hang guard only)
        await asyncio.wait_for(asyncio.gather(holder, cancelled, late, return_exceptions=True), 120)
        assert not slots.locked()
        async with slots.slot(_cell("after")):
            ran.append("after")
        return ran

    assert asyncio.run(scenario()) == ["holder", "late", "after"]
