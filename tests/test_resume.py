"""Resume after a real kill -9 of a real run: nothing committed is lost and the budget is honoured."""

from __future__ import annotations

import os
import signal
import sqlite3
import subprocess
import sys
import time
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
ITERATIONS = 10
LEASE_S = 3  # EVOLVE_LEASE_S: the killed run's lease lapses this long after its last renewal


def evolve(*args: str) -> list[str]:
    return [sys.executable, "-m", "evolve.cli.main", *args]


def snapshot(db: Path) -> tuple[dict[int, str], set[int]]:
    """Programs (id -> code) and completed iterations, read straight from the SQLite file."""
    with sqlite3.connect(db) as connection:
        programs = dict(connection.execute("SELECT id, code FROM programs").fetchall())
        iterations = {
            row[0]
            for row in connection.execute(
                "SELECT DISTINCT iteration FROM attempts WHERE kind != 'policy_call' AND iteration > 0"
            )
        }
    return programs, iterations


@pytest.mark.slow
def test_kill_9_mid_run_then_resume_loses_nothing_and_honours_budget(tmp_path: Path) -> None:
    db = tmp_path / "run.db"
    args = ["run", "--plain", "--config", str(ROOT / "evolve.toml"), "--db", str(db),
            "--iterations", str(ITERATIONS), "--seed", "3"]
    environment = {**os.environ, "EVOLVE_LEASE_S": str(LEASE_S)}
    process = subprocess.Popen(evolve(*args), cwd=ROOT, env=environment, stdout=subprocess.DEVNULL,
                               stderr=subprocess.PIPE, start_new_session=True)
    deadline = time.monotonic() + 600
    committed: set[int] = set()
    while time.monotonic() < deadline and process.poll() is None:
        time.sleep(0.5)
        if db.exists():
            try:
                _, committed = snapshot(db)
            except sqlite3.OperationalError:
                continue  # tables not created yet
            if len(committed) >= 3:
                break
    assert process.poll() is None, f"run ended before it could be killed: {process.stderr.read().decode()[-2000:]}"
    os.killpg(process.pid, signal.SIGKILL)
    process.wait()
    before_programs, before_iterations = snapshot(db)
    assert 3 <= len(before_iterations) < ITERATIONS
    time.sleep(LEASE_S)  # until then the killed process's lease refuses a resume (tests/test_lease.py)

    resumed = subprocess.run(evolve("run", "--plain", "--resume", "1", "--db", str(db)), cwd=ROOT, env=environment,
                             capture_output=True, text=True, timeout=900)
    assert resumed.returncode == 0, resumed.stdout[-2000:] + resumed.stderr[-2000:]
    after_programs, after_iterations = snapshot(db)
    assert after_iterations == set(range(1, ITERATIONS + 1))
    assert all(after_programs.get(pid) == code for pid, code in before_programs.items())
    with sqlite3.connect(db) as connection:
        orphans = connection.execute(
            "SELECT COUNT(*) FROM programs p LEFT JOIN scores s ON s.program_id = p.id WHERE s.program_id IS NULL"
        ).fetchone()[0]
        policy_calls = connection.execute("SELECT COUNT(*) FROM attempts WHERE kind = 'policy_call'").fetchone()[0]
        status = connection.execute("SELECT status FROM runs WHERE id = 1").fetchone()[0]
    assert orphans == 0
    assert policy_calls <= ITERATIONS  # every iteration's terminal records commit together
    assert status == "finished"
