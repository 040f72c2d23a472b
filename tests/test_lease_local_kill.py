"""A lease whose holder is provably dead is free at once: a real `evolve run` killed with SIGKILL is resumed right
away, on SQLite and PostgreSQL, while a live holder, or one on another host, still blocks until its lease expires.

The leases here last an hour (EVOLVE_LEASE_S), so nothing in these tests can pass by a lease lapsing. The policy is
a loopback server that holds its first request until the test lets it go: the first `evolve run` is killed while it
waits on it, holding its lease, with no dependence on how fast anything runs.
"""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import threading
from collections.abc import Iterator
from datetime import timedelta
from pathlib import Path

import pytest
from canned_http import ThreadedLoopbackServer, json_handler, models_reply
from store_backends import execute, fetch

from evolve.cli.main import main
from evolve.store.holders import holder_dead, new_holder, pid_namespace, start_ticks
from evolve.store.program_store import LeaseHeldError, ProgramStore
from evolve.store.tables import utc_now

ROOT = Path(__file__).resolve().parents[1]
ITERATIONS = 3
HOUR_S = 3600.0
NO_CODE_REPLY = {"choices": [{"message": {"content": "I have no code for this."}, "finish_reason": "stop"}],
                 "usage": {"prompt_tokens": 10, "completion_tokens": 7}}


class GatedPolicy:
    """Answers every request with no code once `gate` is set; until then requests wait. `asked` is set by the
    first request."""

    def __init__(self) -> None:
        self.asked, self.gate = threading.Event(), threading.Event()

    def reply(self, _request: bytes) -> dict[str, object]:
        self.asked.set()
        self.gate.wait(timeout=300)
        return NO_CODE_REPLY


@pytest.fixture
def gated() -> Iterator[tuple[GatedPolicy, str]]:
    policy = GatedPolicy()
    with ThreadedLoopbackServer(json_handler(lambda: models_reply("fake"), policy.reply), name="gated-policy") as server:
        yield policy, server.url
        policy.gate.set()


def evolve_run(db: str, url: str, *extra: str) -> list[str]:
    return [sys.executable, "-m", "evolve.cli.main", "run", "--plain", "--db", db, "--problem", "fizzbuzz",
            "--iterations", str(ITERATIONS), "--set", "policy.backend='openai'", "--set", f"policy.url='{url}'",
            "--set", "policy.model='fake'", "--set", "run.concurrency=1", *extra]


def hour_lease_env() -> dict[str, str]:
    return {**os.environ, "EVOLVE_LEASE_S": str(HOUR_S), "COLUMNS": "500"}


def test_a_run_killed_with_sigkill_is_resumed_at_once_though_its_lease_has_an_hour_left(
        store_url: str, gated: tuple[GatedPolicy, str], tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    policy, url = gated
    log = tmp_path / "first.log"
    with log.open("w") as out:
        first = subprocess.Popen(evolve_run(store_url, url), cwd=ROOT, env=hour_lease_env(), stdout=out,
                                 stderr=subprocess.STDOUT, start_new_session=True)
    try:
        assert policy.asked.wait(timeout=300), f"the run never asked its policy: {log.read_text()}"
        ((holder,),) = fetch(store_url, "SELECT holder FROM run_leases WHERE run_id = 1")
        assert holder.split(":")[1] == str(first.pid)  # the run drives under its lease while it waits on the policy
        os.kill(first.pid, signal.SIGKILL)  # kill -9, as a user would
        first.wait()
    finally:
        try:
            os.killpg(first.pid, signal.SIGKILL)  # its evaluator processes, if any
        except ProcessLookupError:
            pass
    ((expires_at,),) = fetch(store_url, "SELECT expires_at FROM run_leases WHERE run_id = 1")
    assert expires_at is not None  # the dead process's lease is still there, unexpired for an hour

    assert main(["runs", "--db", store_url]) == 0
    listed = next(line for line in capsys.readouterr().out.splitlines() if line.startswith("│ 1 "))
    assert listed.split("│")[5].strip() == "killed"  # not "running": its driver is gone

    policy.gate.set()
    resumed = subprocess.run(evolve_run(store_url, url, "--resume", "1"), cwd=ROOT, env=hour_lease_env(),
                             capture_output=True, text=True, timeout=300)
    assert resumed.returncode == 0, resumed.stdout + resumed.stderr
    assert "is being driven by" not in resumed.stdout + resumed.stderr
    ((status,),) = fetch(store_url, "SELECT status FROM runs WHERE id = 1")
    assert status == "finished"


def put_holder(db: str, run_id: int, holder: str) -> None:
    """The run's lease as if `holder` had just taken it for an hour."""
    now = utc_now()
    execute(db, "UPDATE run_leases SET holder = :holder, renewed_at = :now, expires_at = :expires WHERE run_id = :run",
            holder=holder, run=run_id, now=now, expires=now + timedelta(seconds=HOUR_S))


def holder_of(pid: int, start: int | None, host: str | None = None) -> str:
    name = f"{host or socket.gethostname()}:{pid}:cafe0123"
    if start is not None:
        name += f";start={start}"
    return name + f";pidns={pid_namespace()}"


@pytest.fixture
def leased_run(store_url: str) -> Iterator[tuple[ProgramStore, int]]:
    store = ProgramStore(store_url)
    run_id = store.create_run("r", "p", "pol", 0, "{}", 5)
    store.take_lease(run_id, lease_s=HOUR_S)
    store.release_lease(run_id)  # the lease row exists, free
    yield store, run_id
    store.close()


def test_a_live_holder_on_this_host_still_blocks_and_is_free_once_its_process_is_gone(
        store_url: str, leased_run: tuple[ProgramStore, int]) -> None:
    store, run_id = leased_run
    sleeper = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(600)"])
    try:
        start = start_ticks(sleeper.pid)
        put_holder(store_url, run_id, holder_of(sleeper.pid, start))
        with pytest.raises(LeaseHeldError, match=f"run {run_id} is being driven by .*:{sleeper.pid} "):
            store.take_lease(run_id, lease_s=HOUR_S)
    finally:
        sleeper.kill()
        sleeper.wait()
    store.take_lease(run_id, lease_s=HOUR_S)  # its process is gone: free at once
    assert store.lease(run_id).holder == store.holder


def test_a_live_store_of_this_very_process_blocks_another(store_url: str) -> None:
    first, second = ProgramStore(store_url), ProgramStore(store_url)
    run_id = first.create_run("r", "p", "pol", 0, "{}", 5)
    first.take_lease(run_id, lease_s=HOUR_S)
    assert not holder_dead(first.holder)
    with pytest.raises(LeaseHeldError):
        second.take_lease(run_id, lease_s=HOUR_S)


def test_a_holder_recorded_with_another_start_time_for_a_live_pid_is_free(
        store_url: str, leased_run: tuple[ProgramStore, int]) -> None:
    store, run_id = leased_run
    own_start = start_ticks(os.getpid())
    if own_start is None:
        pytest.skip("no /proc/PID/stat here: start times are not recorded")
    put_holder(store_url, run_id, holder_of(os.getpid(), own_start + 1))  # this pid, another (earlier) process
    store.take_lease(run_id, lease_s=HOUR_S)
    assert store.lease(run_id).holder == store.holder


@pytest.mark.parametrize("holder", [
    holder_of(2**22 + 17, 5, host="another-host"),  # another host: its pid means nothing here
    f"{socket.gethostname()}:{2**22 + 17}:cafe0123",  # named before start times and namespaces were recorded
    f"{socket.gethostname()}:{2**22 + 17}:cafe0123;start=5;pidns=1",  # another PID namespace (a container)
])
def test_a_holder_that_cannot_be_judged_from_here_waits_for_its_lease_to_expire(
        store_url: str, leased_run: tuple[ProgramStore, int], holder: str) -> None:
    store, run_id = leased_run
    put_holder(store_url, run_id, holder)
    with pytest.raises(LeaseHeldError):
        store.take_lease(run_id, lease_s=HOUR_S)


def test_this_process_names_itself_with_its_start_time_and_pid_namespace() -> None:
    name = new_holder()
    assert name.startswith(f"{socket.gethostname()}:{os.getpid()}:")
    if start_ticks(os.getpid()) is not None:
        assert f";start={start_ticks(os.getpid())}" in name and f";pidns={pid_namespace()}" in name
