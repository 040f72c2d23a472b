"""A fake OpenAI-compatible replica for the replica tests: a standard-library HTTP server process that answers every
chat completion after --delay seconds with a reply holding no code, and appends one line per answered request to
--log (so a test counts what each replica served). It prints `ready` once it listens; kill it to make it "die".

    python tests/fake_replica.py --port PORT --delay 0.1 --log FILE
"""

from __future__ import annotations

import argparse
import json
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

REPLY = {"choices": [{"message": {"content": "I have no code for this."}, "finish_reason": "stop"}],
         "usage": {"prompt_tokens": 10, "completion_tokens": 7}}


def make_handler(delay_s: float, log: Path, lock: threading.Lock) -> type[BaseHTTPRequestHandler]:
    class Replies(BaseHTTPRequestHandler):
        def do_GET(self) -> None:  # noqa: N802 (http.server's name)
            self._send({"data": [{"id": "fake"}]})

        def do_POST(self) -> None:  # noqa: N802
            self.rfile.read(int(self.headers.get("Content-Length", 0)))
            time.sleep(delay_s)
            with lock, log.open("a") as lines:
                lines.write(f"{time.monotonic()}\n")
            self._send(REPLY)

        def _send(self, data: dict[str, object]) -> None:
            body = json.dumps(data).encode()
            try:
                self.send_response(200)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)
            except OSError:
                pass  # the client went away

        def log_message(self, format: str, *args: object) -> None:  # noqa: A002 (http.server's name)
            pass

    return Replies


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--delay", type=float, default=0.1)
    parser.add_argument("--log", type=Path, required=True)
    args = parser.parse_args()
    server = ThreadingHTTPServer(("127.0.0.1", args.port), make_handler(args.delay, args.log, threading.Lock()))
    server.daemon_threads = True
    print("ready", flush=True)
    server.serve_forever()


if __name__ == "__main__":
    main()
