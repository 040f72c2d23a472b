"""Resume after a real kill -9 of a real run: nothing committed is lost and the budget is honoured; a resume's
selection state, rebuilt from the store without reading every program's code, is the uninterrupted process's.
Every test runs on a SQLite file and on a PostgreSQL database (store_url, tests/conftest.py)."""

from __future__ import annotations

import os
import random
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from sqlalchemy.exc import SQLAlchemyError
from store_backends import fetch, is_sqlite

from evolve.config import RunConfig
from evolve.engine.controller import Controller
from evolve.problems.problem import load_problem
from evolve.records import Program
from evolve.search.selection import Selector
from evolve.store.program_store import AttemptRecord, ChildRecord, ProgramStore

ROOT = Path(__file__).resolve().parents[1]
ITERATIONS = 10
LEASE_S = 3  # EVOLVE_LEASE_S: the killed run's lease lapses this long after its last renewal


def selection_state(selector: Selector) -> tuple[object, ...]:
    """Everything a selection decision reads, whole programs included (code, edit, artifacts)."""
    def programs(held: dict[int, Program]) -> list[Program]:
        return sorted(held.values(), key=lambda program: program.id)

    return ([programs(island.programs) for island in selector.islands], programs(selector.archive),
            sorted(selector.grid.cells.items()), selector.grid.occupied,
            {name: (r.low, r.high) for name, r in selector.grid.ranges.items()}, selector.seed_program,
            sorted(selector.isolated))


@pytest.mark.parametrize(("strategy", "restart_interval"), [("islands", 0), ("lexicase", 0), ("islands", 11)])
def test_a_resumed_selection_state_equals_the_uninterrupted_process_at_the_same_iteration(
        store_url: str, strategy: str, restart_interval: int) -> None:
    config = RunConfig.model_validate({"run": {"iterations": 80}, "selection": {
        "strategy": strategy, "islands": 3, "population_size": 6, "archive_size": 5, "migration_interval": 7,
        "restart_interval": restart_interval, "map_elites": {"bins": 4}}})
    problem = load_problem(config.run.problem, ROOT / "programs")
    store = ProgramStore(store_url)
    run_id = store.create_run("r", problem.name, "p", 0, config.model_dump_json(), 80)
    uninterrupted = Controller(config, problem, store, policy=None, run_id=run_id)  # type: ignore[arg-type]
    rng = random.Random(5)
    (seed,) = store.record_iteration(run_id, 0, [ChildRecord(problem.initial_code, None, 0, "", "", {
        name: 0.1 for name in problem.objectives}, 0.1, False)])
    uninterrupted._admit(seed)
    # iterations commit out of order as concurrent requests do, migrations every 7 (some with no child); scores
    # leave [0, 1] (the grid re-bins), code lengths vary, some are solved
    for iteration in sorted(range(1, 61), key=lambda i: i + rng.choice([0, 0, 2.5])):
        island, parent, _ = uninterrupted.selector.sample(iteration)
        children = [ChildRecord(code=f"{parent.code}\n# {iteration}.{k}" + "x" * rng.randint(0, 3000),
                                parent_id=parent.id, island=island, policy="p", edit=f"answer {iteration}.{k}",
                                scores={name: rng.uniform(-1, 1 + iteration / 20) for name in problem.objectives},
                                scalar=rng.uniform(-1, 1 + iteration / 20), solved=rng.random() < 0.05,
                                artifacts={"feedback": f"run {iteration}.{k}"})
                    for k in range(rng.randint(0, 2))]
        uninterrupted._commit(iteration, [AttemptRecord("policy_call", prompt="p"), *children], island, parent.id)
    assert bool(uninterrupted.selector.isolated) == bool(restart_interval)  # some island restarted
    resumed = Controller(config, problem, ProgramStore(store_url, mode="existing"),
                         policy=None, run_id=run_id)  # type: ignore[arg-type]
    assert resumed.restore()
    assert selection_state(resumed.selector) == selection_state(uninterrupted.selector)
    assert resumed._seen_code == uninterrupted._seen_code
    assert (resumed.stats.best, resumed.stats.first_solved) == (uninterrupted.stats.best,
                                                               uninterrupted.stats.first_solved)
    assert all(resumed.selector.sample(i) == uninterrupted.selector.sample(i) for i in range(61, 81))


def evolve(*args: str) -> list[str]:
    return [sys.executable, "-m", "evolve.cli.main", *args]


def snapshot(db: str) -> tuple[dict[int, str], set[int]]:
    """Programs (id -> code) and completed iterations, read straight from the database."""
    programs = dict(fetch(db, "SELECT id, code FROM programs"))
    iterations = {row[0] for row in fetch(
        db, "SELECT DISTINCT iteration FROM attempts WHERE kind != 'policy_call' AND iteration > 0")}
    return programs, iterations  # type: ignore[return-value]


@pytest.mark.slow
def test_kill_9_mid_run_then_resume_loses_nothing_and_honours_budget(store_url: str) -> None:
    db = store_url
    args = ["run", "--plain", "--config", str(ROOT / "evolve.toml"), "--db", db,
            "--iterations", str(ITERATIONS), "--seed", "3"]
    environment = {**os.environ, "EVOLVE_LEASE_S": str(LEASE_S)}
    process = subprocess.Popen(evolve(*args), cwd=ROOT, env=environment, stdout=subprocess.DEVNULL,
                               stderr=subprocess.PIPE, start_new_session=True)
    deadline = time.monotonic() + 600
    committed: set[int] = set()
    while time.monotonic() < deadline and process.poll() is None:
        time.sleep(0.5)
        if not is_sqlite(db) or Path(db).exists():
            try:
                _, committed = snapshot(db)
            except SQLAlchemyError:
                continue  # tables not created yet
            if len(committed) >= 3:
                break
    assert process.poll() is None, f"run ended before it could be killed: {process.stderr.read().decode()[-2000:]}"
    os.killpg(process.pid, signal.SIGKILL)
    process.wait()
    before_programs, before_iterations = snapshot(db)
    assert 3 <= len(before_iterations) < ITERATIONS
    time.sleep(LEASE_S)  # until then the killed process's lease refuses a resume (tests/test_lease.py)

    resumed = subprocess.run(evolve("run", "--plain", "--resume", "1", "--db", db), cwd=ROOT, env=environment,
                             capture_output=True, text=True, timeout=900)
    assert resumed.returncode == 0, resumed.stdout[-2000:] + resumed.stderr[-2000:]
    after_programs, after_iterations = snapshot(db)
    assert after_iterations == set(range(1, ITERATIONS + 1))
    assert all(after_programs.get(pid) == code for pid, code in before_programs.items())
    ((orphans,),) = fetch(
        db, "SELECT COUNT(*) FROM programs p LEFT JOIN scores s ON s.program_id = p.id WHERE s.program_id IS NULL")
    ((policy_calls,),) = fetch(db, "SELECT COUNT(*) FROM attempts WHERE kind = 'policy_call'")
    ((status,),) = fetch(db, "SELECT status FROM runs WHERE id = 1")
    assert orphans == 0
    assert policy_calls <= ITERATIONS  # every iteration's terminal records commit together
    assert status == "finished"


def stored_openai_run(db: Path, url: str) -> bytes:
    """A store holding run 1 (fizzbuzz, 2 iterations, never driven) of an openai policy at `url`; its bytes."""
    from evolve.config import load_config

    config = load_config(None, {"run.problem": "fizzbuzz", "run.programs_dir": str(ROOT / "programs"),
                                "run.iterations": 2, "run.concurrency": 1, "run.eval_workers": 1,
                                "policy.backend": "openai", "policy.url": url, "policy.model": "fake",
                                "policy.retries": 0})
    store = ProgramStore(str(db))
    store.create_run("r", "fizzbuzz", config.policy.name, 0, config.model_dump_json(), 2)
    store.set_run_status(1, "interrupted")
    store.close()
    return db.read_bytes()


def test_a_set_on_resume_applies_to_the_stored_config_of_its_own_backend(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    from fake_policy_server import FakePolicyServer

    from evolve.cli.main import main

    monkeypatch.setenv("COLUMNS", "1000")
    monkeypatch.chdir(tmp_path)  # no evolve.toml: the defaults' backend is hf, the stored run's openai
    db = tmp_path / "runs.db"
    before = stored_openai_run(db, "http://127.0.0.1:9/v1")  # nothing listens on port 9
    for flags, message in [(["--set", "policy.max_batch=4"], "policy.max_batch is an hf setting; this policy's "
                                                              "backend is openai"),
                           (["--set", "policy.timeout_s=1e300"], "--set policy.timeout_s=1e300: invalid value"),
                           (["--seed", "5"], "--seed: run 1 keeps its run.seed (0) when it resumes")]:
        code = main(["run", "--plain", "--resume", "1", "--db", str(db), *flags])
        text = " ".join(capsys.readouterr().out.split())
        assert code == 2 and text.startswith("config error:") and message in text, text
        assert db.read_bytes() == before  # refused before the store is written (no lease, no status)
    with FakePolicyServer(latency_s=0.0) as server:
        code = main(["run", "--plain", "--resume", "1", "--db", str(db), "--set", "policy.timeout_s=7",
                     "--set", f"policy.url={server.url}"])
        out = capsys.readouterr().out
        assert code == 0, out
        assert server.requests == 2  # the stored url (a dead port) was replaced by the --set
    store = ProgramStore(str(db), mode="read")
    assert store.get_run(1).status == "finished" and max(store.completed_iterations(1)) == 2
    assert "backend is hf" not in out
