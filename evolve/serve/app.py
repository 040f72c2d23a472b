"""The Starlette app behind `evolve serve`: one or more stores (routes.py: each store's pages and JSON endpoints
under its base path; the first store at /, the K-th at /stores/K), /api/stores naming them for the store picker,
the scripts and styles under /assets. Read-only: every route is GET. Unknown ids and paths are 404: one JSON error
line under /api and /assets, a not-found page (with the bar every page has) elsewhere; any other error is one JSON
error line or an error page too, never a plain-text 500."""

from __future__ import annotations

from collections.abc import Sequence

from starlette.applications import Starlette
from starlette.exceptions import HTTPException
from starlette.middleware import Middleware
from starlette.middleware.base import BaseHTTPMiddleware, RequestResponseEndpoint
from starlette.middleware.trustedhost import TrustedHostMiddleware
from starlette.requests import Request
from starlette.responses import FileResponse, JSONResponse, Response
from starlette.routing import BaseRoute, Mount, Route
from starlette.staticfiles import StaticFiles

from evolve.errors import UserError
from evolve.serve.auth import TokenGate
from evolve.serve.pages import ASSETS, Crumbs, error_page
from evolve.serve.routes import BadRequest, Served, base_of, split_base, store_routes
from evolve.store.connection import store_name
from evolve.store.program_store import ProgramStore, UnknownIdError

# the pages load scripts and styles from /assets only; the rendered reports carry inline <style> and no scripts
CSP = ("default-src 'self'; script-src 'self'; style-src 'self' 'unsafe-inline'; img-src 'self' data:; "
       "object-src 'none'; base-uri 'none'; frame-ancestors 'none'")


LOOPBACK_HOSTS = ["127.0.0.1", "localhost", "::1", "[::1]"]


def create_app(stores: ProgramStore | Sequence[ProgramStore], token: str | None = None,
               loopback_only: bool = True) -> Starlette:
    """The web app over `stores` (each opened read-only by its caller; the first is served at /); with `token`,
    every request must carry it. `loopback_only` (a loopback bind): requests must name a loopback host, so a web
    page whose domain was re-pointed at 127.0.0.1 (DNS rebinding) cannot read a store through the visitor's
    browser."""
    listed = [stores] if isinstance(stores, ProgramStore) else list(stores)
    served = [Served(store, base_of(index), store_name(store.url)) for index, store in enumerate(listed)]

    def api_stores(request: Request) -> Response:
        """The stores served, for the picker: where each is (its base path) and what it is (db, label)."""
        return JSONResponse({"stores": [{"index": index, "base": one.base, "db": one.label, "label": one.label}
                                        for index, one in enumerate(served)]})

    routes: list[BaseRoute] = [
        Route("/favicon.ico", lambda request: FileResponse(ASSETS / "favicon.svg", media_type="image/svg+xml")),
        Route("/api/stores", api_stores),
        *(route for one in served for route in store_routes(one)),
        Mount("/assets", StaticFiles(directory=ASSETS), name="assets"),
    ]
    middleware = [Middleware(SecurityHeaders),
                  *([Middleware(TrustedHostMiddleware, allowed_hosts=LOOPBACK_HOSTS)] if loopback_only else []),
                  *([Middleware(TokenGate, token=token)] if token else [])]
    app = Starlette(routes=routes, middleware=middleware, exception_handlers={
        UnknownIdError: _not_found, UserError: _user_error, HTTPException: _http_error, Exception: _server_error})
    app.state.stores = [one.store for one in served]
    return app


class SecurityHeaders(BaseHTTPMiddleware):
    """Every response (refusals included): scripts from this server only, no sniffing, no referrer, no caching."""

    async def dispatch(self, request: Request, call_next: RequestResponseEndpoint) -> Response:
        response = await call_next(request)
        response.headers.setdefault("Content-Security-Policy", CSP)
        response.headers.setdefault("X-Content-Type-Options", "nosniff")
        response.headers.setdefault("Referrer-Policy", "no-referrer")
        response.headers.setdefault("Cache-Control", "no-store")
        return response


def _is_page(request: Request) -> bool:
    """A request for a page (a person's browser), not for data or a file the pages load."""
    return not split_base(request.url.path)[1].startswith(("/api/", "/assets/"))


def _error(request: Request, status: int, message: str) -> Response:
    """One JSON error line for /api and /assets; for a page, a page with the bar and a way back."""
    line = " ".join(message.splitlines())
    if not _is_page(request):
        return JSONResponse({"error": line}, status_code=status)
    shown = line if len(line) <= 300 else line[:300] + "..."  # a 5,000-digit id is not echoed whole
    index, _ = split_base(request.url.path)
    base = base_of(index) if index < len(request.app.state.stores) else ""
    crumbs: Crumbs = [("runs", base + "/"), ("not found" if status == 404 else "error", None)]
    return error_page(shown, crumbs, _back(request, base), status)


def _back(request: Request, base: str) -> tuple[str, str]:
    """Where the not-found page links: the run, when the path names a run this store has; else the runs list."""
    run_id = request.path_params.get("run_id")
    index, below = split_base(request.url.path)
    if isinstance(run_id, int) and below.startswith(f"/runs/{run_id}/") and base == base_of(index):
        store: ProgramStore = request.app.state.stores[index]
        try:
            store.get_run(run_id)
        except UserError:
            pass
        else:
            return f"run {run_id}", f"{base}/runs/{run_id}"
    return "the runs of this store", base + "/"


async def _not_found(request: Request, exc: Exception) -> Response:
    return _error(request, 404, str(exc))


async def _user_error(request: Request, exc: Exception) -> Response:
    from evolve.report.lineage import LineageError

    if isinstance(exc, LineageError):  # the program is not in the run
        return _error(request, 404, str(exc))
    return _error(request, 400 if isinstance(exc, BadRequest) else 500, str(exc))


async def _server_error(request: Request, exc: Exception) -> Response:
    """A bug of ours: the same one JSON error line (or error page) as every other error; uvicorn still logs its
    traceback, which a bug report needs."""
    first = (str(exc).splitlines() or [""])[0]
    return _error(request, 500, f"internal error: {type(exc).__name__}" + (f": {first}" if first else ""))


async def _http_error(request: Request, exc: Exception) -> Response:
    assert isinstance(exc, HTTPException)
    message = f"no page {request.url.path}" if exc.status_code == 404 else str(exc.detail)
    if exc.status_code == 405:
        message = f"{request.method} {request.url.path}: this server is read-only (GET only)"
    return _error(request, exc.status_code, message)
