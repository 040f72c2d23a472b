"""The Starlette app behind `evolve serve`: pages (their bodies and vanilla JS from assets/, in the head pages.py
writes), JSON endpoints over data.py's reads, and the lineage page and experiment report rendered on demand by
evolve/report. Read-only: every route is GET. Unknown ids and paths are 404: one JSON error line under /api and
/assets, a not-found page (with the bar every page has) elsewhere."""

from __future__ import annotations

from pydantic import ValidationError
from starlette.applications import Starlette
from starlette.convertors import Convertor, register_url_convertor
from starlette.exceptions import HTTPException
from starlette.middleware import Middleware
from starlette.middleware.base import BaseHTTPMiddleware, RequestResponseEndpoint
from starlette.middleware.trustedhost import TrustedHostMiddleware
from starlette.requests import Request
from starlette.responses import FileResponse, HTMLResponse, JSONResponse, Response
from starlette.routing import Mount, Route
from starlette.staticfiles import StaticFiles

from evolve.errors import UserError
from evolve.serve.auth import TokenGate
from evolve.serve.data import StoreView
from evolve.serve.pages import ASSETS, Crumbs, error_page, framed, scripted_page
from evolve.store.program_store import ProgramStore, UnknownIdError
from evolve.store.records import MAX_ID

# the pages load scripts and styles from /assets only; the rendered reports carry inline <style> and no scripts
CSP = ("default-src 'self'; script-src 'self'; style-src 'self' 'unsafe-inline'; img-src 'self' data:; "
       "object-src 'none'; base-uri 'none'; frame-ancestors 'none'")


LOOPBACK_HOSTS = ["127.0.0.1", "localhost", "::1", "[::1]"]


class IdConvertor(Convertor[int]):
    """A path id: ASCII digits, as int; past 100 digits (int() refuses over 4,300 with a ValueError, a 500) a number
    no id reaches, so the lookup says what is missing like any other unknown id."""

    regex = "[0-9]+"

    def convert(self, value: str) -> int:
        return int(value) if len(value) <= 100 else 10 ** 100

    def to_string(self, value: int) -> str:
        return str(value)


register_url_convertor("evolve_id", IdConvertor())


class BadRequest(UserError):
    """A query parameter the endpoint cannot read."""


class StoredSpecError(UserError):
    """An experiment's stored spec that this version cannot read."""


def _since(request: Request) -> int:
    raw = request.query_params.get("since", "0")
    # ASCII digits only (str.isdigit takes '²' and other scripts' digits), and no more than an id can be
    if not (raw.isascii() and raw.isdigit() and len(raw) <= len(str(MAX_ID)) and int(raw) <= MAX_ID):
        raise BadRequest(f"since={raw[:40]!r}{'...' if len(raw) > 40 else ''}: give the last program id seen "
                         f"(a whole number from 0, for the start, to {MAX_ID})")
    return int(raw)


def create_app(store: ProgramStore, token: str | None = None, loopback_only: bool = True) -> Starlette:
    """The web app over `store` (opened read-only by its caller); with `token`, every request must carry it.
    `loopback_only` (a loopback bind): requests must name a loopback host, so a web page whose domain was re-pointed
    at 127.0.0.1 (DNS rebinding) cannot read the store through the visitor's browser."""
    view = StoreView(store)

    def api_runs(request: Request) -> Response:
        return JSONResponse({"runs": view.runs(), "db": store.url})

    def api_experiments(request: Request) -> Response:
        return JSONResponse({"experiments": view.experiments()})

    def api_run(request: Request) -> Response:
        return JSONResponse(view.run(request.path_params["run_id"]))

    def api_tree(request: Request) -> Response:
        return JSONResponse(view.tree(request.path_params["run_id"], _since(request)))

    def api_program(request: Request) -> Response:
        return JSONResponse(view.program(request.path_params["run_id"], request.path_params["program_id"]))

    def run_page(request: Request) -> Response:
        view.store.get_run(request.path_params["run_id"])  # an unknown run: the not-found page, not empty panels
        return scripted_page("run.html", request.headers.get("if-none-match"))

    def program_page(request: Request) -> Response:
        view.check_program(request.path_params["run_id"], request.path_params["program_id"])
        return scripted_page("program.html", request.headers.get("if-none-match"))

    def lineage_page(request: Request) -> Response:
        from evolve.report.lineage import ancestry, lineage_html

        run_id, program_id = request.path_params["run_id"], request.path_params["program_id"]
        html = lineage_html(ancestry(store, run_id, program_id))
        return HTMLResponse(framed(html, [("runs", "/"), (f"run {run_id}", f"/runs/{run_id}"),
                                          (f"program #{program_id}", f"/runs/{run_id}/programs/{program_id}"),
                                          ("lineage", None)]))

    def report_page(request: Request) -> Response:
        from evolve.engine.experiment_spec import ExperimentSpec
        from evolve.report.html import report_html
        from evolve.report.results import collect

        name = request.path_params["name"]
        try:
            spec = ExperimentSpec.model_validate_json(view.experiment_spec(name)).model_copy(update={"db": store.url})
        except ValidationError as exc:
            raise StoredSpecError(f"experiment '{name}' was stored by another version of evolve and does not read "
                                  f"now ({exc.error_count()} errors); `evolve report FILE` reports it") from exc
        html = report_html(collect(store, spec))
        return HTMLResponse(framed(html, [("runs", "/"), (f"experiment {name}: report", None)]))

    routes = [
        Route("/", lambda request: scripted_page("index.html", request.headers.get("if-none-match"))),
        Route("/favicon.ico", lambda request: FileResponse(ASSETS / "favicon.svg", media_type="image/svg+xml")),
        Route("/runs/{run_id:evolve_id}", run_page),
        Route("/runs/{run_id:evolve_id}/programs/{program_id:evolve_id}", program_page),
        Route("/runs/{run_id:evolve_id}/lineage/{program_id:evolve_id}", lineage_page),
        Route("/experiments/{name}/report", report_page),
        Route("/api/runs", api_runs),
        Route("/api/experiments", api_experiments),
        Route("/api/runs/{run_id:evolve_id}", api_run),
        Route("/api/runs/{run_id:evolve_id}/tree", api_tree),
        Route("/api/runs/{run_id:evolve_id}/programs/{program_id:evolve_id}", api_program),
        Mount("/assets", StaticFiles(directory=ASSETS), name="assets"),
    ]
    middleware = [Middleware(SecurityHeaders),
                  *([Middleware(TrustedHostMiddleware, allowed_hosts=LOOPBACK_HOSTS)] if loopback_only else []),
                  *([Middleware(TokenGate, token=token)] if token else [])]
    app = Starlette(routes=routes, middleware=middleware, exception_handlers={
        UnknownIdError: _not_found, UserError: _user_error, HTTPException: _http_error})
    app.state.store = store
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
    return not request.url.path.startswith(("/api/", "/assets/"))


def _error(request: Request, status: int, message: str) -> Response:
    """One JSON error line for /api and /assets; for a page, a page with the bar and a way back."""
    line = " ".join(message.splitlines())
    if not _is_page(request):
        return JSONResponse({"error": line}, status_code=status)
    shown = line if len(line) <= 300 else line[:300] + "..."  # a 5,000-digit id is not echoed whole
    crumbs: Crumbs = [("runs", "/"), ("not found" if status == 404 else "error", None)]
    return error_page(shown, crumbs, _back(request), status)


def _back(request: Request) -> tuple[str, str]:
    """Where the not-found page links: the run, when the path names a run this store has; else the runs list."""
    run_id = request.path_params.get("run_id")
    if isinstance(run_id, int) and request.url.path.startswith(f"/runs/{run_id}/"):
        store: ProgramStore = request.app.state.store
        try:
            store.get_run(run_id)
        except UserError:
            pass
        else:
            return f"run {run_id}", f"/runs/{run_id}"
    return "the runs of this store", "/"


async def _not_found(request: Request, exc: Exception) -> Response:
    return _error(request, 404, str(exc))


async def _user_error(request: Request, exc: Exception) -> Response:
    from evolve.report.lineage import LineageError

    if isinstance(exc, LineageError):  # the program is not in the run
        return _error(request, 404, str(exc))
    return _error(request, 400 if isinstance(exc, BadRequest) else 500, str(exc))


async def _http_error(request: Request, exc: Exception) -> Response:
    assert isinstance(exc, HTTPException)
    message = f"no page {request.url.path}" if exc.status_code == 404 else str(exc.detail)
    if exc.status_code == 405:
        message = f"{request.method} {request.url.path}: this server is read-only (GET only)"
    return _error(request, exc.status_code, message)
