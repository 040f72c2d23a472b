"""Scripted policies behind real OpenAI-compatible chat endpoints on loopback (a thread of the test process): the one
stand-in for a model whose answers a test chooses, and the `number` test problem (a block `x = N` scored N / 1000).

    with ScriptedPolicyServer("climber") as server:  # x = (the parent's N) + 1 + seed: better, never a repeat
        server.url                                     # http://127.0.0.1:PORT/v1, for backend = "openai"
        server.requests                                # the generation requests' JSON bodies, in arrival order
    with ScriptedPolicyServer(lambda number, body: f"def f():\n    return {number}\n"):  # request N (from 1)
        ...
    with ScriptedPolicyServer(lambda number, body: Refusal(400, "no such model")):  # every request refused
        ...

"breaker" answers `x = (`, which the evaluator cannot score (no child). Both answer without a prefill (the policy's
`prefill = false`), in a ```python fence. Like a real server, a final assistant message (the prefill) is continued:
the reply is the answer less that prefix. An answer function may sleep to stand for a slow model (answers run on the
server's threads, one per request).
"""

from __future__ import annotations

import json
import re
import threading
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from canned_http import ThreadedLoopbackServer, chat_reply, json_handler, models_reply

PROBLEM_TOML = """\
name = "{name}"
description = "{description}"
provenance = "a test fixture"
objectives = ["value"]

[solved]
all_at_least = 1e12
"""

# trusted, and fast: the evaluator reads the number without running the candidate
EVALUATOR = """\
import re


def evaluate(program_path):
    code = open(program_path).read()
    match = re.search(r"^x = (\\d+)$", code, re.MULTILINE)
    if match is None:
        raise ValueError("no x = N line")
    return {"value": int(match.group(1)) / 1000}
"""

INITIAL = "# EVOLVE-BLOCK-START\nx = 1\n# EVOLVE-BLOCK-END\n"
_CURRENT = re.compile(r"^x = (\d+)$", re.MULTILINE)


def write_problem(root: Path, name: str, description: str, evaluator: str, initial: str = INITIAL) -> Path:
    """A one-objective ("value") problem folder root/NAME with `evaluator` (trusted) and `initial`, never solved."""
    folder = root / name
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "problem.toml").write_text(PROBLEM_TOML.format(name=name, description=description))
    (folder / "initial.py").write_text(initial)
    (folder / "evaluator.py").write_text(evaluator)
    return folder


def number_problem(root: Path) -> Path:
    """The `number` problem folder under `root` (the run's programs_dir)."""
    return write_problem(root, "number", "Set x to a number; the score is x / 1000.", EVALUATOR)


def answer(script: str, body: dict[str, Any]) -> str:
    """The named script's answer to a request."""
    if script == "breaker":
        return "```python\nx = (\n```"
    user = next(message["content"] for message in reversed(body["messages"]) if message["role"] == "user")
    found = _CURRENT.search(user)
    parent = int(found.group(1)) if found else 1
    return f"```python\nx = {parent + 1 + int(body.get('seed', 0))}\n```"


@dataclass(frozen=True)
class Refusal:
    """An HTTP error the endpoint answers instead of a completion: its status and the OpenAI error's message."""

    status: int
    message: str


Answer = Callable[[int, dict[str, Any]], "str | Refusal"]  # (request number from 1, the request's JSON body)


class ScriptedPolicyServer(ThreadedLoopbackServer):
    """The endpoint, started on entering and shut down on leaving. `script` names a script for the number problem
    ("climber", "breaker") or is the answer function; `model` is the name /models lists and replies carry (the
    script's name by default), `tokens` the usage every reply reports (prompt, completion)."""

    def __init__(self, script: str | Answer, model: str | None = None, tokens: tuple[int, int] = (50, 8)) -> None:
        self.script = script
        self.model = model or (script if isinstance(script, str) else "scripted")
        self.tokens = tokens
        self.requests: list[dict[str, Any]] = []
        self._lock = threading.Lock()
        super().__init__(json_handler(lambda: models_reply(self.model), self._reply, post_path="/chat/completions"),
                         name=f"scripted-{self.model}")

    def _reply(self, raw: bytes) -> dict[str, Any] | tuple[int, dict[str, Any]]:
        body = json.loads(raw)
        with self._lock:
            self.requests.append(body)
            number = len(self.requests)
        said = answer(self.script, body) if isinstance(self.script, str) else self.script(number, body)
        if isinstance(said, Refusal):
            return said.status, {"error": {"message": said.message}}
        last = (body.get("messages") or [{}])[-1]
        prefill = last.get("content", "") if last.get("role") == "assistant" else ""
        return chat_reply(said.removeprefix(prefill), model=self.model, reply_id=f"scripted-{number}",
                          prompt_tokens=self.tokens[0], completion_tokens=self.tokens[1])
