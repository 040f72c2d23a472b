"""One writer per run: the run lease in the store, against real `evolve run` processes and a real store: a SQLite
file, and a PostgreSQL database (store_url in tests/conftest.py), where two processes stand for two machines.

The policy is a tiny OpenAI-compatible server on loopback (a thread of this test process) that answers every
request after a short delay with a completion holding no code; each iteration is then a policy call and an
`edit_failed` outcome, so a run's pace is the server's delay and the tests take seconds. EVOLVE_LEASE_S makes the
leases short so that a killed holder's lease lapses quickly.
"""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
from canned_http import ThreadedLoopbackServer, json_handler, models_reply
from sqlalchemy import inspect
from sqlalchemy.exc import SQLAlchemyError
from store_backends import execute, fetch

from evolve.cli.main import main
from evolve.store.program_store import ChildRecord, LeaseHeldError, LeaseLostError, ProgramStore

ROOT = Path(__file__).resolve().parents[1]
ITERATIONS = 24
REPLY_DELAY_S = 0.2  # 24 iterations: the winner of the race drives for seconds, the loser meets its lease
LEASE_S = 3.0


NO_CODE_REPLY = {"choices": [{"message": {"content": "I have no code for this."}, "finish_reason": "stop"}],
                 "usage": {"prompt_tokens": 10, "completion_tokens": 7}}


def _no_code_reply(_request: bytes) -> dict[str, object]:
    time.sleep(REPLY_DELAY_S)
    return NO_CODE_REPLY


@pytest.fixture(scope="module")
def policy_url() -> Iterator[str]:
    with ThreadedLoopbackServer(json_handler(lambda: models_reply("fake"), _no_code_reply), name="lease-policy") as server:
        yield server.url


def evolve_run(db: str, url: str, *extra: str) -> list[str]:
    return [sys.executable, "-m", "evolve.cli.main", "run", "--plain", "--db", str(db), "--problem", "fizzbuzz",
            "--iterations", str(ITERATIONS), "--set", "policy.backend='openai'", "--set", f"policy.url='{url}'",
            "--set", "policy.model='fake'", "--set", "run.concurrency=1", *extra]


def lease_env() -> dict[str, str]:
    return {**os.environ, "EVOLVE_LEASE_S": str(LEASE_S), "COLUMNS": "500"}  # no wrapping of the one line


def committed_iterations(db: str) -> list[int]:
    """The iteration of every terminal attempt >= 1 (one per answer; here one answer per iteration)."""
    return [row[0] for row in fetch(
        db, "SELECT iteration FROM attempts WHERE kind != 'policy_call' AND iteration > 0 ORDER BY iteration")]


def test_two_resumes_racing_for_a_killed_run_one_drives_it_the_other_is_refused_in_one_line(
        store_url: str, policy_url: str) -> None:
    db = store_url
    first = subprocess.Popen(evolve_run(db, policy_url), cwd=ROOT, env=lease_env(), stdout=subprocess.DEVNULL,
                             stderr=subprocess.DEVNULL, start_new_session=True)
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline and first.poll() is None:
        time.sleep(0.1)
        try:
            if len(committed_iterations(db)) >= 3:
                break
        except SQLAlchemyError:
            continue  # the tables are not there yet
    assert first.poll() is None, "the first run ended before it could be killed"
    os.killpg(first.pid, signal.SIGKILL)
    first.wait()
    before = committed_iterations(db)
    assert 3 <= len(before) < ITERATIONS

    # the dead holder's lease is still there, live for up to LEASE_S
    ((holder,),) = fetch(db, "SELECT holder FROM run_leases WHERE run_id = 1")
    assert holder.split(":")[1] == str(first.pid)
    time.sleep(LEASE_S)  # now it has lapsed: the race below is between the two resumes only

    resumes = [subprocess.Popen(evolve_run(db, policy_url, "--resume", "1"), cwd=ROOT, env=lease_env(),
                                stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True) for _ in range(2)]
    outputs = [process.communicate(timeout=120)[0] for process in resumes]
    codes = sorted(process.returncode for process in resumes)
    assert codes == [0, 1], outputs
    refused = next(out for process, out in zip(resumes, outputs, strict=True) if process.returncode == 1)
    driver = next(process for process in resumes if process.returncode == 0)
    summary = " ".join(next(out for process, out in zip(resumes, outputs, strict=True) if process is driver).split())
    # the end-of-run figures count the whole run from the store, not only the resumed process's part
    assert f"iterations {ITERATIONS}/{ITERATIONS}" in summary and f"edit_failed {ITERATIONS}" in summary, summary
    assert f"{ITERATIONS * 7} tokens" in summary, summary
    assert refused.strip().count("\n") == 0, refused  # one line
    assert f"run 1 is being driven by {os.uname().nodename}:{driver.pid} (lease renewed" in refused, refused
    assert "Traceback" not in refused

    after = committed_iterations(db)
    assert after == list(range(1, ITERATIONS + 1))  # the budget exactly, no iteration twice
    ((calls,),) = fetch(db, "SELECT COUNT(*) FROM attempts WHERE kind = 'policy_call'")
    ((status,),) = fetch(db, "SELECT status FROM runs WHERE id = 1")
    (lease,) = fetch(db, "SELECT holder FROM run_leases WHERE run_id = 1")
    assert calls == ITERATIONS and status == "finished"
    assert lease == (None,)  # released at the end


def seed(store: ProgramStore, run_id: int, iteration: int = 0) -> list[int]:
    child = ChildRecord(code=f"x = {iteration}\n", parent_id=None, island=0, policy="", edit="", scores={"a": 1.0},
                        scalar=1.0, solved=False)
    return [program.id for program in store.record_iteration(run_id, iteration, [child])]


def test_a_second_writer_is_refused_while_the_lease_lives_and_takes_it_once_it_lapses(store_url: str) -> None:
    db = store_url
    first, second = ProgramStore(db), ProgramStore(db)
    run_id = first.create_run("r", "p", "pol", 0, "{}", 5)
    first.take_lease(run_id, lease_s=600)  # live however slow this machine is while the second one asks
    with pytest.raises(LeaseHeldError) as refused:
        second.take_lease(run_id, lease_s=0.6)
    message = str(refused.value)
    assert "\n" not in message and message.startswith(f"run {run_id} is being driven by {os.uname().nodename}:"
                                                      f"{os.getpid()} (lease renewed ")
    assert re.search(r"\(lease renewed \d+ s ago, expires in \d+", message), message
    seed(first, run_id)  # the holder writes; its commits renew the lease
    first.take_lease(run_id, lease_s=0.6)  # renewed short, then the holder stops renewing (as if killed)
    time.sleep(0.8)  # longer than the lease, whatever the load: it lapses
    second.take_lease(run_id, lease_s=0.6)
    with pytest.raises(LeaseLostError, match=f"run {run_id} was taken over by"):
        seed(first, run_id, 1)  # the old holder's write is refused and rolled back whole
    with pytest.raises(LeaseLostError):
        first.set_run_status(run_id, "failed")
    assert [p.iteration for p in second.programs(run_id)] == [0]
    assert second.get_run(run_id).status == "running"
    second.release_lease(run_id)
    assert second.lease(run_id) is None
    first.release_lease(run_id)  # giving up a lease taken over is harmless
    first.take_lease(run_id, lease_s=0.6)  # a released lease is free at once


def test_the_heartbeat_keeps_a_lease_alive_past_its_length_while_nothing_is_committed(store_url: str) -> None:
    db = store_url
    driver, other = ProgramStore(db), ProgramStore(db)
    run_id = driver.create_run("r", "p", "pol", 0, "{}", 5)
    lease_s = 2.0
    with driver.driving(run_id, lease_s=lease_s):
        first = driver.lease(run_id)
        assert first is not None
        # an iteration longer than the lease: wait (however slowly the heartbeat runs under load) until the lease
        # first taken would have lapsed and the heartbeat has renewed it since, then try while it is fresh
        deadline = time.monotonic() + 600
        while time.monotonic() < deadline:
            now, held = datetime.now(UTC), driver.lease(run_id)
            assert held is not None and held.holder == first.holder
            if now > first.expires_at and held.expires_at - now > timedelta(seconds=lease_s / 2):
                break
            time.sleep(0.05)
        with pytest.raises(LeaseHeldError):
            other.take_lease(run_id, lease_s=lease_s)
        seed(driver, run_id)
    other.take_lease(run_id, lease_s=lease_s)  # released on leaving the block


def test_runs_lists_a_running_run_as_killed_once_no_process_holds_its_lease(
        store_url: str, capsys: pytest.CaptureFixture[str]) -> None:
    db = store_url
    store = ProgramStore(db)
    run_id = store.create_run("r", "p", "pol", 0, "{}", 5)

    def listed_status() -> str:
        assert main(["runs", "--db", db]) == 0
        row = next(line for line in capsys.readouterr().out.splitlines() if line.startswith(f"│ {run_id} "))
        return row.split("│")[5].strip()

    store.take_lease(run_id, lease_s=30)
    assert listed_status() == "running"
    store.release_lease(run_id)  # as a killed driver's lease once it lapses
    assert listed_status() == "killed"
    store.set_run_status(run_id, "finished")
    assert listed_status() == "finished"


def test_an_old_store_without_the_lease_table_gets_it_on_a_writable_open(store_url: str) -> None:
    db = store_url
    run_id = ProgramStore(db).create_run("r", "p", "pol", 0, "{}", 5)
    execute(db, "DROP TABLE run_leases")
    reader = ProgramStore(db, mode="read")
    assert reader.get_run(run_id).name == "r"  # read-only: opens, adds nothing
    assert not inspect(reader.engine).has_table("run_leases")
    store = ProgramStore(db, mode="existing")
    with store.driving(run_id):
        assert store.lease(run_id) is not None


@pytest.mark.parametrize("setting", [["--problem", "no_such_problem"],
                                     ["--set", "policy.template='/nonexistent/template-folder'"]])
def test_a_run_that_cannot_start_leaves_no_run_behind(tmp_path: Path, setting: list[str],
                                                      capsys: pytest.CaptureFixture[str]) -> None:
    db = tmp_path / "phantom.db"
    code = main(["run", "--plain", "--db", str(db), "--iterations", "5", *setting])
    out = capsys.readouterr().out
    assert code == 1 and "Traceback" not in out, out
    assert not db.exists() or ProgramStore(str(db), mode="read").list_runs() == []


def test_on_postgresql_racing_writers_get_one_lease_and_a_lapsed_one_is_taken_over(postgresql_url: str) -> None:
    stores = [ProgramStore(postgresql_url) for _ in range(6)]
    run_id = stores[0].create_run("pg", "p", "pol", 0, "{}", 5)
    winners: list[ProgramStore] = []

    def take(store: ProgramStore) -> None:
        try:
            store.take_lease(run_id, lease_s=600)  # live however slow this machine is while the others ask
            winners.append(store)
        except LeaseHeldError:
            pass

    threads = [threading.Thread(target=take, args=(store,)) for store in stores]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert len(winners) == 1  # the first take of a run also creates its lease row: still one winner
    (holder,) = winners
    other = next(store for store in stores if store is not holder)
    seed(holder, run_id)
    holder.take_lease(run_id, lease_s=0.6)  # renewed short, then the holder stops renewing (as if killed)
    time.sleep(0.8)  # longer than the lease, whatever the load: it lapses
    other.take_lease(run_id, lease_s=0.6)
    with pytest.raises(LeaseLostError):
        seed(holder, run_id, 1)
    assert [p.iteration for p in other.programs(run_id)] == [0]
    for store in stores:
        store.close()


def fake_policy_settings(url: str) -> list[str]:
    return ["--set", "policy.backend='openai'", "--set", f"policy.url='{url}'", "--set", "policy.model='fake'"]


def test_an_experiment_cell_another_process_drives_is_refused_and_the_other_cells_run(
        tmp_path: Path, policy_url: str, capsys: pytest.CaptureFixture[str]) -> None:
    from evolve.engine.experiment_spec import load_experiment

    path = tmp_path / "exp.toml"
    path.write_text(f'problems = ["fizzbuzz"]\nseeds = [0, 1]\niterations = 2\n[run]\nprograms_dir = '
                    f'"{ROOT / "programs"}"\n[[policies]]\nname = "fake"\nbackend = "openai"\nurl = "{policy_url}"\n'
                    'model = "fake"\n')
    spec = load_experiment(path)
    other = ProgramStore(spec.db)
    other.save_experiment(spec.name, spec.model_dump_json())
    config = spec.cell_config("fizzbuzz", "fake", 0)
    held = other.create_run(config.run.name, "fizzbuzz", "fake", 0, config.model_dump_json(), 2,
                            experiment=spec.name)
    other.set_run_status(held, "interrupted")
    with other.driving(held):
        code = main(["experiment", str(path), "--plain"])
    out = " ".join(capsys.readouterr().out.split())
    assert code == 1 and f"run {held} is being driven by" in out and "Traceback" not in out, out
    store = ProgramStore(spec.db)
    assert store.get_run(held).status == "interrupted" and store.completed_iterations(held) == set()
    (ran,) = [cell.run_id for cell in store.experiment_cells(spec.name) if cell.run_id != held]
    assert store.get_run(ran).status == "finished" and store.completed_iterations(ran) == {0, 1, 2}


def test_a_sampling_run_another_process_drives_is_refused_before_anything_loads(
        tmp_path: Path, policy_url: str, capsys: pytest.CaptureFixture[str]) -> None:
    db = tmp_path / "s.db"
    sample = ["sample", "--problems", "fizzbuzz", "--programs-dir", str(ROOT / "programs"), "--db", str(db), "-k", "1",
              *fake_policy_settings(policy_url)]
    assert main([*sample, "-n", "1"]) == 0
    other = ProgramStore(str(db))
    (run,) = other.list_runs()
    with other.driving(run.id):
        code = main([*sample, "-n", "2"])
    out = " ".join(capsys.readouterr().out.split())
    assert code == 1 and f"run {run.id} ({run.name}) is being sampled by" in out, out
    assert other.get_run(run.id).iterations_target == 1  # not extended by the refused command
