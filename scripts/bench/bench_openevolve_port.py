"""What scripts/bench/bench_vs_openevolve.py gives both engines: one problem in each engine's form, one fake policy
server.

The problem: the candidate burns a fixed amount of CPU in `run()` and returns `value()`, the EVOLVE-BLOCK; the score
is how close that is to TARGET. evolve gets a problem folder (problem.toml, evaluator.py scoring it in the sandbox,
initial.py); OpenEvolve an `evaluate(program_path)` that imports the candidate in its worker, as its examples do.

The fake policy server answers after one fixed latency. It serves OpenAI's `/chat/completions` and `/models` under
`/evolve/v1` (a whole-block rewrite of `value()` in a python fence, evolve's rewrite format) and `/openevolve/v1` (a
SEARCH/REPLACE diff of the current program's `value()`, OpenEvolve 0.4.0's default diff-based evolution). Every
reply sets the constant `value()` returns to a fresh number, so every child differs from its parent. HTTP/1.1 with
keep-alive, from the standard library, on an event loop in a thread of the benchmark's process (so the server's own
CPU counts for neither engine).
"""

from __future__ import annotations

import asyncio
import json
import re
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

TARGET = 0.7

CANDIDATE = '''"""Bench candidate: burns a fixed amount of CPU, then returns value()."""

import time

BURN_CPU_S = {burn}


def burn() -> None:
    started = time.process_time()
    while time.process_time() - started < BURN_CPU_S:
        pass


# EVOLVE-BLOCK-START
def value() -> float:
    return 0.5
# EVOLVE-BLOCK-END


def run() -> float:
    burn()
    return value()
'''

EVOLVE_PROBLEM_TOML = '''name = "bench_burn"
description = """Write value() -> float. The score is 1 / (1 + |value() - t|) for a hidden t."""
provenance = "scripts/bench/bench_vs_openevolve.py: a throughput benchmark, not a search problem."
objectives = ["closeness"]

[score]
reduction = "mean"

[limits]
wall_time_s = 20
cpu_time_s = 10
memory_mb = 512
'''

EVOLVE_EVALUATOR = f'''"""bench_burn's trusted evaluator: run() in the sandbox, scored by distance to {TARGET}."""

from evolve.evaluator_api import CandidateFailure, EvaluationResult, Sandbox, fail_unless_ok


def evaluate(program_path: str, sandbox: Sandbox) -> EvaluationResult:
    value = fail_unless_ok(sandbox.call(program_path, "run")).value
    if not isinstance(value, (int, float)):
        raise CandidateFailure("bad_output", "run() did not return a number")
    return EvaluationResult(scores={{"closeness": 1.0 / (1.0 + abs(value - {TARGET}))}})
'''

OPENEVOLVE_EVALUATOR = f'''"""bench_burn for OpenEvolve: run() in the worker, scored by distance to {TARGET}."""

import importlib.util


def evaluate(program_path):
    spec = importlib.util.spec_from_file_location("candidate", program_path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    value = float(module.run())
    return {{"combined_score": 1.0 / (1.0 + abs(value - {TARGET}))}}
'''

def write_problem(folder: Path, burn_cpu_s: float) -> tuple[Path, Path]:
    """The problem for both engines under `folder`: (evolve's problem folder, OpenEvolve's folder)."""
    candidate = CANDIDATE.format(burn=burn_cpu_s)
    evolve_dir, openevolve_dir = folder / "bench_burn", folder / "openevolve"
    evolve_dir.mkdir(parents=True)
    openevolve_dir.mkdir()
    (evolve_dir / "problem.toml").write_text(EVOLVE_PROBLEM_TOML)
    (evolve_dir / "evaluator.py").write_text(EVOLVE_EVALUATOR)
    (evolve_dir / "initial.py").write_text(candidate)
    (openevolve_dir / "evaluator.py").write_text(OPENEVOLVE_EVALUATOR)
    (openevolve_dir / "initial_program.py").write_text(candidate)
    return evolve_dir, openevolve_dir


VALUE_FUNCTION = re.compile(r"def value\(\) -> float:\n([ \t]+)return ([^\n]+)")
CURRENT_PROGRAM = re.compile(r"# Current Program\n```\w*\n(.*?)\n```", re.DOTALL)


def constant_for(number: int) -> float:
    """The constant of the number-th reply: distinct for every number this benchmark reaches, in [0, 1)."""
    return round((number * 0.6180339887498949) % 1.0, 9)


def evolve_reply(number: int) -> str:
    """evolve's rewrite answer: the whole EVOLVE-BLOCK (value()) with a new constant, in a python fence."""
    return f"```python\ndef value() -> float:\n    return {constant_for(number)!r}\n```"


def openevolve_reply(user_message: str, number: int) -> str | None:
    """OpenEvolve's diff answer: SEARCH the current program's value(), REPLACE its constant; None when the prompt
    shows no current program with a value() (the reply then holds no diff)."""
    current = CURRENT_PROGRAM.search(user_message)
    found = VALUE_FUNCTION.search(current.group(1)) if current else None
    if found is None:
        return None
    indent, old = found.group(1), found.group(2)
    return (f"Move the constant.\n<<<<<<< SEARCH\ndef value() -> float:\n{indent}return {old}\n=======\n"
            f"def value() -> float:\n{indent}return {constant_for(number)!r}\n>>>>>>> REPLACE\n")


@dataclass
class FakePolicyServer:
    """Answers every chat completion after a fixed latency, in the reply format of the engine named by the path's
    first segment (/evolve/v1/..., /openevolve/v1/...); HTTP/1.1 with keep-alive, on an event loop in a thread."""

    latency_s: float
    requests: dict[str, int] = field(default_factory=dict)
    unparsed: int = 0  # OpenEvolve prompts without a current value(): answered without a diff
    _loop: asyncio.AbstractEventLoop | None = None
    _thread: threading.Thread | None = None
    _port: int = 0

    def start(self) -> int:
        """Starts serving on a free port of 127.0.0.1 and returns the port."""
        ready = threading.Event()

        def serve() -> None:
            loop = self._loop = asyncio.new_event_loop()
            server = loop.run_until_complete(asyncio.start_server(self._connection, "127.0.0.1", 0))
            self._port = server.sockets[0].getsockname()[1]
            ready.set()
            loop.run_forever()
            server.close()
            loop.run_until_complete(server.wait_closed())
            loop.close()

        self._thread = threading.Thread(target=serve, daemon=True)
        self._thread.start()
        if not ready.wait(10):
            raise SystemExit("bench: the fake policy server did not start")
        return self._port

    def stop(self) -> None:
        """Ends every open connection, then the loop and its thread."""
        if self._loop is None or self._thread is None:
            return

        async def end_connections() -> None:
            tasks = [task for task in asyncio.all_tasks() if task is not asyncio.current_task()]
            for task in tasks:
                task.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)

        asyncio.run_coroutine_threadsafe(end_connections(), self._loop).result(10)
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(10)

    async def _connection(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            while True:
                head = (await reader.readuntil(b"\r\n\r\n")).decode("latin-1").split("\r\n")
                method, target = head[0].split(" ")[:2]
                headers = {name.strip().lower(): value.strip()
                           for name, _, value in (line.partition(":") for line in head[1:] if line)}
                body = await reader.readexactly(int(headers.get("content-length", "0")))
                status, payload = await self._answer(method, target, body)
                data = json.dumps(payload).encode()
                writer.write(f"HTTP/1.1 {status} {'OK' if status == 200 else 'Error'}\r\nContent-Type: "
                             f"application/json\r\nContent-Length: {len(data)}\r\n\r\n".encode() + data)
                await writer.drain()
                if headers.get("connection", "").lower() == "close":
                    break
        except (asyncio.IncompleteReadError, asyncio.LimitOverrunError, ConnectionError, ValueError):
            pass  # the client closed the connection, or sent something this server does not speak
        finally:
            writer.close()

    async def _answer(self, method: str, target: str, body: bytes) -> tuple[int, dict[str, object]]:
        engine, _, path = target.lstrip("/").partition("/")
        if method == "GET" and path == "v1/models":
            return 200, {"object": "list", "data": [{"id": "fake", "object": "model", "owned_by": "bench"}]}
        if method != "POST" or path != "v1/chat/completions" or engine not in ("evolve", "openevolve"):
            return 404, {"error": {"message": f"no route {method} {target}", "type": "invalid_request_error"}}
        request = json.loads(body)
        number = self.requests[engine] = self.requests.get(engine, 0) + 1
        await asyncio.sleep(self.latency_s)
        if engine == "evolve":
            text = evolve_reply(number)
        else:
            user = "\n".join(str(m.get("content", "")) for m in request.get("messages", []) if m.get("role") == "user")
            text = openevolve_reply(user, number)
            if text is None:
                self.unparsed += 1
                text = "I have no change to suggest."
        return 200, {"id": f"bench-{engine}-{number}", "object": "chat.completion", "created": int(time.time()),
                     "model": "fake", "choices": [{"index": 0, "message": {"role": "assistant", "content": text},
                                                   "finish_reason": "stop"}],
                     "usage": {"prompt_tokens": len(body) // 4, "completion_tokens": len(text) // 4,
                               "total_tokens": (len(body) + len(text)) // 4}}
