"""The token that guards `evolve serve` on a non-loopback address: given once as ?token=, kept as a cookie, or sent
as a header (Authorization: Bearer TOKEN, or X-Evolve-Token); every other request is refused with 401."""

from __future__ import annotations

import hmac
import ipaddress
import secrets
from urllib.parse import urlencode

from starlette.middleware.base import BaseHTTPMiddleware, RequestResponseEndpoint
from starlette.requests import Request
from starlette.responses import JSONResponse, RedirectResponse, Response
from starlette.types import ASGIApp

COOKIE = "evolve_serve_token"
HEADER = "x-evolve-token"
TOKEN_ENV = "EVOLVE_SERVE_TOKEN"
LOOPBACK_NAMES = ("localhost",)


def is_loopback(host: str) -> bool:
    """True for 127.0.0.0/8, ::1 and localhost: addresses only this machine can reach."""
    if host in LOOPBACK_NAMES:
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False


def new_token() -> str:
    return secrets.token_urlsafe(24)


def _matches(given: str | None, token: str) -> bool:
    return given is not None and hmac.compare_digest(given.encode(), token.encode())


class TokenGate(BaseHTTPMiddleware):
    """Refuses every request that does not carry `token`; a page opened with the right ?token= is redirected to the
    same address without it, with the token set as an HttpOnly cookie (so it leaves the address bar and history)."""

    def __init__(self, app: ASGIApp, token: str) -> None:
        super().__init__(app)
        self.token = token

    async def dispatch(self, request: Request, call_next: RequestResponseEndpoint) -> Response:
        given = request.query_params.get("token")
        if given is not None:
            if not _matches(given, self.token):
                return _refused("wrong token")
            kept = [(key, value) for key, value in request.query_params.multi_items() if key != "token"]
            target = request.url.path + (f"?{urlencode(kept)}" if kept else "")
            response: Response = RedirectResponse(target, status_code=303)
            response.set_cookie(_cookie(request), self.token, httponly=True, samesite="strict")
            return response
        bearer = request.headers.get("authorization", "")
        sent = (request.cookies.get(_cookie(request)) or request.headers.get(HEADER)
                or (bearer[7:] if bearer.lower().startswith("bearer ") else None))
        if not _matches(sent, self.token):
            return _refused("this server needs its token: open the address `evolve serve` printed (…?token=...), "
                            "or send the header X-Evolve-Token")
        return await call_next(request)


def _cookie(request: Request) -> str:
    """The cookie's name carries the port: cookies ignore ports, and two servers on one host have two tokens."""
    return f"{COOKIE}_{request.url.port or 0}"


def _refused(reason: str) -> Response:
    return JSONResponse({"error": reason}, status_code=401)
