"""openai_api.py against scripted HTTP replies: what is retried, what stops the run, what fails one request."""

from __future__ import annotations

import asyncio
import json
import threading
import time
from collections.abc import Awaitable, Callable, Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest

from evolve.policies.base import PolicyError, PolicyUnavailable
from evolve.policies.openai_api import OpenAIPolicy
from evolve.ports import free_port
from evolve.search.prompts import Prompt

ROOT = Path(__file__).resolve().parents[1]
PROMPT = Prompt([{"role": "user", "content": "hi"}], "def f(x):", ("\ndef",), 16)
Reply = tuple[int, dict[str, str], bytes]  # status, headers, body


def chat_reply(text: str, finish: str = "stop") -> Reply:
    body = {"choices": [{"index": 0, "message": {"role": "assistant", "content": text}, "finish_reason": finish}],
            "usage": {"prompt_tokens": 11, "completion_tokens": 5}}
    return 200, {}, json.dumps(body).encode()


class Scripted:
    """A real HTTP server on loopback that answers the n-th request with script(n, body)."""

    def __init__(self, script: Callable[[int, dict], Reply | None]) -> None:
        self.bodies: list[dict] = []
        outer = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:  # noqa: N802 - http.server's naming
                body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
                outer.bodies.append(body)
                reply = script(len(outer.bodies), body)
                if reply is None:  # stall: hold the connection without answering
                    time.sleep(30)
                    return
                status, headers, data = reply
                self.send_response(status)
                for key, value in {"Content-Type": "application/json", **headers}.items():
                    self.send_header(key, value)
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def log_message(self, *args: object) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}/v1"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


@pytest.fixture
def serve() -> Iterator[Callable[[Callable[[int, dict], Reply | None]], Scripted]]:
    servers: list[Scripted] = []

    def start(script: Callable[[int, dict], Reply | None]) -> Scripted:
        servers.append(Scripted(script))
        return servers[-1]

    yield start
    for server in servers:
        server.close()


def policy(url: str, **settings: object) -> OpenAIPolicy:
    return OpenAIPolicy("p", url, model="m", **{"timeout_s": 5.0, "retries": 2, "backoff_s": 0.01, **settings})


async def ask(p: OpenAIPolicy, seed: int = 7):
    try:
        return await p.generate(PROMPT, seed)
    finally:
        await p.close()


def test_a_chat_request_carries_the_prefill_the_seed_and_the_stops(serve) -> None:
    server = serve(lambda n, body: chat_reply("\n    return 2 * x\ndef g():"))
    completion = asyncio.run(ask(policy(server.url), seed=1234))
    body = server.bodies[0]
    assert body["seed"] == 1234 and body["model"] == "m" and body["max_tokens"] == 16 and body["stop"] == ["\ndef"]
    assert body["messages"][-1] == {"role": "assistant", "content": "def f(x):"}
    assert body["continue_final_message"] is True and body["add_generation_prompt"] is False
    assert completion.text == "\n    return 2 * x"  # cut at the stop even if the server ignored it
    assert (completion.prompt_tokens, completion.completion_tokens, completion.finish_reason) == (11, 5, "stop")


def test_only_the_first_stops_are_sent_but_all_of_them_cut_the_reply(serve) -> None:
    server = serve(lambda n, body: chat_reply("\n    return x\nprint(f(1))"))
    prompt = Prompt(PROMPT.messages, PROMPT.prefill, ("a1", "a2", "a3", "a4", "\nprint("), 16)
    p = policy(server.url)
    completion = asyncio.run(p.generate(prompt, 1))
    assert server.bodies[0]["stop"] == ["a1", "a2", "a3", "a4"] and completion.text == "\n    return x"


def test_a_raw_completion_request_sends_the_rendered_text(serve) -> None:
    reply = {"choices": [{"text": "\n    return x", "finish_reason": "length"}], "usage": {}}
    server = serve(lambda n, body: (200, {}, json.dumps(reply).encode()))
    prompt = Prompt(PROMPT.messages, PROMPT.prefill, (), 16, text="<|im_start|>user\nhi<|im_end|>\ndef f(x):")
    p = policy(server.url, api="completions")
    completion = asyncio.run(p.generate(prompt, 3))
    assert server.bodies[0]["prompt"] == prompt.text and "messages" not in server.bodies[0]
    assert completion.text == "\n    return x" and completion.finish_reason == "length"


def test_busy_and_failing_servers_are_retried_with_the_same_seed(serve) -> None:
    script = {1: (503, {}, b'{"error": {"message": "busy"}}'), 2: (429, {"Retry-After": "0"}, b"{}")}
    server = serve(lambda n, body: script.get(n) or chat_reply("\n    return x"))
    assert asyncio.run(ask(policy(server.url))).text == "\n    return x"
    assert [body["seed"] for body in server.bodies] == [7, 7, 7]


def test_a_bad_request_fails_that_request_only(serve) -> None:
    server = serve(lambda n, body: (400, {}, b'{"error": {"message": "prompt is longer than the context"}}')
                   if n == 1 else chat_reply("ok"))
    p = policy(server.url)

    async def two() -> str:
        with pytest.raises(PolicyError, match="HTTP 400: prompt is longer than the context") as caught:
            await p.generate(PROMPT, 1)
        assert not isinstance(caught.value, PolicyUnavailable)
        return (await ask(p)).text

    assert asyncio.run(two()) == "ok" and len(server.bodies) == 2


def test_an_unknown_model_stops_the_run_at_once(serve) -> None:
    server = serve(lambda n, body: (404, {}, b'{"error": {"message": "The model `m` does not exist."}}'))
    with pytest.raises(PolicyUnavailable, match="HTTP 404: The model `m` does not exist"):
        asyncio.run(ask(policy(server.url)))
    assert len(server.bodies) == 1


@pytest.mark.parametrize(("body", "says"), [
    (b"<html>proxy error</html>", "a body that is not JSON: '<html>proxy error</html>'"),
    (b"[1, 2]", "a body that is not a JSON object: '[1, 2]'"),
    (b'{"id": 1}', "a JSON reply that has no message: \"{'id': 1}\""),
    (b'{"choices": [{"message": {"content": 7}}]}', "a reply whose text is not a string: '7'"),
])
def test_a_200_that_is_not_a_completion_stops_the_policy_at_once_in_one_line(serve, body: bytes, says: str) -> None:
    server = serve(lambda n, request: (200, {}, body))
    p = policy(server.url)

    async def twice() -> list[BaseException]:
        failures = [await _failure(p.generate(PROMPT, seed)) for seed in (1, 2)]
        await p.close()
        return failures

    first, second = asyncio.run(twice())
    assert isinstance(first, PolicyUnavailable) and str(first) == (
        f"policy p: {server.url}/chat/completions answered HTTP 200 with {says}; it does not speak the OpenAI API "
        "(check the policy's url)")
    assert isinstance(second, PolicyUnavailable) and str(second) == str(first)
    assert len(server.bodies) == 1  # not retried, and the second request was never sent


async def _failure(call: Awaitable[object]) -> BaseException:
    try:
        await call
    except PolicyError as exc:
        return exc
    raise AssertionError("the request did not fail")


def test_a_run_whose_server_answers_200_with_no_json_stops_at_the_first_request_with_one_error_line(
        serve, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    from evolve.cli.main import main
    from evolve.store.program_store import ProgramStore

    server = serve(lambda n, body: (200, {"Content-Type": "text/html"}, b"<html>Welcome to nginx!</html>"))
    monkeypatch.setenv("COLUMNS", "1000")
    monkeypatch.chdir(tmp_path)
    db = tmp_path / "runs.db"
    code = main(["run", "--plain", "--db", str(db), "--problem", "fizzbuzz", "--iterations", "20",
                 "--set", f"run.programs_dir={ROOT / 'programs'}", "--set", "run.concurrency=1",
                 "--set", "policy.backend=openai", "--set", f"policy.url={server.url}", "--set", "policy.model=m"])
    out = capsys.readouterr().out
    errors = [line for line in out.splitlines() if line.startswith("error:")]
    assert code == 1 and "Traceback" not in out, out
    assert errors == [f"error: policy smollm2-135m: {server.url}/chat/completions answered HTTP 200 with a body that "
                      "is not JSON: '<html>Welcome to nginx!</html>'; it does not speak the OpenAI API (check the "
                      "policy's url)"], out
    assert len(server.bodies) == 1  # the first request stopped the run; no iteration spent on the others
    store = ProgramStore(str(db), mode="read")
    (run,) = store.list_runs()
    assert run.status == "interrupted" and store.completed_iterations(run.id) == {0}  # the seed only: resumable
    assert store.attempt_counts(run.id).get("policy_error", 0) == 0


def test_a_stalled_server_is_abandoned_at_the_deadline(serve) -> None:
    server = serve(lambda n, body: None)
    started = time.monotonic()
    with pytest.raises(PolicyUnavailable, match=r"failed 2 times; last: no answer within 0.5 s"):
        asyncio.run(ask(policy(server.url, timeout_s=0.5, retries=1)))
    assert time.monotonic() - started < 60 and len(server.bodies) == 2  # the server never answers


def test_a_dead_server_fails_fast_once_declared_unavailable() -> None:
    url = f"http://127.0.0.1:{free_port()}/v1"  # nothing listens here
    p = policy(url, retries=2)

    async def many() -> list[BaseException]:
        first = await asyncio.gather(p.generate(PROMPT, 1), return_exceptions=True)
        sent = p.requests_sent
        rest = await asyncio.gather(*(p.generate(PROMPT, s) for s in range(5)), return_exceptions=True)
        assert p.requests_sent == sent  # later calls do not knock on a dead door again
        await p.close()
        return [*first, *rest]

    errors = asyncio.run(many())
    assert all(isinstance(error, PolicyUnavailable) for error in errors)
    assert "ConnectError" in str(errors[0]) and "failed 3 times" in str(errors[0])


def test_the_model_name_is_asked_of_the_server_when_not_configured(serve) -> None:
    server = serve(lambda n, body: chat_reply("x"))
    # http.server routes GET separately: answer /models from a second scripted GET handler
    handler = server.server.RequestHandlerClass

    def do_get(self: BaseHTTPRequestHandler) -> None:
        data = b'{"object": "list", "data": [{"id": "served-smollm2"}]}'
        self.send_response(200)
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    handler.do_GET = do_get
    p = OpenAIPolicy("p", server.url, model="", backoff_s=0.01)
    asyncio.run(ask(p))
    assert server.bodies[0]["model"] == "served-smollm2"


def test_an_api_key_comes_from_the_named_environment_variable(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("EVOLVE_TEST_KEY", raising=False)
    with pytest.raises(PolicyError, match="EVOLVE_TEST_KEY"):
        OpenAIPolicy("p", "http://127.0.0.1:1/v1", api_key_env="EVOLVE_TEST_KEY")
    with pytest.raises(PolicyError, match="http:// or https://"):
        OpenAIPolicy("p", "127.0.0.1:8000")


RESTATED = "```python\ndef f(x):\n    return 1\n```"  # a new turn: the prefilled line again, in a fence


def completion_reply(text: str) -> Reply:
    body = {"choices": [{"index": 0, "text": text, "finish_reason": "stop"}], "usage": {"prompt_tokens": 9,
                                                                                       "completion_tokens": 4}}
    return 200, {}, json.dumps(body).encode()


def test_an_answer_that_restates_the_prefill_is_asked_again_as_a_raw_completion_and_so_are_later_ones(
        serve, capsys: pytest.CaptureFixture[str]) -> None:
    # a server that ignores continue_final_message: a new turn that writes the prefilled line again
    server = serve(lambda n, body: chat_reply(RESTATED) if "messages" in body
                   else completion_reply("\n    return 3 * x"))
    p = policy(server.url)

    async def two() -> list:
        try:
            return [await p.generate(PROMPT, 1), await p.generate(PROMPT, 2)]
        finally:
            await p.close()

    first, second = asyncio.run(two())
    assert first.text == second.text == "\n    return 3 * x"
    assert ["messages" in body for body in server.bodies] == [True, False, False]
    assert server.bodies[1]["prompt"].rstrip("\n").endswith("<|im_start|>assistant\ndef f(x):")  # completion.jinja
    assert server.bodies[1]["seed"] == 1 and server.bodies[2]["seed"] == 2
    assert (first.prompt_tokens, first.completion_tokens) == (11 + 9, 5 + 4)  # both answers were paid for
    assert capsys.readouterr().err.count("does not continue a prefilled answer") == 1


def test_a_server_without_completions_stays_on_chat_and_says_so_once(serve, capsys: pytest.CaptureFixture[str]) -> None:
    server = serve(lambda n, body: chat_reply(RESTATED) if "messages" in body
                   else (404, {}, b'{"error": {"message": "no route"}}'))
    p = policy(server.url)

    async def two() -> list:
        try:
            return [await p.generate(PROMPT, 1), await p.generate(PROMPT, 2)]
        finally:
            await p.close()

    asyncio.run(two())
    assert ["messages" in body for body in server.bodies] == [True, False, True]  # /completions asked once
    assert capsys.readouterr().err.count("set policy.prefill = false") == 1


def test_a_continued_prefill_or_its_echo_is_not_taken_for_a_restatement(serve) -> None:
    server = serve(lambda n, body: chat_reply(["\n    return f(x - 1)", "def f(x):\n    return 2"][n % 2]))
    p = policy(server.url)

    async def two() -> list:
        try:
            return [await p.generate(PROMPT, 1), await p.generate(PROMPT, 2)]
        finally:
            await p.close()

    assert [c.text for c in asyncio.run(two())] == ["\n    return 2", "\n    return f(x - 1)"]
    assert all("messages" in body for body in server.bodies) and not p.prefill_fallback
