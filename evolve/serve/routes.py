"""One store's pages and JSON endpoints for `evolve serve`, under its base path: "" for the first store served,
/stores/K for the K-th of several (the pages' scripts prefix every link and request with the base they were
loaded under). Lineage and experiment report pages are rendered on demand by evolve/report."""

from __future__ import annotations

import re
from dataclasses import dataclass

from pydantic import ValidationError
from starlette.convertors import Convertor, register_url_convertor
from starlette.requests import Request
from starlette.responses import HTMLResponse, JSONResponse, Response
from starlette.routing import Route

from evolve.errors import UserError
from evolve.serve.data import StoreView
from evolve.serve.pages import framed, scripted_page
from evolve.store.connection import store_name
from evolve.store.program_store import ProgramStore
from evolve.store.records import MAX_ID

STORE_PREFIX = re.compile(r"^/stores/([0-9]{1,6})(?=/|$)")


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


@dataclass(frozen=True)
class Served:
    """A store being served and where: `base` is "" or "/stores/K"; `label` is how the picker names it."""

    store: ProgramStore
    base: str
    label: str


def base_of(index: int) -> str:
    return "" if index == 0 else f"/stores/{index}"


def split_base(path: str) -> tuple[int, str]:
    """(the index of the store a path is under, the path below its base): "/stores/2/runs/1" -> (2, "/runs/1")."""
    found = STORE_PREFIX.match(path)
    return (int(found.group(1)), path[found.end():] or "/") if found else (0, path)


def _since(request: Request) -> int:
    raw = request.query_params.get("since", "0")
    # ASCII digits only (str.isdigit takes '²' and other scripts' digits), and no more than an id can be
    if not (raw.isascii() and raw.isdigit() and len(raw) <= len(str(MAX_ID)) and int(raw) <= MAX_ID):
        raise BadRequest(f"since={raw[:40]!r}{'...' if len(raw) > 40 else ''}: give the last program id seen "
                         f"(a whole number from 0, for the start, to {MAX_ID})")
    return int(raw)


def store_routes(served: Served) -> list[Route]:
    """The pages and endpoints of one store, under its base."""
    store, base = served.store, served.base
    view = StoreView(store)

    def page(name: str) -> Route:
        return Route(base + "/", lambda request: scripted_page(name, request.headers.get("if-none-match")))

    def api_runs(request: Request) -> Response:
        return JSONResponse({"runs": view.runs(), "db": store_name(store.url)})

    def api_experiments(request: Request) -> Response:
        return JSONResponse({"experiments": view.experiments()})

    def api_run(request: Request) -> Response:
        return JSONResponse(view.run(request.path_params["run_id"]))

    def api_tree(request: Request) -> Response:
        return JSONResponse(view.tree(request.path_params["run_id"], _since(request)))

    def api_program(request: Request) -> Response:
        return JSONResponse(view.program(request.path_params["run_id"], request.path_params["program_id"]))

    def run_page(request: Request) -> Response:
        store.get_run(request.path_params["run_id"])  # an unknown run: the not-found page, not empty panels
        return scripted_page("run.html", request.headers.get("if-none-match"))

    def program_page(request: Request) -> Response:
        view.check_program(request.path_params["run_id"], request.path_params["program_id"])
        return scripted_page("program.html", request.headers.get("if-none-match"))

    def lineage_page(request: Request) -> Response:
        from evolve.report.lineage import ancestry, lineage_html

        run_id, program_id = request.path_params["run_id"], request.path_params["program_id"]
        html = lineage_html(ancestry(store, run_id, program_id))
        label = f"program {run_id}:{store.program_number(run_id, program_id)}"  # RUN:N, as everywhere
        return HTMLResponse(framed(html, [("runs", base + "/"), (f"run {run_id}", f"{base}/runs/{run_id}"),
                                          (label, f"{base}/runs/{run_id}/programs/{program_id}"), ("lineage", None)]))

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
        if spec.pieces > 1:  # this store is one piece: its problems only (`evolve report FILE` reads every piece)
            held = {cell.problem for cell in store.experiment_cells(name)}
            spec = spec.model_copy(update={"pieces": 1, "problems": tuple(p for p in spec.problems if p in held)
                                           or spec.problems})
        html = report_html(collect(store, spec))
        return HTMLResponse(framed(html, [("runs", base + "/"), (f"experiment {name}: report", None)]))

    return [
        page("index.html"),
        Route(base + "/runs/{run_id:evolve_id}", run_page),
        Route(base + "/runs/{run_id:evolve_id}/programs/{program_id:evolve_id}", program_page),
        Route(base + "/runs/{run_id:evolve_id}/lineage/{program_id:evolve_id}", lineage_page),
        Route(base + "/experiments/{name}/report", report_page),
        Route(base + "/api/runs", api_runs),
        Route(base + "/api/experiments", api_experiments),
        Route(base + "/api/runs/{run_id:evolve_id}", api_run),
        Route(base + "/api/runs/{run_id:evolve_id}/tree", api_tree),
        Route(base + "/api/runs/{run_id:evolve_id}/programs/{program_id:evolve_id}", api_program),
    ]
