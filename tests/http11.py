"""The HTTP/1.1 side of tests/openai_server.py: one request read from a stream (request line, headers, a
Content-Length body, within fixed limits) and one JSON response written, connection closed after it."""

from __future__ import annotations

import asyncio
import json
from dataclasses import dataclass
from typing import Any

MAX_BODY = 1_000_000  # bytes
MAX_LINE = 8_192  # request line or one header line
MAX_HEADERS = 100
REASONS = {200: "OK", 400: "Bad Request", 404: "Not Found", 405: "Method Not Allowed", 408: "Request Timeout",
           500: "Internal Server Error"}


class HTTPError(Exception):
    """A request answered with an error status and an OpenAI-style error body."""

    def __init__(self, status: int, message: str, kind: str = "invalid_request_error",
                 headers: dict[str, str] | None = None) -> None:
        super().__init__(message)
        self.status = status
        self.message = message
        self.kind = kind
        self.headers = headers or {}

    def body(self) -> dict[str, Any]:
        return {"error": {"message": self.message, "type": self.kind, "code": self.status}}


@dataclass(frozen=True)
class Request:
    method: str
    path: str
    headers: dict[str, str]  # lower-case names
    body: bytes


async def read_line(reader: asyncio.StreamReader) -> bytes:
    try:
        line = await reader.readuntil(b"\n")
    except asyncio.LimitOverrunError:
        raise HTTPError(400, "a request line or header line is too long") from None
    if len(line) > MAX_LINE:
        raise HTTPError(400, "a request line or header line is too long")
    return line.rstrip(b"\r\n")


async def read_request(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> Request | None:
    """Request line, headers and a Content-Length body; None if the client sent nothing and closed."""
    try:
        first = await read_line(reader)
    except asyncio.IncompleteReadError as exc:
        if not exc.partial.strip():
            return None
        raise HTTPError(400, "the request ended inside its request line") from None
    parts = first.decode("latin-1").split(" ")
    if len(parts) != 3 or not parts[0].isalpha() or not parts[1].startswith("/") or not parts[2].startswith("HTTP/1."):
        raise HTTPError(400, "malformed request line")
    method, target, _ = parts
    headers: dict[str, str] = {}
    while True:
        try:
            line = await read_line(reader)
        except asyncio.IncompleteReadError:
            raise HTTPError(400, "the request ended inside its headers") from None
        if not line:
            break
        if len(headers) >= MAX_HEADERS:
            raise HTTPError(400, "too many headers")
        name, colon, value = line.decode("latin-1").partition(":")
        if not colon or not name or name != name.strip():
            raise HTTPError(400, "malformed header line")
        name, value = name.lower(), value.strip()
        if name in headers and (name == "content-length" and headers[name] != value):
            raise HTTPError(400, "conflicting Content-Length headers")
        headers[name] = value
    if "transfer-encoding" in headers:
        raise HTTPError(400, "chunked bodies are not served; send Content-Length")
    length_text = headers.get("content-length", "0")
    if not length_text.isdigit():
        raise HTTPError(400, "malformed Content-Length")
    length = int(length_text)
    if length > MAX_BODY:
        raise HTTPError(400, f"the body is over {MAX_BODY} bytes")
    if length and headers.get("expect", "").lower() == "100-continue":
        writer.write(b"HTTP/1.1 100 Continue\r\n\r\n")
        await writer.drain()
    try:
        body = await reader.readexactly(length)
    except asyncio.IncompleteReadError:
        raise HTTPError(400, "the body is shorter than its Content-Length") from None
    return Request(method.upper(), target.split("?", 1)[0], headers, body)


async def respond(writer: asyncio.StreamWriter, status: int, body: dict[str, Any],
                  headers: dict[str, str] | None = None) -> None:
    data = json.dumps(body).encode()
    head = [f"HTTP/1.1 {status} {REASONS.get(status, 'Error')}", "Content-Type: application/json",
            f"Content-Length: {len(data)}", "Connection: close"]
    head += [f"{name}: {value}" for name, value in (headers or {}).items()]
    writer.write(("\r\n".join(head) + "\r\n\r\n").encode("latin-1") + data)
    await writer.drain()
