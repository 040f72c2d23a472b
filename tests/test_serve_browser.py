"""`evolve serve` in headless Chromium (Playwright) while a real `evolve experiment` writes its store: the run's tree
gains programs without a reload, clicking one shows its code and its diff against its parent, and the experiment
report linked from the run opens. Needs the `playwright` package and a Chromium at /usr/bin/chromium (or
$EVOLVE_CHROMIUM); without either it skips, saying which. Set EVOLVE_SERVE_SHOTS=FOLDER to keep screenshots."""

from __future__ import annotations

import os
import re
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from serve_run import canned_policy, experiment_file, start_experiment, start_serve

CHROMIUM = os.environ.get("EVOLVE_CHROMIUM", "/usr/bin/chromium")
ITERATIONS = 30
PAUSE_S = 0.25  # per canned answer: the run lasts several seconds, long enough to watch it grow


@pytest.fixture(scope="module")
def browser() -> Iterator[Any]:  # a playwright Browser
    try:
        from playwright.sync_api import Error, sync_playwright
    except ImportError:
        pytest.skip("the playwright package is not installed (pip install playwright)")
    if not Path(CHROMIUM).exists():
        pytest.skip(f"no Chromium at {CHROMIUM} (apt-get install -y chromium, or set EVOLVE_CHROMIUM)")
    with sync_playwright() as playwright:
        try:
            launched = playwright.chromium.launch(executable_path=CHROMIUM, headless=True)
        except Error as exc:
            pytest.skip(f"Chromium at {CHROMIUM} does not start: {str(exc).splitlines()[0]}")
        yield launched
        launched.close()


def _wait_for(condition: Any, timeout_s: float, what: str) -> None:
    deadline = time.monotonic() + timeout_s
    while not condition():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.1)


def _until(page: Any, condition: Any, timeout_s: float, what: str) -> None:
    """Poll `condition` while the page runs its own scripts (the page's CSP refuses wait_for_function's eval)."""
    deadline = time.monotonic() + timeout_s
    while not condition():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        page.wait_for_timeout(100)


def _programs_in_store(db: Path) -> int:
    import sqlite3

    if not db.exists():
        return 0
    try:
        with sqlite3.connect(f"file:{db}?mode=ro", uri=True, timeout=5) as connection:
            return int(connection.execute("SELECT COUNT(*) FROM programs").fetchone()[0])
    except sqlite3.Error:
        return 0


@pytest.mark.browser
def test_the_tree_grows_live_and_a_click_shows_code_diff_and_the_report(browser: Any, tmp_path: Path) -> None:
    shots = Path(os.environ["EVOLVE_SERVE_SHOTS"]) if os.environ.get("EVOLVE_SERVE_SHOTS") else None
    db = tmp_path / "servetest.db"
    with canned_policy(PAUSE_S) as url:
        experiment = start_experiment(experiment_file(tmp_path, url, ITERATIONS))
        served = None
        try:
            _wait_for(db.exists, 120, "the experiment's store")
            served = start_serve(db)  # starts while the experiment loads its problem and policy
            _wait_for(lambda: _programs_in_store(db) >= 2, 120, "the run's first child in the store")
            page = browser.new_page(viewport={"width": 1500, "height": 950})
            problems: list[str] = []
            page.on("pageerror", lambda error: problems.append(str(error)))
            page.on("console", lambda message: problems.append(message.text) if message.type == "error" else None)
            page.on("request", lambda request: None if request.url.startswith(served.base) else
                    problems.append(f"outside request: {request.url}"))
            page.goto(f"{served.base}/runs/1")
            page.wait_for_selector("circle.node")
            first = page.locator("circle.node").count()
            assert experiment.poll() is None, "the run ended before the page could watch it"
            assert "live" in page.locator("#live").inner_text()
            # the page was not reloaded: only the poll can add programs
            _until(page, lambda: page.locator("circle.node").count() > first, 60, "the tree to gain a program")
            if shots:
                page.screenshot(path=str(shots / "tree_live.png"))
            assert page.locator("#tree .lane").count() == 2  # one lane per island

            experiment.wait(timeout=180)
            _until(page, lambda: "finished" in page.locator("#live").inner_text(), 30, "the page to see the end")
            stored = _programs_in_store(db)
            assert page.locator("circle.node").count() == stored  # every program drawn once
            assert page.locator("circle.node.solved").count() >= 1

            page.click("#best-link")  # the header's best score selects the best program
            page.wait_for_selector(".detail .solved-badge")

            child = page.locator("circle.node.solved").first
            program_id = child.get_attribute("data-id")
            child.click()
            page.wait_for_selector(f'.detail[data-program="{program_id}"]')
            diff = page.locator("#program-diff").inner_text()
            assert re.search(r"^\+\s+if n % 5 == 0:", diff, re.M) and "--- #" in diff
            if shots:
                page.screenshot(path=str(shots / "tree_selected.png"))
            page.locator("summary", has_text="code").first.click()
            assert "def fizzbuzz" in page.locator("#program-code").inner_text()
            page.locator("summary", has_text="completion").click()
            assert "FizzBuzz, variant" in page.locator("#program-completion").inner_text()  # after the prefill
            assert page.locator("path.edge.chain").count() >= 1  # its ancestry is highlighted
            page.locator(".detail .links button", has_text="parent #").click()  # to its parent, which lists it
            page.wait_for_selector(f'.detail:not([data-program="{program_id}"]) #children')
            page.locator("#children").get_by_role("button", name=f"#{program_id}", exact=True).click()
            page.wait_for_selector(f'.detail[data-program="{program_id}"]')

            page.click("#program-page-link")
            page.wait_for_selector("#program-diff")
            assert page.url.endswith(f"/runs/1/programs/{program_id}")
            if shots:
                page.screenshot(path=str(shots / "program.png"), full_page=True)

            page.click("#report-link")
            page.wait_for_load_state("load")
            assert page.url.endswith("/experiments/servetest/report")
            assert page.locator("h1").first.inner_text() == "Experiment servetest"
            assert page.locator(".chart svg").count() >= 1
            if shots:
                page.screenshot(path=str(shots / "report.png"))
            assert problems == []
        finally:
            if served is not None:
                served.stop()
            if experiment.poll() is None:
                experiment.terminate()
                experiment.wait(timeout=30)
