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
import json
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from types import TracebackType

BODIES = (
    '\n    if n % 15 == 0:\n        return "FizzBuzz"\n    if n % 3 == 0:\n        return "Fizz"\n'
    '    if n % 5 == 0:\n        return "Buzz"\n    return str(n) + "" * {k}\n',
    '\n    if n % 3 == 0:\n        return "Fizz"\n    if n % 5 == 0:\n        return "Buzz"\n    return str(n + 0 * {k})\n',
    '\n    words = "Fizz" * (n % 3 == 0) + "Buzz" * (n % 5 == 0)\n    return words or str(n) + "" * {k}\n',
)


class FakePolicyServer:
    """The endpoint, started on entering and shut down on leaving."""

    def __init__(self, latency_s: float = 0.05) -> None:
        self.latency_s = latency_s
        self._counter = itertools.count(1)
        self._lock = threading.Lock()
        self.requests = 0
        self._server = ThreadingHTTPServer(("127.0.0.1", 0), self._handler())
        self._server.daemon_threads = True
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True, name="fake-policy")

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self._server.server_address[1]}/v1"

    def __enter__(self) -> FakePolicyServer:
        self._thread.start()
        return self

    def __exit__(self, kind: type[BaseException] | None, error: BaseException | None,
                 trace: TracebackType | None) -> None:
        self._server.shutdown()
        self._server.server_close()

    def _reply(self) -> bytes:
        with self._lock:
            number = next(self._counter)
            self.requests += 1
        body = BODIES[number % len(BODIES)].replace("{k}", str(number))
        return json.dumps({"id": f"fake-{number}", "object": "chat.completion", "model": "fake",
                           "choices": [{"index": 0, "message": {"role": "assistant", "content": body},
                                        "finish_reason": "stop"}],
                           "usage": {"prompt_tokens": 100, "completion_tokens": 40}}).encode()

    def _handler(self) -> type[BaseHTTPRequestHandler]:
        server = self

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:  # noqa: N802 - http.server's naming
                self._send(json.dumps({"object": "list", "data": [{"id": "fake", "object": "model"}]}).encode())

            def do_POST(self) -> None:  # noqa: N802 - http.server's naming
                self.rfile.read(int(self.headers.get("Content-Length", 0)))
                time.sleep(server.latency_s)
                self._send(server._reply())

            def _send(self, body: bytes) -> None:
                try:
                    self.send_response(200)
                    self.send_header("Content-Type", "application/json")
                    self.send_header("Content-Length", str(len(body)))
                    self.end_headers()
                    self.wfile.write(body)
                except OSError:
                    pass  # a client killed mid-request

            def log_message(self, format: str, *args: object) -> None:  # noqa: A002 - http.server's naming
                pass

        return Handler
