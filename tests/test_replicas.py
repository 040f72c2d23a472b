"""Several servers per policy: requests spread over replicas by requests in flight; a replica that dies is rested
while the others answer, and used again once back. Real loopback server processes (tests/fake_replica.py)."""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from evolve.policies.base import PolicyUnavailable
from evolve.policies.openai_api import OpenAIPolicy
from evolve.ports import free_port
from evolve.search.prompts import Prompt
from evolve.store.program_store import ProgramStore

ROOT = Path(__file__).resolve().parents[1]
REPLICA = ROOT / "tests" / "fake_replica.py"
PROMPT = Prompt(messages=[{"role": "user", "content": "write f"}], prefill="", stop=(), max_new_tokens=16)


@dataclass
class FakeReplica:
    """One replica server process on a fixed port, which a test may kill and start again."""

    port: int
    delay_s: float
    log: Path
    process: subprocess.Popen[str] | None = None

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}/v1"

    def start(self) -> FakeReplica:
        self.process = subprocess.Popen([sys.executable, str(REPLICA), "--port", str(self.port), "--delay",
                                         str(self.delay_s), "--log", str(self.log)], stdout=subprocess.PIPE, text=True)
        assert self.process.stdout is not None and self.process.stdout.readline() == "ready\n"
        return self

    def kill(self) -> None:
        assert self.process is not None
        os.kill(self.process.pid, signal.SIGKILL)
        self.process.wait()

    def served(self) -> list[float]:
        """The monotonic time of every request it answered."""
        return [float(line) for line in self.log.read_text().split()] if self.log.exists() else []


@pytest.fixture
def replicas(tmp_path: Path) -> Iterator[Callable[..., FakeReplica]]:
    started: list[FakeReplica] = []

    def start(delay_s: float = 0.1) -> FakeReplica:
        replica = FakeReplica(free_port(), delay_s, tmp_path / f"replica{len(started)}.log").start()
        started.append(replica)
        return replica

    yield start
    for replica in started:
        if replica.process is not None and replica.process.poll() is None:
            replica.kill()


def policy(urls: list[str], **settings: float) -> OpenAIPolicy:
    return OpenAIPolicy("fake", urls, model="fake", timeout_s=10, retries=settings.pop("retries", 2),  # type: ignore[arg-type]
                        backoff_s=0.05, **settings)


def test_concurrent_requests_go_to_the_replica_with_the_fewest_in_flight(
        replicas: Callable[..., FakeReplica]) -> None:
    servers = [replicas(delay_s=0.5) for _ in range(3)]
    client = policy([server.url for server in servers])

    async def six_at_once() -> None:
        await asyncio.gather(*(client.generate(PROMPT, seed) for seed in range(6)))
        await client.close()

    asyncio.run(six_at_once())
    assert [len(server.served()) for server in servers] == [2, 2, 2]
    assert client.replicas.sent_by_url() == {server.url: 2 for server in servers}


def test_a_slow_replica_gets_fewer_requests_than_a_fast_one(replicas: Callable[..., FakeReplica]) -> None:
    slow, fast = replicas(delay_s=0.8), replicas(delay_s=0.02)
    client = policy([slow.url, fast.url])

    async def four_workers() -> None:  # as a run with concurrency 4 and a budget of 40 requests
        budget = list(range(40))

        async def worker() -> None:
            while budget:
                await client.generate(PROMPT, budget.pop())

        await asyncio.gather(*(worker() for _ in range(4)))
        await client.close()

    asyncio.run(four_workers())
    assert len(slow.served()) + len(fast.served()) == 40
    # the slow replica holds its requests longer, so it has more in flight and is picked less
    assert len(fast.served()) > 3 * len(slow.served()), (len(slow.served()), len(fast.served()))


def test_when_every_replica_is_down_the_usual_retries_end_in_policy_unavailable(
        replicas: Callable[..., FakeReplica]) -> None:
    dead = [replicas(), replicas()]
    for server in dead:
        server.kill()
    client = policy([server.url for server in dead], retries=2, replica_retry_s=0.05)

    async def ask() -> str:
        try:
            await client.generate(PROMPT, 0)
        except PolicyUnavailable as exc:
            return str(exc)
        finally:
            await client.close()
        return "answered"

    message = asyncio.run(ask())
    assert message.startswith("policy fake: /chat/completions on all 2 replicas failed 3 times; last: ConnectError")
    assert sum(client.replicas.sent_by_url().values()) >= 3


ITERATIONS = 60


def test_a_run_whose_replica_dies_finishes_its_budget_on_the_other_and_uses_it_again_once_back(
        tmp_path: Path, replicas: Callable[..., FakeReplica]) -> None:
    steady, flaky = replicas(delay_s=0.1), replicas(delay_s=0.1)
    db = tmp_path / "run.db"
    run = subprocess.Popen(
        [sys.executable, "-m", "evolve.cli.main", "run", "--plain", "--db", str(db), "--problem", "fizzbuzz",
         "--iterations", str(ITERATIONS), "--set", "policy.backend='openai'", "--set",
         f"policy.url=['{steady.url}', '{flaky.url}']", "--set", "policy.model='fake'", "--set",
         "policy.replica_retry_s=0.3", "--set", "policy.retries=0", "--set", "run.concurrency=2"],
        cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)

    def wait_for(condition: Callable[[], bool]) -> None:
        deadline = time.monotonic() + 60
        while not condition():
            assert run.poll() is None and time.monotonic() < deadline, "the run ended before the replica came back"
            time.sleep(0.02)

    wait_for(lambda: len(flaky.served()) >= 3)
    flaky.kill()  # mid-run, possibly mid-request
    killed_at = time.monotonic()
    wait_for(lambda: time.monotonic() > killed_at + 0.5)  # the run goes on on the steady replica meanwhile
    served_before_death = len(flaky.served())
    flaky.start()  # back, on the same port
    output, _ = run.communicate(timeout=120)
    assert run.returncode == 0, output[-3000:]

    store = ProgramStore(str(db), mode="read")
    (info,) = store.list_runs()
    assert info.status == "finished"
    assert store.completed_iterations(info.id) == set(range(ITERATIONS + 1))  # the exact budget, seed included
    counts = store.attempt_counts(info.id)
    assert counts.get("policy_call") == ITERATIONS and "policy_error" not in counts, counts
    answered_after_return = len(flaky.served()) - served_before_death
    assert answered_after_return >= 1  # the dead replica was tried again and used
    # every answer made one iteration (a reply the kill cut off after its log line may count once more)
    assert ITERATIONS <= len(steady.served()) + len(flaky.served()) <= ITERATIONS + 1


def test_a_policy_lists_its_replicas_in_url_and_a_bad_list_is_one_config_line(tmp_path: Path) -> None:
    from evolve.config import ConfigError, load_config

    def load(url: str, extra: str = "") -> object:
        path = tmp_path / "evolve.toml"
        path.write_text(f'[policy]\nbackend = "openai"\nurl = {url}\n{extra}')
        return load_config(path)

    config = load('["http://a:8000/v1", "http://b:8000/v1"]', "replica_retry_s = 2.5\n")
    assert config.policy.replica_urls() == ["http://a:8000/v1", "http://b:8000/v1"]  # type: ignore[attr-defined]
    assert load('"http://a:8000/v1"').policy.replica_urls() == ["http://a:8000/v1"]  # type: ignore[attr-defined]
    for url, fragment in [("[]", "needs url"), ('["http://a/v1", "http://a/v1"]', "lists a replica twice"),
                          ('["http://a/v1", ""]', "none empty")]:
        with pytest.raises(ConfigError, match=fragment) as refused:
            load(url)
        assert "\n" not in str(refused.value)
