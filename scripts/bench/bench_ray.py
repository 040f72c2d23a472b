"""Benchmark: an experiment's cells in one process against the same cells as Ray tasks, and the Ray path's overhead
as the cluster grows from 1 to 2 to 4 nodes (local node processes on loopback, the same 4 CPU slots in total).

Every arm runs the same cells (fizzbuzz, one policy, SEEDS seeds x ITERATIONS iterations, one answer per iteration)
against tests/fake_policy_server.py, an OpenAI-compatible endpoint answering after a fixed latency, so the figures
are the engine's, the evaluator's, the store's and the cluster's, not a model's. Reported per arm: wall time,
cells/hour, evaluations/min (attempts whose child was scored), and for Ray the cluster's start and the mean time
from submitting a cell to its first committed iteration (a worker process starting and importing the engine).

    .venv/bin/python scripts/bench/bench_ray.py [--seeds 8] [--iterations 8] [--latency 0.1] [--nodes 1,2,4] \
        [--postgres]
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time
from contextlib import ExitStack
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "tests"))

from fake_policy_server import FakePolicyServer  # noqa: E402
from sqlalchemy import create_engine, text  # noqa: E402

from evolve.engine.experiment import ExperimentRunner  # noqa: E402
from evolve.engine.experiment_spec import ExperimentSpec, load_experiment  # noqa: E402
from evolve.store.connection import database_url  # noqa: E402
from evolve.store.program_store import ProgramStore  # noqa: E402

SLOTS = 4  # cells at once in every arm: parallel_cells in one process, CPUs of the cluster on Ray
SCORED = "kind NOT IN ('policy_call', 'edit_failed', 'duplicate')"


@dataclass(frozen=True)
class Arm:
    name: str
    wall_s: float
    cells: int
    evaluations: int
    cluster_start_s: float = 0.0
    first_iteration_s: float = 0.0

    def row(self) -> str:
        cells_per_hour = self.cells / self.wall_s * 3600
        evals_per_min = self.evaluations / self.wall_s * 60
        extra = f"{self.cluster_start_s:8.1f} {self.first_iteration_s:10.1f}" if self.cluster_start_s else \
            f"{'-':>8} {self.first_iteration_s:10.1f}"
        return f"{self.name:<22} {self.wall_s:8.1f} {cells_per_hour:10.0f} {evals_per_min:10.0f} {extra}"


def write_experiment(folder: Path, name: str, url: str, db: str, seeds: int, iterations: int,
                     eval_workers: int) -> ExperimentSpec:
    path = folder / f"{name}.toml"
    path.write_text(f'problems = ["fizzbuzz"]\nseeds = {list(range(seeds))}\niterations = {iterations}\n'
                    f'parallel_cells = {SLOTS}\ndb = "{db}"\n[run]\nprograms_dir = "{ROOT / "programs"}"\n'
                    f'concurrency = 1\neval_workers = {eval_workers}\n[[policies]]\nname = "fake"\n'
                    f'backend = "openai"\nurl = "{url}"\nmodel = "fake"\n')
    return load_experiment(path)


def evaluations(db: str) -> int:
    engine = create_engine(database_url(db))
    try:
        with engine.connect() as connection:
            return int(connection.execute(text(f"SELECT COUNT(*) FROM attempts WHERE iteration > 0 AND {SCORED}"))
                       .scalar_one())
    finally:
        engine.dispose()


def first_iteration_delays(spec: ExperimentSpec, started: float, seen: dict[int, float]) -> None:
    """Note, for every run not yet seen with a committed iteration > 0, the time it first has one."""
    store = ProgramStore(spec.db, mode="read")
    try:
        for cell in store.experiment_cells(spec.name):
            if cell.run_id not in seen and store.completed_iterations(cell.run_id) - {0}:
                seen[cell.run_id] = time.monotonic() - started
    finally:
        store.close()


def run_arm(name: str, spec: ExperimentSpec, executor: object | None, cluster_start_s: float = 0.0) -> Arm:
    started = time.monotonic()
    seen: dict[int, float] = {}
    runner = ExperimentRunner(spec, executor=executor)  # type: ignore[arg-type]
    last_look = [0.0]

    def watch(_: object) -> None:
        if time.monotonic() - last_look[0] > 0.2:
            last_look[0] = time.monotonic()
            first_iteration_delays(spec, started, seen)

    runner.on_event = watch
    outcome = runner.run()
    wall = time.monotonic() - started
    if not outcome.finished:
        raise SystemExit(f"{name}: the experiment did not finish: {outcome.errors}")
    return Arm(name, wall, len(outcome.cells), evaluations(spec.db), cluster_start_s,
               statistics.mean(seen.values()) if seen else 0.0)


def node_layout(nodes: int) -> list[int]:
    """CPUs per node, head first, SLOTS in all."""
    per_node = max(1, SLOTS // nodes)
    return [SLOTS - per_node * (nodes - 1), *[per_node] * (nodes - 1)]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seeds", type=int, default=8, help="cells (one per seed)")
    parser.add_argument("--iterations", type=int, default=8)
    parser.add_argument("--latency", type=float, default=0.1, help="the fake policy's seconds per request")
    parser.add_argument("--nodes", default="1,2,4", help="cluster sizes to run on Ray")
    parser.add_argument("--postgres", action="store_true", help="a throwaway PostgreSQL store (else SQLite files)")
    args = parser.parse_args()

    from ray_local_cluster import LOOPBACK, LocalRayCluster

    os.environ.update(LOOPBACK)  # this process is the clusters' driver
    from evolve.cluster.ray_cells import RayCellExecutor

    arms: list[Arm] = []
    with ExitStack() as stack:
        folder = Path(stack.enter_context(tempfile.TemporaryDirectory(prefix="bench_ray")))
        server = stack.enter_context(FakePolicyServer(latency_s=args.latency))
        postgres = None
        if args.postgres:
            from postgres_server import postgres_server

            postgres = stack.enter_context(postgres_server(folder / "pg"))

        def store(name: str) -> str:
            return postgres.create_database(name) if postgres else str(folder / f"{name}.db")

        spec = write_experiment(folder, "one", server.url, store("one"), args.seeds, args.iterations, SLOTS)
        arms.append(run_arm("one process", spec, None))
        print(arms[-1].row(), flush=True)
        for nodes in (int(n) for n in args.nodes.split(",")):
            layout = node_layout(nodes)
            began = time.monotonic()
            with LocalRayCluster(head_cpus=layout[0], env=LOOPBACK) as cluster:
                for cpus in layout[1:]:
                    cluster.add_node(cpus=cpus)
                cluster_start = time.monotonic() - began
                spec = write_experiment(folder, f"ray{nodes}", server.url, store(f"ray{nodes}"), args.seeds,
                                        args.iterations, 1)
                arms.append(run_arm(f"ray, {nodes} node(s) {'+'.join(map(str, layout))}", spec,
                                    RayCellExecutor(address=cluster.address), cluster_start))
                print(arms[-1].row(), flush=True)
    print(f"\n{args.seeds} cells x {args.iterations} iterations, fake policy {args.latency * 1000:.0f} ms/request, "
          f"{SLOTS} cells at once, store {'PostgreSQL' if args.postgres else 'SQLite'}")
    print(f"{'arm':<22} {'wall s':>8} {'cells/h':>10} {'evals/min':>10} {'start s':>8} {'1st it. s':>10}")
    for arm in arms:
        print(arm.row())


if __name__ == "__main__":
    main()
