"""Kill a Ray worker node mid-experiment and check that every cell still ends with its exact budget.

A local cluster of a head and a second worker node (separate node processes on loopback, each with the CPUs
of one cell, run.eval_workers, so cells land on both), a throwaway PostgreSQL store (tests/postgres_server.py), and
the real experiment file (default: experiments/default.toml, SmolLM2 in each cell's own process) run by `evolve
experiment FILE --cluster ray`. Once a cell driven on the second node has committed an iteration, every process of
that node gets SIGKILL; Ray re-runs its task on the head, which waits for the dead holder's lease to lapse and
resumes the run. At the end,
per cell: status finished, iterations 0..N committed once each, every iteration holding exactly its policy calls
(answers_per_iteration / answers) and 1..answers_per_iteration outcomes answering them, every stored program
referenced by exactly one outcome, one run per cell.

    .venv/bin/python scripts/dev/ray_kill_worker.py [--experiment experiments/default.toml] [--set iterations=2 ...]

Exit status 0 when every check holds; the checks and their counts are printed.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "tests"))

from postgres_server import postgres_server  # noqa: E402
from ray_local_cluster import LOOPBACK, LocalRayCluster, RayNode  # noqa: E402
from sqlalchemy import create_engine, text  # noqa: E402

from evolve.cli.common import experiment_settings  # noqa: E402
from evolve.engine.experiment_spec import ExperimentSpec, load_experiment  # noqa: E402
from evolve.store.program_store import ProgramStore  # noqa: E402

LEASE_S = "5"  # a killed cell's lease lapses this soon (the default, 30 s, only delays the re-run)


def cell_on_node(store: ProgramStore, spec: ExperimentSpec, node: RayNode) -> tuple[int, int] | None:
    """(run id, iterations committed) of a cell driven on `node` with at least one iteration committed."""
    pids = node.pids()
    for cell in store.experiment_cells(spec.name):
        lease = store.lease(cell.run_id)
        done = len(store.completed_iterations(cell.run_id) - {0})
        if lease is not None and int(lease.process.rsplit(":", 1)[1]) in pids and 1 <= done < spec.iterations:
            return cell.run_id, done
    return None


def check_budgets(url: str, spec: ExperimentSpec) -> list[str]:
    """Every broken promise, one line each: a cell not finished, an iteration missing or doubled, an outcome or a
    program counted twice."""
    problems: list[str] = []
    store = ProgramStore(url, mode="read")
    cells = store.experiment_cells(spec.name)
    if sorted((c.problem, c.policy, c.seed) for c in cells) != sorted(spec.cells()):
        problems.append(f"cells in the store {len(cells)} != cells of the experiment {len(spec.cells())}")
    if len(store.list_runs()) != len(spec.cells()):
        problems.append(f"{len(store.list_runs())} runs for {len(spec.cells())} cells")
    answers = spec.answers_per_iteration_of_cells()
    engine = create_engine(url)
    with engine.connect() as connection:
        for cell in cells:
            name = f"{cell.problem}/{cell.policy}/s{cell.seed} (run {cell.run_id})"
            status = store.get_run(cell.run_id).status
            iterations = store.completed_iterations(cell.run_id)
            rows = connection.execute(text("SELECT iteration, kind FROM attempts WHERE run_id = :r"),
                                      {"r": cell.run_id}).all()
            calls = Counter(iteration for iteration, kind in rows if kind == "policy_call")
            outcomes = Counter(iteration for iteration, kind in rows if kind != "policy_call")
            strays = connection.execute(text(
                "SELECT COUNT(*) FROM attempts o JOIN attempts c ON o.call_id = c.id "
                "WHERE o.run_id = :r AND o.iteration != c.iteration"), {"r": cell.run_id}).scalar_one()
            referenced = [row[0] for row in connection.execute(text(
                "SELECT program_id FROM attempts WHERE run_id = :r AND program_id IS NOT NULL"), {"r": cell.run_id})]
            programs = [row[0] for row in connection.execute(text(
                "SELECT id FROM programs WHERE run_id = :r"), {"r": cell.run_id})]
            requests = answers // spec.policy(cell.policy).answers  # policy calls per iteration
            expected = {i: requests for i in range(1, spec.iterations + 1)}
            if status != "finished":
                problems.append(f"{name}: status {status}")
            if iterations != set(range(spec.iterations + 1)):
                problems.append(f"{name}: committed iterations {sorted(iterations)}")
            if dict(calls) != expected:
                problems.append(f"{name}: policy calls per iteration {dict(sorted(calls.items()))}, want {expected}")
            if sorted(outcomes) != list(range(spec.iterations + 1)) or outcomes[0] != 1 or strays or \
                    any(not 1 <= count <= answers for count in outcomes.values()):
                problems.append(f"{name}: outcomes per iteration {dict(sorted(outcomes.items()))}, {strays} "
                                "answering a call of another iteration")
            if sorted(referenced) != sorted(programs) or len(set(programs)) != len(programs):
                problems.append(f"{name}: {len(programs)} programs, {len(referenced)} outcomes naming one")
            print(f"  {name}: {status}, iterations 0..{max(iterations, default=-1)}, {sum(calls.values())} policy "
                  f"calls, {sum(outcomes.values())} outcomes, {len(programs)} programs")
    engine.dispose()
    store.close()
    return problems


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--experiment", default=str(ROOT / "experiments" / "default.toml"))
    parser.add_argument("--set", action="append", default=[], metavar="KEY=VALUE",
                        help="passed to `evolve experiment --set` (e.g. iterations=2, seeds=[0])")
    parser.add_argument("--timeout", type=float, default=3600.0, help="seconds for the whole experiment")
    args = parser.parse_args()
    settings = [part for setting in args.set for part in ("--set", setting)]

    values, labels = experiment_settings(argparse.Namespace(set=args.set))
    cpus = load_experiment(args.experiment, None, values, labels).run.eval_workers  # one cell per node at a time
    with tempfile.TemporaryDirectory(prefix="ray_kill") as folder, postgres_server(Path(folder) / "pg") as postgres, \
            LocalRayCluster(head_cpus=cpus, env={"EVOLVE_LEASE_S": LEASE_S}) as cluster:
        second = cluster.add_node(cpus=cpus)
        url = postgres.create_database("kill_test")
        command = [sys.executable, "-m", "evolve.cli.main", "experiment", args.experiment, "--cluster", "ray",
                   "--plain", "--db", url, *settings]
        spec = load_experiment(args.experiment, url, values, labels)  # as the command applies --set
        print(f"cluster at {cluster.address}: head ({cpus} CPUs) + {second.name} ({cpus} CPUs); store {url}")
        print("$ " + " ".join(command[2:]), flush=True)
        started = time.monotonic()
        driver = subprocess.Popen(command, cwd=ROOT, text=True, env={
            **os.environ, **LOOPBACK, "RAY_ADDRESS": cluster.address, "EVOLVE_LEASE_S": LEASE_S, "COLUMNS": "200"})
        store = ProgramStore(url)
        killed = None
        while killed is None and driver.poll() is None and time.monotonic() - started < args.timeout:
            killed = cell_on_node(store, spec, second)
            if killed is not None:
                cluster.kill(second)
                print(f"--- killed {second.name} (every process, SIGKILL) after run {killed[0]} committed "
                      f"{killed[1]} iteration(s), {time.monotonic() - started:.0f} s in", flush=True)
            time.sleep(0.2)
        try:
            driver.wait(timeout=max(1.0, args.timeout - (time.monotonic() - started)))
        except subprocess.TimeoutExpired:
            driver.kill()
            print("the experiment did not finish in time")
            return 1
        store.close()
        print(f"experiment exited {driver.returncode} after {time.monotonic() - started:.0f} s; checks:")
        problems = check_budgets(url, spec)
    if killed is None:
        problems.append("no cell ran on the second node: nothing was killed")
    for problem in problems:
        print(f"FAIL {problem}")
    print("every cell finished with its exact budget" if not problems else f"{len(problems)} check(s) failed")
    return 0 if not problems and driver.returncode == 0 else 1


if __name__ == "__main__":
    sys.exit(main())
