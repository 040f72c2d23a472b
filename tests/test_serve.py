"""`evolve serve` over HTTP: a real `evolve serve` process (uvicorn on a free loopback port) reading a real store that
this test writes as the controller does; the JSON endpoints, the tree growing by `since=`, a program with its diff,
prompt and completion, one JSON error line for unknown ids, and the token a non-loopback bind requires."""

from __future__ import annotations

import json
import sqlite3
import subprocess
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
from serve_run import EVOLVE, ROOT, Served, start_serve

from evolve.engine.experiment_spec import ExperimentSpec
from evolve.serve.data import StoreView
from evolve.store.program_store import AttemptRecord, ChildRecord, ProgramStore

SEED_CODE = "def f(x):\n    return 0\n"
CHILD_CODE = "def f(x):\n    return x\n"
PROMPT = "Improve f.\n<response_1>"
COMPLETION = "def f(x):\n    return x\n</response_1>"


def _child(code: str, scores: dict[str, float], parent: int | None, island: int = 0, edit: str = "") -> ChildRecord:
    scalar = sum(scores.values()) / len(scores)
    return ChildRecord(code=code, parent_id=parent, island=island, policy="" if parent is None else "p", edit=edit,
                       scores=scores, scalar=scalar, solved=scalar >= 1.0, artifacts={"feedback": f"scalar {scalar}"})


def _call() -> AttemptRecord:
    return AttemptRecord("policy_call", "stop", prompt=PROMPT, completion=COMPLETION, latency_s=0.5, prompt_tokens=7,
                         completion_tokens=9)


@pytest.fixture(scope="module")
def db(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Three runs: run 1 (seed, a child that solves it on island 1, an edit failure), run 2 (its own seed, program 3),
    which one test extends while the server runs, and run 3, the one cell of experiment "exp-1.a"."""
    path = tmp_path_factory.mktemp("serve") / "serve.db"
    store = ProgramStore(str(path))
    run = store.create_run("r1", "toy", "p", 0, json.dumps({"selection": {"islands": 2}}), 4)
    (seed,) = store.record_iteration(run, 0, [_child(SEED_CODE, {"a": 0.0, "b": 1.0}, None)])
    store.record_iteration(run, 1, [_call(), _child(CHILD_CODE, {"a": 1.0, "b": 1.0}, seed.id, 1, CHILD_CODE)],
                           policy="p", parent_id=seed.id)
    store.record_iteration(run, 2, [_call(), AttemptRecord("edit_failed", "no answer")], policy="p",
                           parent_id=seed.id)
    other = store.create_run("r2", "toy", "p", 1, "{}", 1)
    store.record_iteration(other, 0, [_child(SEED_CODE, {"a": 0.5}, None)])
    spec = ExperimentSpec.model_validate({"name": "exp-1.a", "description": "<b>a</b> & b", "db": str(path),
                                          "problems": ["toy"], "iterations": 1, "policies": [{"name": "p"}]})
    store.save_experiment(spec.name, spec.model_dump_json())
    cell = store.create_run("exp/toy/p/s0", "toy", "p", 0, "{}", 1, experiment=spec.name)
    store.record_iteration(cell, 0, [_child(SEED_CODE, {"a": 1.0}, None)])
    store.close()
    return path


@pytest.fixture(scope="module")
def served(db: Path) -> Iterator[Served]:
    server = start_serve(db)
    yield server
    server.stop()


def test_runs_endpoint_lists_every_run_with_its_counts(served: Served) -> None:
    runs = httpx.get(f"{served.base}/api/runs").json()["runs"]
    assert [run["id"] for run in runs] == [3, 2, 1]  # newest first
    assert runs[0]["experiment"] == "exp-1.a"
    first = runs[2]
    assert (first["problem"], first["programs"], first["iterations_done"], first["iterations_target"]) == \
        ("toy", 2, 2, 4)
    assert first["best"] == 1.0 and first["best_id"] == 2 and first["solved_programs"] == 1
    assert first["experiment"] is None and first["failed"] == {"edit_failed": 1}


def test_tree_returns_only_programs_after_since_and_grows_while_the_run_writes(served: Served, db: Path) -> None:
    page = httpx.get(f"{served.base}/api/runs/1/tree", params={"since": 0}).json()
    assert [(n["id"], n["parent"], n["island"], n["iteration"], n["solved"]) for n in page["nodes"]] == \
        [(1, None, 0, 0, False), (2, 1, 1, 1, True)]
    assert page["last"] == 2 and page["more"] is False and page["run"]["islands"] == 2
    assert httpx.get(f"{served.base}/api/runs/1/tree", params={"since": 2}).json()["nodes"] == []

    assert [n["id"] for n in httpx.get(f"{served.base}/api/runs/2/tree").json()["nodes"]] == [3]
    store = ProgramStore(str(db), mode="existing")  # run 2 goes on while the server is up
    (child,) = store.record_iteration(2, 1, [_call(), _child(CHILD_CODE, {"a": 0.25}, 3)], policy="p", parent_id=3)
    store.close()
    later = httpx.get(f"{served.base}/api/runs/2/tree", params={"since": 3}).json()
    assert [(n["id"], n["parent"], n["scalar"]) for n in later["nodes"]] == [(child.id, 3, 0.25)]
    assert later["last"] == child.id and later["run"]["programs"] == 2 and later["run"]["iterations_done"] == 1
    store = ProgramStore(str(db), mode="existing")  # an iteration that stores no program still counts
    store.record_iteration(2, 2, [_call(), AttemptRecord("edit_failed", "no answer")], policy="p", parent_id=3)
    store.close()
    idle = httpx.get(f"{served.base}/api/runs/2/tree", params={"since": child.id}).json()
    assert idle["nodes"] == [] and idle["run"]["iterations_done"] == 2


def test_tree_pages_a_long_run_and_says_more(db: Path) -> None:
    view = StoreView(ProgramStore(str(db), mode="read"))
    first = view.tree(1, 0, limit=1)
    assert [n["id"] for n in first["nodes"]] == [1] and first["more"] is True
    second = view.tree(1, first["last"], limit=1)
    assert [n["id"] for n in second["nodes"]] == [2]
    assert view.tree(1, second["last"], limit=1) | {"run": None} == {"run": None, "nodes": [], "last": 2,
                                                                     "more": False}


def test_program_detail_has_the_diff_against_its_parent_the_prompt_and_the_completion(served: Served) -> None:
    program = httpx.get(f"{served.base}/api/runs/1/programs/2").json()
    assert program["code"] == CHILD_CODE and program["parent"] == 1 and program["number"] == 2
    assert "-    return 0" in program["diff"].splitlines() and "+    return x" in program["diff"].splitlines()
    assert program["diff"].startswith("--- 1:1 (parent)\n+++ 1:2")  # RUN:N, as evolve show names programs
    assert program["parent_number"] == 1
    assert (program["prompt"], program["completion"]) == (PROMPT, COMPLETION)
    assert program["call"] == {"latency_s": 0.5, "prompt_tokens": 7, "completion_tokens": 9}
    assert program["scores"] == {"a": 1.0, "b": 1.0} and program["parent_scores"] == {"a": 0.0, "b": 1.0}
    assert program["artifacts"] == {"feedback": "scalar 1.0"} and program["solved"] is True
    seed = httpx.get(f"{served.base}/api/runs/1/programs/1").json()
    assert seed["diff"] == "" and seed["prompt"] is None and seed["parent_scores"] is None


@pytest.mark.parametrize(("path", "status", "message"), [
    ("/api/runs/9", 404, "no run 9"),
    ("/api/runs/9/tree", 404, "no run 9"),
    ("/api/runs/1/programs/99", 404, "no program 99 in run 1"),
    ("/api/runs/1/programs/3", 404, "no program 3 in run 1"),  # program 3 is run 2's seed
    ("/api/runs/1/tree?since=abc", 400, "since='abc'"),
    ("/api/no/such/endpoint", 404, "no page /api/no/such/endpoint"),
    ("/assets/nope.js", 404, "no page /assets/nope.js"),
])
def test_bad_ids_and_paths_of_data_get_one_json_error_line(served: Served, path: str, status: int,
                                                           message: str) -> None:
    response = httpx.get(served.base + path)
    assert response.status_code == status
    body = response.json()
    assert list(body) == ["error"] and message in body["error"] and "\n" not in body["error"]


@pytest.mark.parametrize(("path", "message", "back"), [
    ("/runs/9", "no run 9", "/"),
    ("/runs/9/programs/1", "no run 9", "/"),
    ("/runs/1/programs/99", "no program 99 in run 1", "/runs/1"),
    ("/runs/1/programs/3", "no program 3 in run 1", "/runs/1"),  # program 3 is run 2's seed
    ("/runs/1/lineage/99", "program 99 is not in run 1", "/runs/1"),
    ("/experiments/nope/report", "no experiment &#x27;nope&#x27;", "/"),
    ("/no/such/page", "no page /no/such/page", "/"),
])
def test_a_page_that_does_not_exist_is_a_not_found_page_with_the_bar_and_a_way_back(
        served: Served, path: str, message: str, back: str) -> None:
    response = httpx.get(served.base + path)
    assert response.status_code == 404 and response.headers["content-type"].startswith("text/html")
    page = response.text
    assert "<h1>Not found</h1>" in page and f'<p id="not-found" class="error">{message}' in page
    assert page.count('<header class="top"><a class="brand" href="/">evolve</a>') == 1
    assert f'<a id="back" href="{back}">' in page
    assert "click a program" not in page and "tree.js" not in page  # not the run page's empty panels


TOO_BIG = str(2**63)  # one past the largest id a signed 64-bit column holds


@pytest.mark.parametrize(("path", "status", "message"), [
    ("/api/runs/1/tree?since=%C2%B2", 400, "since='\u00b2'"),  # '²': str.isdigit() says yes, int() says no
    ("/api/runs/1/tree?since=%D9%A3", 400, "since='\u0663'"),  # an Arabic-Indic 3, which int() would take
    ("/api/runs/1/tree?since=" + "9" * 5000, 400, "since='99999"),  # past int()'s 4,300 digits
    (f"/api/runs/1/tree?since={TOO_BIG}", 400, f"since='{TOO_BIG}'"),
    (f"/api/runs/{TOO_BIG}", 404, f"no run {TOO_BIG}"),
    (f"/api/runs/{TOO_BIG}/tree", 404, f"no run {TOO_BIG}"),
    (f"/api/runs/1{'0' * 30}/tree?since=0", 404, f"no run 1{'0' * 30}"),
    (f"/api/runs/1/programs/{TOO_BIG}", 404, f"no program {TOO_BIG} in run 1"),
    (f"/api/runs/{TOO_BIG}/programs/1", 404, f"no run {TOO_BIG}"),
])
def test_a_since_or_an_id_no_64_bit_integer_holds_is_a_400_or_404_json_line_not_a_500(
        served: Served, path: str, status: int, message: str) -> None:
    response = httpx.get(served.base + path)
    assert response.status_code == status, response.text[:300]
    body = response.json()
    assert list(body) == ["error"] and message in body["error"] and "\n" not in body["error"]
    assert len(body["error"]) < 400  # a 5,000-digit since is not echoed whole


@pytest.mark.parametrize(("path", "message"), [
    (f"/runs/1/lineage/{TOO_BIG}", f"program {TOO_BIG} is not in run 1"),
    (f"/runs/{TOO_BIG}/lineage/1", f"no run {TOO_BIG}"),
    (f"/runs/{TOO_BIG}", f"no run {TOO_BIG}"),
    ("/runs/1" + "0" * 5000, "no run 1000"),
    ("/api/runs/1" + "0" * 5000, "no run 1000"),
])
def test_a_page_for_an_id_no_64_bit_integer_holds_is_a_not_found_page_not_a_500(served: Served, path: str,
                                                                                message: str) -> None:
    response = httpx.get(served.base + path)
    assert response.status_code == 404 and message in response.text
    assert len(response.text) < 2000  # a 5,000-digit id is not echoed whole


def test_a_damaged_run_row_is_a_json_error_line_and_the_store_keeps_every_byte(tmp_path: Path) -> None:
    path = tmp_path / "damaged.db"
    store = ProgramStore(str(path))
    run = store.create_run("r", "toy", "p", 0, "{}", 1)
    store.record_iteration(run, 0, [_child(SEED_CODE, {"a": 0.5}, None)])
    store.close()
    with sqlite3.connect(path) as connection:
        connection.execute("UPDATE runs SET created_at = 'garbage'")
    before = path.read_bytes()
    server = start_serve(path)
    try:
        for route in ("/api/runs", "/api/runs/1", "/api/runs/1/tree", "/api/runs/1/programs/1"):
            response = httpx.get(server.base + route)
            assert response.status_code == 500 and response.json() == {
                "error": f"cannot read {path}: a stored time is damaged: 'garbage' is not a time"}, route
    finally:
        server.stop()
    assert "Traceback" not in "\n".join(server.lines)
    assert path.read_bytes() == before


def test_a_non_number_in_a_score_is_a_json_error_line_naming_its_row_not_a_plain_500(tmp_path: Path) -> None:
    path = tmp_path / "damaged.db"
    store = ProgramStore(str(path))
    run = store.create_run("r", "toy", "p", 0, "{}", 2)
    (seed,) = store.record_iteration(run, 0, [_child(SEED_CODE, {"a": 0.5}, None)])
    store.record_iteration(run, 1, [_call(), _child(CHILD_CODE, {"a": 1.0}, seed.id, 0, CHILD_CODE)], policy="p")
    store.close()
    with sqlite3.connect(path) as connection:
        connection.execute("UPDATE scores SET scalar = 'garbage' WHERE program_id = 2")
    before = path.read_bytes()
    server = start_serve(path)
    try:
        for route in ("/api/runs", "/api/runs/1", "/api/runs/1/tree", "/api/runs/1/programs/2"):
            response = httpx.get(server.base + route)
            assert response.status_code == 500 and response.json() == {
                "error": f"cannot read {path}: scores.scalar of row program_id=2 is damaged: 'garbage' is "
                         "not int or float"}, route
        page = httpx.get(server.base + "/runs/1/programs/2")
        assert page.status_code == 500 and "scores.scalar of row program_id=2" in page.text
    finally:
        server.stop()
    assert "Traceback" not in "\n".join(server.lines)
    assert path.read_bytes() == before


def test_experiments_are_listed_and_their_report_is_rendered_on_demand(served: Served) -> None:
    (experiment,) = httpx.get(f"{served.base}/api/experiments").json()["experiments"]
    assert experiment["name"] == "exp-1.a" and experiment["cells"] == [{"run": 3, "problem": "toy", "policy": "p",
                                                                         "seed": 0}]
    report = httpx.get(f"{served.base}/experiments/exp-1.a/report")
    assert report.status_code == 200 and "<title>evolve report: exp-1.a</title>" in report.text
    assert "&lt;b&gt;a&lt;/b&gt; &amp; b" in report.text and "<script" not in report.text
    assert '<header class="top"><a class="brand" href="/">evolve</a><a href="/">runs</a>' in report.text
    assert "<nav" not in report.text and '<link rel="stylesheet" href="/assets/nav.css">' in report.text


def test_the_server_is_read_only_and_its_pages_load_scripts_only_from_itself(served: Served) -> None:
    refused = httpx.post(f"{served.base}/api/runs", json={})
    assert refused.status_code == 405 and "read-only" in refused.json()["error"]
    page = httpx.get(f"{served.base}/runs/1")
    assert page.status_code == 200 and '<script src="/assets/tree.js"' in page.text
    assert "script-src 'self'" in page.headers["content-security-policy"]
    assert httpx.get(f"{served.base}/assets/tree.js").status_code == 200
    lineage = httpx.get(f"{served.base}/runs/1/lineage/2")
    assert lineage.status_code == 200 and "lineage of 1:2" in lineage.text
    assert ('<header class="top"><a class="brand" href="/">evolve</a><a href="/">runs</a><a href="/runs/1">run 1</a>'
            in lineage.text) and "<nav" not in lineage.text  # the bar the other pages have, not a second style


def test_a_page_unchanged_since_the_browser_fetched_it_is_a_304_without_a_body(served: Served) -> None:
    for path in ("/", "/runs/1", "/runs/1/programs/2"):
        first = httpx.get(f"{served.base}{path}")
        etag = first.headers["etag"]
        assert first.status_code == 200 and first.headers["cache-control"] == "no-cache" and etag.startswith('"')
        again = httpx.get(f"{served.base}{path}", headers={"If-None-Match": f'"other", {etag}'})
        assert again.status_code == 304 and again.content == b"" and again.headers["etag"] == etag, path
        assert httpx.get(f"{served.base}{path}", headers={"If-None-Match": '"stale"'}).status_code == 200
    assert httpx.get(f"{served.base}/runs/1").headers["etag"] != httpx.get(f"{served.base}/").headers["etag"]


def test_a_loopback_server_refuses_requests_naming_another_host(served: Served) -> None:
    assert httpx.get(f"{served.base}/api/runs", headers={"Host": "localhost"}).status_code == 200
    rebound = httpx.get(f"{served.base}/api/runs", headers={"Host": "attacker.example:8765"})  # DNS rebinding
    assert rebound.status_code == 400 and "runs" not in rebound.text


def test_a_non_loopback_bind_requires_its_token_on_every_request(db: Path) -> None:
    server = start_serve(db, "--host", "0.0.0.0", env={"EVOLVE_SERVE_TOKEN": ""})
    try:
        assert "?token=" in server.url and any("generated" in line for line in server.lines)
        token = server.url.split("?token=")[1]
        local = server.base.replace("0.0.0.0", "127.0.0.1")  # requests go to loopback only
        for path in ("/", "/api/runs", "/assets/tree.js", "/api/runs/1/programs/2"):
            refused = httpx.get(local + path)
            assert refused.status_code == 401 and "token" in refused.json()["error"]
        assert httpx.get(f"{local}/api/runs", params={"token": "wrong"}).status_code == 401
        assert httpx.get(f"{local}/api/runs", headers={"X-Evolve-Token": "wrong"}).status_code == 401
        assert httpx.get(f"{local}/api/runs", headers={"X-Evolve-Token": token}).status_code == 200
        assert httpx.get(f"{local}/api/runs", headers={"Authorization": f"Bearer {token}"}).status_code == 200
        with httpx.Client() as browser:  # the printed address once, then the cookie
            opened = browser.get(f"{local}/runs/1", params={"token": token})
            assert opened.status_code == 303 and opened.headers["location"] == "/runs/1"
            assert "httponly" in opened.headers["set-cookie"].lower()
            assert browser.get(f"{local}/api/runs/1/tree").status_code == 200
    finally:
        server.stop()


def test_a_token_from_the_environment_is_required_even_on_loopback(db: Path) -> None:
    server = start_serve(db, env={"EVOLVE_SERVE_TOKEN": "s3cret"})
    try:
        assert server.url.endswith("?token=s3cret")
        assert httpx.get(f"{server.base}/api/runs").status_code == 401
        assert httpx.get(f"{server.base}/api/runs", headers={"X-Evolve-Token": "s3cret"}).status_code == 200
    finally:
        server.stop()


def test_a_missing_store_or_a_taken_port_is_one_error_line(tmp_path: Path, served: Served, db: Path) -> None:
    missing = subprocess.run([*EVOLVE, "serve", "--db", str(tmp_path / "none.db"), "--port", "0"], cwd=ROOT,
                             capture_output=True, text=True, timeout=60)
    assert missing.returncode == 1 and missing.stdout.strip().startswith("error: no store at")
    assert "Traceback" not in missing.stderr
    port = served.base.rsplit(":", 1)[1]
    taken = subprocess.run([*EVOLVE, "serve", "--db", str(db), "--port", port], cwd=ROOT,
                           capture_output=True, text=True, timeout=60)
    assert taken.returncode == 1 and f"cannot listen on 127.0.0.1:{port}" in taken.stdout
    assert len(taken.stdout.strip().splitlines()) == 1
