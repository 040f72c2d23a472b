"""Benchmark: the engine's own work per iteration (policy and evaluator excluded) at 100 and 10,000 programs.

The real Controller runs against a real SQLite store that already holds N programs. The policy is
replaced by a replayer that returns recorded completions instantly and the evaluation by a
constant-time scorer, so what is timed is selection, prompt building, edit application, the
commit of the iteration and the selector update: the engine's overhead, not the model's or the
sandbox's (scripts/bench/bench_sandbox.py times that).

    .venv/bin/python scripts/bench/bench_engine.py [--iterations 300]
"""

from __future__ import annotations

import argparse
import asyncio
import random
import statistics
import tempfile
import time
from pathlib import Path

from evolve.config import RunConfig
from evolve.engine.controller import Controller
from evolve.problems.problem import load_problem
from evolve.records import Completion, Evaluation
from evolve.store.program_store import ChildRecord, ProgramStore

ROOT = Path(__file__).resolve().parents[2]


class ReplayPolicy:
    """Returns a fresh, valid block body instantly, so only the engine's work is timed."""

    name = "replay"

    def __init__(self) -> None:
        self.calls = 0

    async def generate(self, prompt: object, seed: int) -> Completion:
        self.calls += 1
        body = f"\n    return {seed % 997} * x / 1000 + {self.calls} * 0.0001\n"
        return Completion(text=body, completion_tokens=20, finish_reason="stop")

    async def close(self) -> None:
        return None


class TimedController(Controller):
    """The real controller, with the evaluator replaced by a constant-time scorer and per-iteration timing."""

    def __init__(self, *args: object, **kwargs: object) -> None:
        super().__init__(*args, **kwargs)  # type: ignore[arg-type]
        self.iteration_s: list[float] = []

    async def _evaluate(self, code: str) -> Evaluation:
        value = (hash(code) % 1000) / 1000
        return Evaluation(ok=True, scores={name: value for name in self.problem.objectives})

    async def _iterate(self, iteration: int) -> None:
        started = time.perf_counter()
        await super()._iterate(iteration)
        self.iteration_s.append(time.perf_counter() - started)


def fill_store(store: ProgramStore, run_id: int, count: int, objectives: tuple[str, ...], code: str) -> None:
    rng = random.Random(0)
    for start in range(0, count, 500):
        batch = []
        for index in range(start, min(count, start + 500)):
            scores = {name: rng.random() for name in objectives}
            batch.append(ChildRecord(code=code.replace("return x", f"return x + {index}"), parent_id=None,
                                     island=index % 3, policy="replay", edit="", scores=scores,
                                     scalar=sum(scores.values()) / len(scores), solved=False, artifacts={}))
        store.record_iteration(run_id, -1 - start, batch)


def bench(size: int, iterations: int) -> dict[str, float]:
    config = RunConfig.model_validate({"run": {"iterations": iterations, "concurrency": 1}})
    problem = load_problem(config.run.problem, ROOT / "programs")
    with tempfile.TemporaryDirectory() as folder:
        store = ProgramStore(str(Path(folder) / "bench.db"))
        run_id = store.create_run("bench", problem.name, "replay", 0, config.model_dump_json(), iterations)
        fill_store(store, run_id, size, problem.objectives, problem.initial_code)
        started = time.perf_counter()
        controller = TimedController(config, problem, store, ReplayPolicy(), run_id)
        asyncio.run(controller.run())
        total = time.perf_counter() - started
        timings = sorted(controller.iteration_s)
    return {
        "median_ms": 1000 * statistics.median(timings),
        "p90_ms": 1000 * timings[int(0.9 * len(timings))],
        "total_s": total,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--iterations", type=int, default=300)
    args = parser.parse_args()
    print(f"engine overhead per iteration, {args.iterations} iterations each (policy and evaluator excluded)")
    print(f"{'programs in store':>18} {'median ms':>10} {'p90 ms':>8} {'run incl. load s':>17}")
    results = {}
    for size in (100, 10_000):
        results[size] = bench(size, args.iterations)
        r = results[size]
        print(f"{size:>18,} {r['median_ms']:>10.2f} {r['p90_ms']:>8.2f} {r['total_s']:>17.2f}")
    ratio = results[10_000]["median_ms"] / results[100]["median_ms"]
    print(f"ratio of medians, 10,000 vs 100 programs: {ratio:.2f}")


if __name__ == "__main__":
    main()
