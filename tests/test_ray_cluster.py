"""`evolve experiment --cluster ray`: cells as Ray tasks on a real two-node cluster (a head and a second worker node,
separate `ray start` processes on loopback) writing a real PostgreSQL store; the second node is SIGKILLed
mid-experiment and every cell still ends with its exact budget. The policy is tests/fake_policy_server.py (a fixed
latency), so the cluster's start, not the model, sets the pace. Without --cluster, Ray is never imported.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest
from fake_policy_server import FakePolicyServer
from sqlalchemy import create_engine, text

from evolve.cluster import ClusterError
from evolve.cluster.placement import (
    CellResources,
    cell_resources,
    policy_for_cell,
    refuse_sqlite_across_hosts,
    refuse_unplaceable,
)
from evolve.engine.experiment_spec import load_experiment
from evolve.ports import free_port
from evolve.store.program_store import ProgramStore
from evolve.store.records import StoreError

ROOT = Path(__file__).resolve().parents[1]
ITERATIONS = 10
SEEDS = (0, 1, 2, 3)
HANG_S = 600  # bounds a hang only: every wait in this file is for an event, whatever the machine's load
LEASE_S = "2"  # a killed cell's lease lapses this soon, so its re-run starts quickly


def experiment_file(folder: Path, policy_url: str, db: str, seeds: tuple[int, ...] = SEEDS,
                    iterations: int = ITERATIONS, extra_policy: str = "") -> Path:
    path = folder / "cluster.toml"
    path.write_text(textwrap.dedent(f"""\
        problems = ["fizzbuzz"]
        seeds = {list(seeds)}
        iterations = {iterations}
        db = "{db}"
        [run]
        programs_dir = "{ROOT / 'programs'}"
        concurrency = 1
        eval_workers = 1
        [[policies]]
        name = "fake"
        backend = "openai"
        url = "{policy_url}"
        model = "fake"
        """) + extra_policy)
    return path


# ---------------------------------------------------------------- what a cell asks of the cluster


def test_a_cell_asks_for_its_evaluation_cpus_and_the_gpus_of_a_model_it_hosts(tmp_path: Path) -> None:
    path = experiment_file(tmp_path, "http://127.0.0.1:9/v1", str(tmp_path / "s.db"))
    path.write_text(path.read_text().replace("eval_workers = 1", "eval_workers = 3")
                    + '[[policies]]\nname = "local"\nbackend = "hf"\ndevice = "cuda:0"\n'
                    + '[[policies]]\nname = "cpu"\nbackend = "hf"\n')
    spec = load_experiment(path)
    assert cell_resources(spec, "fake") == CellResources(cpus=3.0, gpus=0.0)
    assert cell_resources(spec, "local") == CellResources(cpus=3.0, gpus=1.0)
    assert cell_resources(spec, "cpu") == CellResources(cpus=3.0, gpus=0.0)


def test_a_cpu_model_in_a_cell_takes_as_many_threads_as_the_cell_has_cpus(tmp_path: Path) -> None:
    path = experiment_file(tmp_path, "http://127.0.0.1:9/v1", str(tmp_path / "s.db"))
    path.write_text(path.read_text() + '[[policies]]\nname = "cpu"\nbackend = "hf"\n'
                    + '[[policies]]\nname = "pinned"\nbackend = "hf"\nthreads = 3\n'
                    + '[[policies]]\nname = "two"\nbackend = "llamacpp"\nengines = 2\n')
    spec = load_experiment(path)
    assert policy_for_cell(spec.policy("cpu"), 2.0).threads == 2  # type: ignore[union-attr]
    assert policy_for_cell(spec.policy("two"), 4.0).threads == 2  # type: ignore[union-attr]  # each engine's share
    assert policy_for_cell(spec.policy("pinned"), 2.0).threads == 3  # type: ignore[union-attr]
    assert policy_for_cell(spec.policy("fake"), 2.0) == spec.policy("fake")
    assert spec.policy("cpu").threads == 0  # type: ignore[union-attr]  # the stored config keeps the file's value


def test_a_sqlite_store_is_refused_only_when_the_cluster_spans_machines(tmp_path: Path) -> None:
    sqlite = str(tmp_path / "s.db")
    refuse_sqlite_across_hosts(sqlite, ["127.0.0.1", "127.0.0.1"])  # two raylets on one machine share the file
    refuse_sqlite_across_hosts("postgresql+psycopg://evolve@db:5432/x", ["10.0.0.1", "10.0.0.2"])
    with pytest.raises(ClusterError) as error:
        refuse_sqlite_across_hosts(sqlite, ["10.0.0.1", "10.0.0.2"])
    assert "spans 2 machines" in str(error.value) and "\n" not in str(error.value)
    with pytest.raises(ClusterError):
        refuse_sqlite_across_hosts(f"sqlite:///{sqlite}", ["10.0.0.1", "10.0.0.2"])


def test_a_cell_no_node_can_hold_is_refused_naming_the_setting_to_lower() -> None:
    nodes = [{"CPU": 1.0}, {"CPU": 2.0, "GPU": 1.0}]
    refuse_unplaceable({"fake": CellResources(cpus=2.0, gpus=1.0), "cpu": CellResources(cpus=1.0, gpus=0.0)}, nodes)
    with pytest.raises(ClusterError) as error:
        refuse_unplaceable({"fake": CellResources(cpus=4.0, gpus=0.0)}, nodes)
    assert "policy 'fake'" in str(error.value) and "run.eval_workers" in str(error.value)
    with pytest.raises(ClusterError):
        refuse_unplaceable({"local": CellResources(cpus=1.0, gpus=2.0)}, nodes)


def test_a_cluster_address_where_nothing_listens_is_one_line_not_minutes_of_retries(
        tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch) -> None:
    pytest.importorskip("ray")
    from evolve.cli.main import main

    closed = free_port()  # a port nothing listens on
    monkeypatch.setenv("RAY_ADDRESS", f"127.0.0.1:{closed}")
    path = experiment_file(tmp_path, "http://127.0.0.1:9/v1", str(tmp_path / "s.db"), seeds=(0,), iterations=1)
    started = time.monotonic()
    code = main(["experiment", str(path), "--cluster", "ray", "--plain"])
    out = " ".join(capsys.readouterr().out.split())
    assert code == 1 and f"cannot reach the Ray cluster at RAY_ADDRESS=127.0.0.1:{closed}" in out, out
    assert "Traceback" not in out and time.monotonic() - started < 60


# ---------------------------------------------------------------- Ray stays out of the one-process path


def test_an_experiment_without_cluster_never_imports_ray(tmp_path: Path) -> None:
    script = textwrap.dedent(f"""\
        import sys
        from pathlib import Path
        sys.path.insert(0, {str(ROOT / 'tests')!r})
        from fake_policy_server import FakePolicyServer
        from test_ray_cluster import experiment_file
        from evolve.cli.main import main
        with FakePolicyServer(latency_s=0.01) as server:
            path = experiment_file(Path.cwd(), server.url, "one.db", seeds=(0,), iterations=2)
            code = main(["experiment", str(path), "--plain"])
        print("exit", code, "ray imported:", "ray" in sys.modules)
        """)
    result = subprocess.run([sys.executable, "-c", script], cwd=tmp_path, capture_output=True, text=True,
                            timeout=120)
    assert "exit 0 ray imported: False" in result.stdout, result.stdout + result.stderr


# ---------------------------------------------------------------- a two-node cluster, one node killed


def run_rows(url: str, run_id: int) -> tuple[list[int], list[int]]:
    """(iteration of every terminal attempt, iteration of every program) of a run, sorted."""
    engine = create_engine(url)
    try:
        with engine.connect() as connection:
            attempts = [row[0] for row in connection.execute(text(
                "SELECT iteration FROM attempts WHERE run_id = :run AND kind != 'policy_call' ORDER BY iteration"),
                {"run": run_id})]
            programs = [row[0] for row in connection.execute(text(
                "SELECT iteration FROM programs WHERE run_id = :run ORDER BY iteration"), {"run": run_id})]
    finally:
        engine.dispose()
    return attempts, programs


def test_a_killed_worker_node_loses_no_cell_and_doubles_no_iteration(tmp_path: Path, postgresql_url: str) -> None:
    pytest.importorskip("ray")
    from ray_local_cluster import LOOPBACK, LocalRayCluster

    with FakePolicyServer(latency_s=0.1) as server, \
            LocalRayCluster(head_cpus=1, env={"EVOLVE_LEASE_S": LEASE_S}) as cluster:
        second = cluster.add_node(cpus=1)
        assert cluster.off_loopback_sockets() == []  # every Ray process listens on and talks to 127.0.0.1 only
        path = experiment_file(tmp_path, server.url, postgresql_url)
        spec = load_experiment(path)
        driver = subprocess.Popen(
            [sys.executable, "-m", "evolve.cli.main", "experiment", str(path), "--cluster", "ray", "--plain"],
            cwd=tmp_path, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
            env={**os.environ, **LOOPBACK, "RAY_ADDRESS": cluster.address, "EVOLVE_LEASE_S": LEASE_S,
                 "COLUMNS": "300"})
        store = ProgramStore(postgresql_url)
        killed: tuple[int, int] | None = None  # (run id, iterations it had committed)
        off_loopback: list[str] = []  # Ray sockets outside 127.0.0.0/8 while a cell ran on the second node
        deadline = time.monotonic() + HANG_S
        while killed is None and driver.poll() is None and time.monotonic() < deadline:
            pids = second.pids()
            for cell in store.experiment_cells(spec.name):
                lease = store.lease(cell.run_id)
                done = len(store.completed_iterations(cell.run_id) - {0})
                if lease is not None and int(lease.process.rsplit(":", 1)[1]) in pids and 2 <= done < ITERATIONS:
                    off_loopback = cluster.off_loopback_sockets()  # the cells' workers and their connections too
                    cluster.kill(second)
                    killed = (cell.run_id, done)
                    break
            time.sleep(0.1)
        out, _ = driver.communicate(timeout=HANG_S)
    assert killed is not None, f"no cell ran on the second node before the experiment ended:\n{out}"
    assert off_loopback == [], off_loopback
    assert driver.returncode == 0 and f"{len(SEEDS)}/{len(SEEDS)} cells finished" in out, out

    cells = store.experiment_cells(spec.name)
    assert sorted(cell.seed for cell in cells) == list(SEEDS)  # one run per cell: the re-run made none
    assert len(store.list_runs()) == len(SEEDS)
    for cell in cells:
        run = store.get_run(cell.run_id)
        attempts, programs = run_rows(postgresql_url, cell.run_id)
        assert run.status == "finished", (cell, run.status, out)
        assert store.completed_iterations(cell.run_id) == set(range(ITERATIONS + 1))
        assert attempts == list(range(ITERATIONS + 1)), (cell, attempts)  # the seed, then one answer per iteration
        assert programs[0] == 0 and programs.count(0) == 1 and len(set(programs)) == len(programs), (cell, programs)
    killed_run, done_before = killed
    assert done_before >= 2 and store.get_run(killed_run).status == "finished"
    print(f"killed run {killed_run} after {done_before} iterations; driver said:\n{out}")
    assert server.requests >= len(SEEDS) * ITERATIONS  # the killed iteration's request is made again
    store.close()


# the CLI, with a Ctrl-C (a real SIGINT to itself) as the store is about to be made: nothing of it exists yet
INTERRUPTED_BEFORE_THE_STORE = textwrap.dedent("""\
    import os, signal, sys
    import evolve.store.program_store as program_store
    from evolve.cli.main import main
    make_schema = program_store.prepare_schema
    def interrupted(*arguments):
        os.kill(os.getpid(), signal.SIGINT)
        return make_schema(*arguments)
    program_store.prepare_schema = interrupted
    sys.exit(main(sys.argv[1:]))
    """)


def committed_iterations(db: Path) -> list[int]:
    """Iterations each run of the store has committed; [] while the file or its tables do not exist yet."""
    if not db.exists():
        return []
    try:  # the file may exist before its tables do: a read-only store then says so, and we wait
        store = ProgramStore(str(db), mode="read")
    except StoreError:
        return []
    try:
        return [len(store.completed_iterations(run.id)) for run in store.list_runs()]
    except StoreError:
        return []
    finally:
        store.close()


def test_ctrl_c_interrupts_every_ray_cell_and_the_same_command_finishes_them(tmp_path: Path) -> None:
    iterations = 60  # a cell takes >= 6 s at 0.1 s a request: the Ctrl-C lands while one still runs
    pytest.importorskip("ray")
    db = tmp_path / "s.db"
    with FakePolicyServer(latency_s=0.1) as server:
        path = experiment_file(tmp_path, server.url, str(db), seeds=(0, 1), iterations=iterations)
        arguments = ["experiment", str(path), "--cluster", "ray", "--plain"]
        command = [sys.executable, "-m", "evolve.cli.main", *arguments]
        env = {key: value for key, value in os.environ.items() if key != "RAY_ADDRESS"}  # a local cluster
        env["COLUMNS"] = "300"  # one line per message, however long the paths

        # a Ctrl-C before the store exists: the usual interrupted ending, nothing written, no Ray started
        early = subprocess.run([sys.executable, "-c", INTERRUPTED_BEFORE_THE_STORE, *arguments], cwd=tmp_path,
                               capture_output=True, text=True, env=env, timeout=HANG_S)
        assert early.returncode == 130 and "0/2 cells finished" in early.stdout, early.stdout + early.stderr
        assert f"continue with: evolve experiment {path}" in early.stdout and "Traceback" not in early.stderr
        assert committed_iterations(db) == []

        # a Ctrl-C once a cell has committed a few iterations (waited for, not timed)
        first = subprocess.Popen(command, cwd=tmp_path, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                                 env=env)
        deadline = time.monotonic() + HANG_S
        while not any(done > 3 for done in committed_iterations(db)):
            if first.poll() is not None or time.monotonic() > deadline:
                first.kill()
                pytest.fail(f"no cell committed 4 iterations while the experiment ran:\n{first.communicate()[0]}")
            time.sleep(0.2)
        first.send_signal(signal.SIGINT)
        out, _ = first.communicate(timeout=HANG_S)
        # a loaded machine may let one cell reach its last iteration before the Ctrl-C lands: it stays finished;
        # every cell still running is interrupted, and the summary counts what finished
        statuses = [run.status for run in ProgramStore(str(db), mode="read").list_runs()]
        assert set(statuses) <= {"interrupted", "finished"} and "interrupted" in statuses, out
        assert first.returncode == 130 and f"{statuses.count('finished')}/2 cells finished" in out, out
        again = subprocess.run(command, cwd=tmp_path, capture_output=True, text=True, env=env, timeout=HANG_S)
    assert again.returncode == 0 and "2/2 cells finished" in again.stdout, again.stdout + again.stderr
    store = ProgramStore(str(db), mode="read")
    runs = store.list_runs()
    assert len(runs) == 2 and all(run.status == "finished" for run in runs)
    assert all(store.completed_iterations(run.id) == set(range(iterations + 1)) for run in runs)


def test_a_local_clusters_node_ports_are_distinct_even_when_random_draws_repeat(
        monkeypatch: pytest.MonkeyPatch) -> None:
    import ray_local_cluster

    draws = iter([23915, 23915, 20943, 23915, 21186, 20943, 28169, 29901, 30001, 30002])
    monkeypatch.setattr(ray_local_cluster, "free_port", lambda: next(draws))
    taken = {21186}  # the head's own port, drawn before
    ports = ray_local_cluster._node_ports(taken)
    assert len(set(ports.values())) == 6 and 21186 not in ports.values()
    assert ports["node_manager_port"] == 23915 and ports["metrics_export_port"] == 28169
