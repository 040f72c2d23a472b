"""Benchmark: CPU and wall time per evaluation, a fresh evaluator process each (evaluate_program) against warm ones
(EvaluatorPool), on a trivial problem and a numpy one, one evaluation at a time.

"trivial" is a problem written to a temporary folder whose evaluator makes one sandbox call of `f(2)` on a
candidate that returns its argument: what is timed is the trusted evaluator and the sandbox, not the candidate.
"bin_packing" (shipped) imports numpy in both the evaluator and the candidate. Per evaluation:

- wall-ms: median of each evaluation's wall clock as the engine sees it;
- CPU-ms: the evaluator process and its sandbox children together. Fresh: each evaluation's process, read from
  RUSAGE_CHILDREN once it is reaped (exact), median. Warm: the warm process and its descendants (the sandbox's
  fork server, which reaps the forked children) with the CPU of the children they reaped, read from /proc before
  and after each job (10 ms ticks), median;
- CPU-ms mean: the exact mean over all evaluations (RUSAGE_CHILDREN); for warm, after the pool closed, so it
  includes the one start (interpreter, imports, fork server preload) and exit of the warm process;
- engine CPU-ms: this process's own CPU per evaluation, mean.

    .venv/bin/python scripts/bench/bench_evaluation.py [--evaluations 30] [--problems trivial bin_packing]
"""

from __future__ import annotations

import argparse
import asyncio
import os
import resource
import statistics
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

from evolve.problems.evaluation import evaluate_program
from evolve.problems.evaluator_pool import EvaluatorPool
from evolve.problems.problem import Problem, load_problem

ROOT = Path(__file__).resolve().parents[2]
TICK_MS = 1000.0 / os.sysconf("SC_CLK_TCK")

TRIVIAL_TOML = """\
name = "trivial"
description = "Return x."
provenance = "scripts/bench/bench_evaluation.py"
objectives = ["a"]

[solved]
all_at_least = 1.0

[limits]
wall_time_s = 5
cpu_time_s = 5
"""
TRIVIAL_EVALUATOR = """\
from evolve.evaluator_api import fail_unless_ok


def evaluate(program_path, sandbox):
    return {"a": float(fail_unless_ok(sandbox.call(program_path, "f", 2)).value)}
"""
TRIVIAL_INITIAL = "# EVOLVE-BLOCK-START\ndef f(x):\n    return x\n# EVOLVE-BLOCK-END\n"


@dataclass(frozen=True)
class Timing:
    wall_ms: list[float]
    cpu_ms: list[float]
    cpu_mean_ms: float
    engine_cpu_ms: float


def children_cpu_ms() -> float:
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return (usage.ru_utime + usage.ru_stime) * 1000


def own_cpu_ms() -> float:
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return (usage.ru_utime + usage.ru_stime) * 1000


def tree_cpu_ms(root: int) -> float:
    """CPU of a process and its live descendants (the sandbox's fork server), each with the CPU of the children
    it reaped, from /proc in clock ticks."""
    stats: dict[int, tuple[int, float]] = {}
    for entry in os.scandir("/proc"):
        if entry.name.isdigit():
            try:
                with open(f"/proc/{entry.name}/stat") as handle:
                    fields = handle.read().rsplit(")", 1)[1].split()
            except OSError:
                continue
            stats[int(entry.name)] = (int(fields[1]), sum(int(fields[index]) for index in (11, 12, 13, 14)) * TICK_MS)
    tree, total, grown = {root}, 0.0, True
    while grown:
        grown = False
        for pid, (parent, _) in stats.items():
            if parent in tree and pid not in tree:
                tree.add(pid)
                grown = True
    for pid in tree:
        total += stats.get(pid, (0, 0.0))[1]
    return total


async def time_fresh(problem: Problem, evaluations: int) -> Timing:
    walls, cpus = [], []
    engine_before = own_cpu_ms()
    for _ in range(evaluations):
        before, started = children_cpu_ms(), time.perf_counter()
        evaluation = await evaluate_program(problem, problem.initial_code)
        walls.append((time.perf_counter() - started) * 1000)
        cpus.append(children_cpu_ms() - before)
        assert evaluation.ok, evaluation
    engine = (own_cpu_ms() - engine_before) / evaluations
    return Timing(walls, cpus, statistics.fmean(cpus), engine)


async def time_warm(problem: Problem, evaluations: int) -> Timing:
    walls, cpus, engine = [], [], 0.0
    session_before = children_cpu_ms()
    async with EvaluatorPool(1, recycle_after=evaluations + 1) as pool:
        for _ in range(evaluations):
            pids = pool.pids()
            before = tree_cpu_ms(pids[0]) if pids else 0.0
            engine_before, started = own_cpu_ms(), time.perf_counter()
            evaluation = await pool.evaluate(problem, problem.initial_code)
            walls.append((time.perf_counter() - started) * 1000)
            engine += own_cpu_ms() - engine_before  # the /proc reads above and below are the benchmark's, not counted
            cpus.append(tree_cpu_ms(pool.pids()[0]) - before)
            assert evaluation.ok, evaluation
    mean = (children_cpu_ms() - session_before) / evaluations
    return Timing(walls, cpus, mean, engine / evaluations)


def trivial_problem(folder: Path) -> Problem:
    (folder / "trivial").mkdir()
    (folder / "trivial" / "problem.toml").write_text(TRIVIAL_TOML)
    (folder / "trivial" / "evaluator.py").write_text(TRIVIAL_EVALUATOR)
    (folder / "trivial" / "initial.py").write_text(TRIVIAL_INITIAL)
    return load_problem("trivial", folder)


def row(problem: str, mode: str, timing: Timing) -> str:
    wall, cpu = statistics.median(timing.wall_ms), statistics.median(timing.cpu_ms)
    return f"{problem:<14} {mode:<6} {wall:>9.1f} {cpu:>9.1f} {timing.cpu_mean_ms:>12.1f} {timing.engine_cpu_ms:>10.1f}"


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--evaluations", type=int, default=30, help="evaluations per problem and mode")
    parser.add_argument("--problems", nargs="+", default=["trivial", "bin_packing"],
                        help="'trivial' or shipped problems under programs/")
    args = parser.parse_args()
    print(f"{args.evaluations} evaluations of each problem's seed program, one at a time; {os.cpu_count()} cores")
    print(f"{'problem':<14} {'mode':<6} {'wall-ms':>9} {'CPU-ms':>9} {'CPU-ms mean':>12} {'engine-ms':>10}")
    with tempfile.TemporaryDirectory() as folder:
        ratios = []
        for name in args.problems:
            problem = trivial_problem(Path(folder)) if name == "trivial" else load_problem(name, ROOT / "programs")
            fresh = await time_fresh(problem, args.evaluations)
            warm = await time_warm(problem, args.evaluations)
            print(row(name, "fresh", fresh))
            print(row(name, "warm", warm))
            ratios.append((name, statistics.median(fresh.wall_ms) / statistics.median(warm.wall_ms),
                           fresh.cpu_mean_ms / warm.cpu_mean_ms))
    for name, wall, cpu in ratios:
        print(f"{name}: fresh / warm = {wall:.1f}x wall (medians), {cpu:.1f}x CPU (means)")


if __name__ == "__main__":
    asyncio.run(main())
