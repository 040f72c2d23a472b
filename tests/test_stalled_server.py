"""A server that accepts and never answers stops a run soon, with the reason; one that is slow but alive does not.

The servers are real sockets on 127.0.0.1. Nothing here measures time: the stall deadline is set short where a test
needs it, and the slow server answers only after the client has checked it for life.
"""

from __future__ import annotations

import asyncio
import socket
import sqlite3
import subprocess
import sys
import threading
from collections.abc import Iterator
from pathlib import Path
from types import TracebackType
from typing import Any

import pytest
from canned_http import ThreadedLoopbackServer, chat_reply, json_handler

from evolve.policies.base import PolicyUnavailable
from evolve.policies.openai_api import OpenAIPolicy
from evolve.policies.openai_checks import PROBE_S, stall_deadline_s
from evolve.policy_config import OpenAIPolicySection
from evolve.search.prompts import Prompt

ROOT = Path(__file__).resolve().parents[1]
PROMPT = Prompt([{"role": "user", "content": "hi"}], "def f(x):", ("\ndef",), 16)
HOLD_S = 120.0  # the longest a silent connection is held, should a test not close the server


class SilentServer:
    """Accepts every connection and reads what it is sent, but never answers; counts the request lines it saw."""

    def __init__(self) -> None:
        self.listener = socket.create_server(("127.0.0.1", 0))
        self.url = f"http://127.0.0.1:{self.listener.getsockname()[1]}/v1"
        self.request_lines: list[str] = []
        self._closing = threading.Event()
        self._connections: list[socket.socket] = []
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self) -> None:
        while not self._closing.is_set():
            try:
                connection, _ = self.listener.accept()
            except OSError:
                return
            self._connections.append(connection)
            threading.Thread(target=self._hold, args=(connection,), daemon=True).start()

    def _hold(self, connection: socket.socket) -> None:
        connection.settimeout(HOLD_S)
        try:
            head = connection.recv(65536).decode("latin-1")
            if head:
                self.request_lines.append(head.split("\r\n", 1)[0])
            self._closing.wait(HOLD_S)
        except OSError:
            pass
        finally:
            connection.close()

    def close(self) -> None:
        self._closing.set()
        self.listener.close()
        for connection in self._connections:
            try:
                connection.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass


class ProbedThenAnswering(ThreadedLoopbackServer):
    """An OpenAI chat endpoint that answers a completion only once someone has sent it a GET (the client's check for
    life): a slow server, alive, whose answer comes after the stall deadline whatever the machine's speed."""

    def __init__(self) -> None:
        self.probed = threading.Event()
        self.posts = 0
        super().__init__(json_handler(self._probe, self._answer), name="probed-then-answering")

    def _probe(self) -> dict[str, Any]:
        self.probed.set()
        return {}

    def _answer(self, _request: bytes) -> dict[str, Any]:
        self.posts += 1
        self.probed.wait(HOLD_S)
        return chat_reply("\n    return 2 * x", prompt_tokens=3, completion_tokens=5)

    def __exit__(self, kind: type[BaseException] | None, error: BaseException | None,
                 trace: TracebackType | None) -> None:
        self.probed.set()  # a request still waiting ends before the server shuts down
        super().__exit__(kind, error, trace)


@pytest.fixture
def silent() -> Iterator[SilentServer]:
    server = SilentServer()
    yield server
    server.close()


async def ask(policy: OpenAIPolicy) -> object:
    try:
        return await policy.generate(PROMPT, 1)
    finally:
        await policy.close()


def test_a_stalled_server_stops_the_policy_after_one_request_without_retries(silent: SilentServer) -> None:
    policy = OpenAIPolicy("p", silent.url, model="m", stall_timeout_s=0.2, timeout_s=300, retries=3, backoff_s=0.01)
    with pytest.raises(PolicyUnavailable, match="the server is stalled"):
        asyncio.run(ask(policy))
    assert policy.requests_sent == 1
    assert sorted(line.split(" ")[0] for line in silent.request_lines) == ["GET", "POST"]  # the request, the check for life


def test_a_slow_server_that_is_alive_keeps_its_request(tmp_path: Path) -> None:
    with ProbedThenAnswering() as server:
        policy = OpenAIPolicy("p", server.url, model="m", stall_timeout_s=0.2, timeout_s=300, retries=0)
        completion = asyncio.run(ask(policy))
    assert completion.text == "\n    return 2 * x"  # type: ignore[attr-defined]
    assert server.posts == 1 and policy.requests_sent == 1  # waited on, not cut and sent again


def test_the_default_stall_deadline_follows_the_request_size_and_stops_a_default_run_within_two_minutes() -> None:
    section = OpenAIPolicySection(url="http://127.0.0.1:8000/v1")
    assert section.stall_timeout_s == 0  # derived per request
    assert stall_deadline_s(16) < stall_deadline_s(384) < stall_deadline_s(3 * 384)
    # the largest request of a default policy (one answer of at most max_new_tokens), then the check for life
    assert stall_deadline_s(section.max_new_tokens) + PROBE_S <= 120
    assert stall_deadline_s(section.max_new_tokens) < section.timeout_s  # a live server still gets timeout_s


def test_evolve_run_against_a_stalled_server_stops_resumable_with_the_reason(tmp_path: Path,
                                                                            silent: SilentServer) -> None:
    db = tmp_path / "stalled.db"
    settings = ['policy.backend="openai"', f'policy.url="{silent.url}"', 'policy.model="m"',
                "policy.stall_timeout_s=0.5", "run.concurrency=2"]
    result = subprocess.run(
        [sys.executable, "-m", "evolve.cli.main", "run", "--plain", "--db", str(db), "--config",
         str(ROOT / "evolve.toml"), "--iterations", "4", *[f"--set={setting}" for setting in settings]],
        cwd=ROOT, capture_output=True, text=True, timeout=600)
    output = result.stdout + result.stderr
    assert result.returncode == 1 and "the server is stalled" in output, output[-3000:]
    with sqlite3.connect(db) as connection:
        assert connection.execute("SELECT status FROM runs").fetchall() == [("interrupted",)]
