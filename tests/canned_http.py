"""The HTTP plumbing the tests' stand-in OpenAI-compatible servers share: a JSON handler, a chat-completion reply, and
a loopback server run on a thread of the calling process."""

from __future__ import annotations

import json
import threading
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from types import TracebackType
from typing import Any


def chat_reply(content: str, model: str = "fake", reply_id: str = "fake", prompt_tokens: int = 100,
               completion_tokens: int = 40) -> dict[str, Any]:
    """One OpenAI chat.completion holding `content`, finished by a stop."""
    return {"id": reply_id, "object": "chat.completion", "model": model,
            "choices": [{"index": 0, "message": {"role": "assistant", "content": content}, "finish_reason": "stop"}],
            "usage": {"prompt_tokens": prompt_tokens, "completion_tokens": completion_tokens}}


def models_reply(model: str) -> dict[str, Any]:
    return {"object": "list", "data": [{"id": model, "object": "model"}]}


def json_handler(on_get: Callable[[], dict[str, Any]],
                 on_post: Callable[[bytes], dict[str, Any] | tuple[int, dict[str, Any]]],
                 post_path: str | None = None) -> type[BaseHTTPRequestHandler]:
    """A handler answering GET with on_get() and POST with on_post(request body), both as JSON (200, or the status
    on_post returns with its data). With `post_path`, a POST to a path not ending in it is a 404."""

    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:  # noqa: N802 - http.server's naming
            self._send(on_get())

        def do_POST(self) -> None:  # noqa: N802 - http.server's naming
            raw = self.rfile.read(int(self.headers.get("Content-Length", 0)))
            if post_path is not None and not self.path.endswith(post_path):
                self._send((404, {"error": {"message": f"no route {self.path}"}}))
                return
            self._send(on_post(raw))

        def _send(self, data: dict[str, Any] | tuple[int, dict[str, Any]]) -> None:
            status, data = data if isinstance(data, tuple) else (200, data)
            body = json.dumps(data).encode()
            try:
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)
            except OSError:
                pass  # a client killed mid-request

        def log_message(self, format: str, *args: object) -> None:  # noqa: A002 - http.server's naming
            pass

    return Handler


class ThreadedLoopbackServer:
    """A ThreadingHTTPServer on 127.0.0.1 (a free port), served on a daemon thread while the `with` block runs."""

    def __init__(self, handler: type[BaseHTTPRequestHandler], name: str) -> None:
        self._server = ThreadingHTTPServer(("127.0.0.1", 0), handler)
        self._server.daemon_threads = True
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True, name=name)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self._server.server_address[1]}/v1"

    def __enter__(self) -> ThreadedLoopbackServer:
        self._thread.start()
        return self

    def __exit__(self, kind: type[BaseException] | None, error: BaseException | None,
                 trace: TracebackType | None) -> None:
        self._server.shutdown()
        self._server.server_close()
