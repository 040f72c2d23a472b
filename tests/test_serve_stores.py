"""`evolve serve` serves every store a user has: the config's store and the stores of the experiment files in
./experiments/ (the README's `evolve experiment experiments/default.toml` writes experiments/default.db, not
evolve.db), or each store given with --db. The first is served at /, the K-th at /stores/K/, /api/stores names them
all and the runs page links each (the store picker); every page of another store keeps to its base."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import httpx
import pytest
from browser import chromium
from serve_run import start_serve

from evolve.engine.experiment_spec import load_experiment
from evolve.store.program_store import ChildRecord, ProgramStore

ROOT = Path(__file__).resolve().parents[1]
EXPERIMENT = 'problems = ["fizzbuzz"]\niterations = 1\n\n[[policies]]\nname = "p"\n'


def one_run(db: Path | str, name: str = "r") -> None:
    store = ProgramStore(str(db))
    run = store.create_run(name, "toy", "p", 0, json.dumps({"selection": {"islands": 1}}), 1)
    store.record_iteration(run, 0, [ChildRecord("def f():\n    return 0\n", None, 0, "", "", {"a": 0.5}, 0.5, False)])
    store.set_run_status(run, "finished")
    store.close()


@pytest.fixture
def project(tmp_path: Path) -> Path:
    """A folder as the README leaves it: experiments/exp.toml and its store experiments/exp.db (an experiment with
    one cell), a study file beside it (no experiment: passed over), and an experiment never run (no store)."""
    folder = tmp_path / "project"
    (folder / "experiments").mkdir(parents=True)
    (folder / "experiments" / "exp.toml").write_text(EXPERIMENT)
    (folder / "experiments" / "later.toml").write_text(EXPERIMENT)
    (folder / "experiments" / "study.toml").write_text((ROOT / "experiments" / "study.toml").read_text())
    spec = load_experiment(folder / "experiments" / "exp.toml")
    store = ProgramStore(str(folder / spec.db))
    store.save_experiment(spec.name, spec.model_dump_json())
    cell = store.create_run("exp/fizzbuzz/p/s0", "fizzbuzz", "p", 0, "{}", 1, experiment=spec.name)
    store.record_iteration(cell, 0, [ChildRecord("def f():\n    return 1\n", None, 0, "", "", {"a": 1.0}, 1.0, True)])
    store.close()
    return folder


@contextmanager
def serve_in(folder: Path, *flags: str) -> Iterator[tuple[str, list[str]]]:
    """`evolve serve --port 0 FLAGS` started in `folder`: (its address, the lines it printed up to it)."""
    process = subprocess.Popen([sys.executable, "-m", "evolve", "serve", "--port", "0", *flags], cwd=folder,
                               stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                               env={**os.environ, "PYTHONUNBUFFERED": "1", "COLUMNS": "200"})
    lines: list[str] = []
    try:
        assert process.stdout is not None
        for line in process.stdout:
            lines.append(line.rstrip("\n"))
            if line.startswith("Ctrl-C"):
                break
        found = next((re.search(r"(http://\S+)", line) for line in lines if "http://" in line), None)
        assert found is not None, lines
        yield found.group(1).rstrip("/"), lines
    finally:
        process.terminate()
        process.wait(timeout=30)


def test_after_an_experiment_serve_shows_its_store_where_the_config_store_was_never_made(project: Path) -> None:
    with serve_in(project) as (address, lines):
        stores = httpx.get(address + "/api/stores").json()["stores"]
        assert [store["label"] for store in stores] == ["experiments/exp.db"], lines
        assert [e["name"] for e in httpx.get(address + "/api/experiments").json()["experiments"]] == ["exp"]


def test_the_config_store_and_the_experiment_stores_are_served_together_each_under_its_base(project: Path) -> None:
    one_run(project / "evolve.db", "mine")
    with serve_in(project) as (address, lines):
        assert any("experiments/exp.db" in line and "/stores/1/" in line for line in lines), lines
        stores = httpx.get(address + "/api/stores").json()["stores"]
        assert [(store["label"], store["base"]) for store in stores] == \
            [("evolve.db", ""), ("experiments/exp.db", "/stores/1")]
        assert [run["name"] for run in httpx.get(address + "/api/runs").json()["runs"]] == ["mine"]
        assert httpx.get(address + "/api/experiments").json()["experiments"] == []
        assert [e["name"] for e in httpx.get(address + "/stores/1/api/experiments").json()["experiments"]] == ["exp"]
        assert httpx.get(address + "/stores/1/api/runs/1").json()["name"] == "exp/fizzbuzz/p/s0"
        assert [node["id"] for node in httpx.get(address + "/stores/1/api/runs/1/tree").json()["nodes"]] == [1]
        for page in ("/stores/1/", "/stores/1/runs/1", "/stores/1/runs/1/programs/1", "/stores/1/runs/1/lineage/1",
                     "/stores/1/experiments/exp/report"):
            assert httpx.get(address + page).status_code == 200, page
        missing = httpx.get(address + "/stores/2/api/runs")
        assert missing.status_code == 404 and missing.json() == {"error": "no page /stores/2/api/runs"}
        gone = httpx.get(address + "/stores/1/runs/9")
        assert gone.status_code == 404 and 'href="/stores/1/"' in gone.text  # the way back stays in its store


def test_each_db_flag_is_one_store_served(tmp_path: Path) -> None:
    one_run(tmp_path / "a.db", "in-a")
    one_run(tmp_path / "b.db", "in-b")
    with serve_in(tmp_path, "--db", "a.db", "--db", "b.db") as (address, _):
        assert [store["label"] for store in httpx.get(address + "/api/stores").json()["stores"]] == ["a.db", "b.db"]
        assert httpx.get(address + "/stores/1/api/runs").json()["runs"][0]["name"] == "in-b"


@pytest.fixture(scope="module")
def browser() -> Iterator[Any]:  # a playwright Browser
    with chromium() as launched:
        yield launched


@pytest.mark.browser
def test_the_runs_page_picks_a_store_and_its_pages_keep_to_it(browser: Any, tmp_path: Path) -> None:
    one_run(tmp_path / "a.db", "in-a")
    one_run(tmp_path / "b.db", "in-b")
    server = start_serve(tmp_path / "a.db", "--db", str(tmp_path / "b.db"))
    page = browser.new_page(viewport={"width": 1400, "height": 900})
    try:
        page.goto(server.base + "/")
        page.wait_for_selector("#store-picker a")
        assert page.locator("#store-picker b").inner_text() == str(tmp_path / "a.db")  # this one
        page.locator("#store-picker a").click()  # the other
        page.wait_for_selector('#runs-table tr[data-run="1"]')
        assert page.url == server.base + "/stores/1/"
        assert page.locator("#runs-table").inner_text().count("in-b") == 1
        page.locator('#runs-table tr[data-run="1"] a').first.click()
        page.wait_for_selector("circle.node")
        assert page.url == server.base + "/stores/1/runs/1"
        page.locator("circle.node").first.click()
        page.wait_for_selector(".detail #lineage-link")
        assert page.locator("#lineage-link").get_attribute("href") == "/stores/1/runs/1/lineage/1"
        assert page.locator("header.top a", has_text="runs").get_attribute("href") == "/stores/1/"
    finally:
        page.close()
        server.stop()


def test_a_database_password_never_reaches_a_page_or_the_api(postgres: Any) -> None:
    """A PostgreSQL URL's password stays on the server: /api/runs and /api/stores name the store without it."""
    from starlette.testclient import TestClient

    from evolve.serve.app import create_app

    plain = postgres.create_database("pw_hidden")
    with_password = plain.replace("evolve@", "evolve:s3cret-pw@")  # the test server trusts loopback: any password
    one_run(with_password)
    store = ProgramStore(with_password, mode="read")
    try:
        client = TestClient(create_app(store), base_url="http://127.0.0.1")
        answers = [client.get(path).text for path in ("/api/runs", "/api/stores", "/")]
    finally:
        store.close()
    assert all("s3cret-pw" not in answer for answer in answers)
    assert "pw_hidden" in answers[0] and "pw_hidden" in answers[1]

