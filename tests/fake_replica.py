"""A fake OpenAI-compatible replica for the replica tests: a standard-library HTTP server process that answers every
chat completion after --delay seconds with a reply holding no code, and appends one line per answered request to
--log (so a test counts what each replica served). It prints `ready` once it listens; kill it to make it "die".

    python tests/fake_replica.py --port PORT --delay 0.1 --log FILE
"""

from __future__ import annotations

import argparse
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

from canned_http import json_handler

REPLY = {"choices": [{"message": {"content": "I have no code for this."}, "finish_reason": "stop"}],
         "usage": {"prompt_tokens": 10, "completion_tokens": 7}}


def make_handler(delay_s: float, log: Path, lock: threading.Lock) -> type[BaseHTTPRequestHandler]:
    def reply(_request: bytes) -> dict[str, object]:
        time.sleep(delay_s)
        with lock, log.open("a") as lines:
            lines.write(f"{time.monotonic()}\n")
        return REPLY

    return json_handler(lambda: {"data": [{"id": "fake"}]}, reply)


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
