"""Scripted policies behind real OpenAI-compatible chat endpoints on loopback (a thread of the test process), for
the `number` test problem: a block `x = N` scored N / 1000.

    with ScriptedPolicyServer("climber") as server:  # x = (the parent's N) + 1 + seed: better, never a repeat
        server.url                                     # http://127.0.0.1:PORT/v1, for backend = "openai"
        server.requests                                # the generation requests' JSON bodies, in arrival order

"breaker" answers `x = (`, which the evaluator cannot score (no child). Both answer without a prefill (the policy's
`prefill = false`), in a ```python fence.
"""

from __future__ import annotations

import json
import re
import threading
from pathlib import Path
from typing import Any

from canned_http import ThreadedLoopbackServer, chat_reply, json_handler, models_reply

PROBLEM_TOML = """\
name = "number"
description = "Set x to a number; the score is x / 1000."
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


def number_problem(root: Path) -> Path:
    """The `number` problem folder under `root` (the run's programs_dir)."""
    folder = root / "number"
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "problem.toml").write_text(PROBLEM_TOML)
    (folder / "initial.py").write_text(INITIAL)
    (folder / "evaluator.py").write_text(EVALUATOR)
    return folder


def answer(script: str, body: dict[str, Any]) -> str:
    if script == "breaker":
        return "```python\nx = (\n```"
    user = next(message["content"] for message in reversed(body["messages"]) if message["role"] == "user")
    found = _CURRENT.search(user)
    parent = int(found.group(1)) if found else 1
    return f"```python\nx = {parent + 1 + int(body.get('seed', 0))}\n```"


class ScriptedPolicyServer(ThreadedLoopbackServer):
    """The endpoint, started on entering and shut down on leaving."""

    def __init__(self, script: str) -> None:
        self.script = script
        self.requests: list[dict[str, Any]] = []
        self._lock = threading.Lock()
        super().__init__(json_handler(lambda: models_reply(script), self._reply), name=f"scripted-{script}")

    def _reply(self, raw: bytes) -> dict[str, Any]:
        body = json.loads(raw)
        with self._lock:
            self.requests.append(body)
        return chat_reply(answer(self.script, body), model=self.script, reply_id="scripted", prompt_tokens=50,
                          completion_tokens=8)
