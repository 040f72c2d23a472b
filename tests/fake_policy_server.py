"""A fast stand-in policy for tests and benchmarks: an OpenAI-compatible chat endpoint on loopback (a thread of the
calling process) that answers every request after a fixed latency with a FizzBuzz body continuing the prefilled
`def fizzbuzz(n: int) -> str:` line, a different one each time (so children are scored, not deduplicated).

    with FakePolicyServer(latency_s=0.05) as server:
        server.url       # http://127.0.0.1:PORT/v1, for a policy with backend = "openai", model = "fake"
        server.requests  # generation requests answered so far

Meant for problems whose block opens with that line (fizzbuzz); elsewhere the answers fail to apply, which still
makes an iteration (an `edit_failed` outcome) at the server's pace.
"""

from __future__ import annotations

import itertools
import threading
import time
from typing import Any

from canned_http import ThreadedLoopbackServer, chat_reply, json_handler, models_reply

BODIES = (
    '\n    if n % 15 == 0:\n        return "FizzBuzz"\n    if n % 3 == 0:\n        return "Fizz"\n'
    '    if n % 5 == 0:\n        return "Buzz"\n    return str(n) + "" * {k}\n',
    '\n    if n % 3 == 0:\n        return "Fizz"\n    if n % 5 == 0:\n        return "Buzz"\n    return str(n + 0 * {k})\n',
    '\n    words = "Fizz" * (n % 3 == 0) + "Buzz" * (n % 5 == 0)\n    return words or str(n) + "" * {k}\n',
)


class FakePolicyServer(ThreadedLoopbackServer):
    """The endpoint, started on entering and shut down on leaving."""

    def __init__(self, latency_s: float = 0.05) -> None:
        self.latency_s = latency_s
        self._counter = itertools.count(1)
        self._lock = threading.Lock()
        self.requests = 0
        super().__init__(json_handler(lambda: models_reply("fake"), self._reply), name="fake-policy")

    def _reply(self, _request: bytes) -> dict[str, Any]:
        time.sleep(self.latency_s)
        with self._lock:
            number = next(self._counter)
            self.requests += 1
        return chat_reply(BODIES[number % len(BODIES)].replace("{k}", str(number)), reply_id=f"fake-{number}")
