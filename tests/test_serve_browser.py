"""`evolve serve` in headless Chromium (Playwright). While a real `evolve experiment` writes its store: the run's tree
gains programs without a reload, clicking one shows its code and its diff against its parent, and the experiment
report linked from the run opens. Over a stored run of 3,000 programs: the tree fills its pane, its edges run
straight from parent to child, it zooms around the pointer and pans, hovering a program highlights its parent and
children, diffs wrap, every page has the same bar, and a missing run gets a not-found page. Needs the `playwright`
package and a Chromium at /usr/bin/chromium (or $EVOLVE_CHROMIUM); without either it skips, saying which. Set
EVOLVE_SCREENSHOT_DIR=FOLDER to keep screenshots (docs/images/ holds the ones the guide shows)."""

from __future__ import annotations

import os
import re
import sqlite3
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from browser import chromium
from serve_run import LONG_LINE, Served, canned_policy, experiment_file, start_experiment, start_serve, tree_store

ITERATIONS = 30
PAUSE_S = 0.25  # per canned answer: the run lasts several seconds, long enough to watch it grow
# EVOLVE_SCREENSHOT_DIR=docs/images (with tests/test_report_html.py) remakes the screenshots the guide shows
SHOTS = Path(os.environ["EVOLVE_SCREENSHOT_DIR"]) if os.environ.get("EVOLVE_SCREENSHOT_DIR") else None


@pytest.fixture(scope="module")
def browser() -> Iterator[Any]:  # a playwright Browser
    with chromium() as launched:
        yield launched


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
    shots = SHOTS
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
            assert re.search(r"^\+\s+if n % 5 == 0:", diff, re.M) and "--- 1:" in diff  # RUN:N, as evolve show
            if shots:
                page.screenshot(path=str(shots / "serve_run_tree.png"))
            page.locator("summary", has_text="code").first.click()
            assert "def fizzbuzz" in page.locator("#program-code").inner_text()
            page.locator("summary", has_text="completion").click()
            assert "FizzBuzz, variant" in page.locator("#program-completion").inner_text()  # after the prefill
            assert page.locator("line.edge.chain").count() >= 1  # its ancestry is highlighted
            page.locator(".detail .links button", has_text="parent 1:").click()  # to its parent, which lists it
            page.wait_for_selector(f'.detail:not([data-program="{program_id}"]) #children')
            number = sqlite3.connect(db).execute("SELECT count(*) FROM programs WHERE run_id = 1 AND id <= ?",
                                                 (int(program_id or 0),)).fetchone()[0]
            page.locator("#children").get_by_role("button", name=f"1:{number}", exact=True).click()
            page.wait_for_selector(f'.detail[data-program="{program_id}"]')

            page.click("#program-page-link")
            page.wait_for_selector("#program-diff")
            assert page.url.endswith(f"/runs/1/programs/{program_id}")
            if shots:
                page.screenshot(path=str(shots / "serve_program.png"))

            page.click("#report-link")
            page.wait_for_load_state("load")
            assert page.url.endswith("/experiments/servetest/report")
            assert page.locator("h1").first.inner_text() == "Experiment servetest"
            assert page.locator(".chart svg").count() >= 1
            assert page.locator("header.top").count() == 1 and page.locator("nav").count() == 0  # the one bar
            page.goto(f"{served.base}/")
            page.wait_for_selector('#runs-table tr[data-run="1"]')
            assert page.locator('tr[data-run="1"] td.solved').inner_text().startswith("yes (")
            assert problems == []
        finally:
            if served is not None:
                served.stop()
            if experiment.poll() is None:
                experiment.terminate()
                experiment.wait(timeout=30)


# ---------------------------------------------------------------- a stored run of 3,000 programs

PROGRAMS = 3000
BAR = "rgb(31, 41, 55)"  # the bar's background on every page


@pytest.fixture(scope="module")
def big(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Served]:
    served = start_serve(tree_store(tmp_path_factory.mktemp("big") / "big.db", PROGRAMS))
    yield served
    served.stop()


def _open_tree(browser: Any, big: Served) -> Any:
    page = browser.new_page(viewport={"width": 1400, "height": 900})
    page.goto(f"{big.base}/runs/1")
    # the page adds and lays out the last page of programs in one task: all there means all placed
    _until(page, lambda: page.locator("circle.node").count() == PROGRAMS, 60, "the whole tree")
    return page


def _dots(page: Any) -> dict[int, dict[str, float]]:
    """Every dot drawn (the page leaves those outside the pane undrawn): id -> {x, y (its centre in the SVG),
    parent (0 for the seed)}."""
    rows = page.locator("circle.node").evaluate_all(
        "dots => dots.filter(d => d.style.display !== 'none').map(d => [+d.dataset.id, +d.getAttribute('cx'), "
        "+d.getAttribute('cy'), +d.dataset.parent])")
    return {row[0]: {"x": row[1], "y": row[2], "parent": row[3]} for row in rows}


def _scale(page: Any) -> float:
    """Pixels per column of the tree now (the page keeps its view on the SVG: "kx ky tx ty")."""
    return float((page.locator("#tree-svg").get_attribute("data-view") or "0").split()[0])


@pytest.mark.browser
def test_the_tree_fills_its_pane_and_each_edge_runs_straight_from_parent_down_to_child(browser: Any,
                                                                                       big: Served) -> None:
    page = _open_tree(browser, big)
    box = page.locator("#tree-svg").bounding_box()
    assert box is not None and box["height"] > 0.7 * 900 and box["width"] > 0.5 * 1400  # most of the window
    dots = _dots(page)
    assert len(dots) == PROGRAMS
    xs, ys = [d["x"] for d in dots.values()], [d["y"] for d in dots.values()]
    assert max(xs) - min(xs) > 0.85 * box["width"] and max(ys) - min(ys) > 0.85 * box["height"]  # fitted to it
    assert min(xs) >= 0 and max(xs) <= box["width"] and min(ys) >= 0 and max(ys) <= box["height"]
    edges = page.locator("line.edge").evaluate_all(
        "lines => lines.map(l => ['child', 'parent', 'x1', 'y1', 'x2', 'y2'].map(k => +(l.dataset[k] ?? "
        "l.getAttribute(k))))")
    assert len(edges) == PROGRAMS - 1  # one per program but the seed
    for child, parent, x1, y1, x2, y2 in edges:
        assert dots[child]["parent"] == parent
        assert (x1, y1) == (dots[parent]["x"], dots[parent]["y"]) and (x2, y2) == (dots[child]["x"], dots[child]["y"])
        assert y1 < y2  # the parent above its child
    if SHOTS:
        page.screenshot(path=str(SHOTS / "serve_tree_3000.png"))
    page.select_option("#tree-rows", "iteration")  # a row per iteration instead: 120 iterations after the seed's
    by_iteration = _dots(page)
    assert len({dot["y"] for dot in by_iteration.values()}) == 121
    assert all(by_iteration[child]["y"] > by_iteration[int(dot["parent"])]["y"]
               for child, dot in by_iteration.items() if dot["parent"])
    page.close()


@pytest.mark.browser
def test_the_tree_zooms_around_the_pointer_pans_and_hover_shows_parent_and_children(browser: Any,
                                                                                    big: Served) -> None:
    page = _open_tree(browser, big)
    dots = _dots(page)
    children: dict[int, list[int]] = {}
    for key, dot in dots.items():
        children.setdefault(int(dot["parent"]), []).append(key)
    target = max((key for key in dots if dots[key]["parent"]), key=lambda key: len(children.get(key, [])))
    parent = int(dots[target]["parent"])
    box = page.locator("#tree-svg").bounding_box()
    assert box is not None
    pointer = (round(box["x"] + dots[target]["x"]), round(box["y"] + dots[target]["y"]))  # events get whole pixels
    fitted = _scale(page)

    page.mouse.move(*pointer)
    for _ in range(6):
        page.mouse.wheel(0, -300)
    _until(page, lambda: _scale(page) > 10 * fitted, 30, "the wheel to zoom in")
    zoomed = _dots(page)
    assert len(zoomed) < len(dots) / 5  # what left the pane is not drawn
    factor = _scale(page) / fitted
    for axis, at in (("x", 0), ("y", 1)):  # the point under the pointer stayed under it
        before = box[axis] + dots[target][axis] - pointer[at]
        assert abs(box[axis] + zoomed[target][axis] - pointer[at] - before * factor) < 1.5, axis
    at = (box["x"] + zoomed[target]["x"], box["y"] + zoomed[target]["y"])

    page.mouse.move(box["x"] + 2, box["y"] + 2)
    page.mouse.move(*at)  # onto the program: its parent and children light up, with the edges to them
    _until(page, lambda: page.locator("circle.hovered").count() == 1, 30, "the hover")
    assert page.locator("circle.hovered").get_attribute("data-id") == str(target)
    assert page.locator("circle.kin-parent").get_attribute("data-id") == str(parent)
    lit = page.locator("circle.kin-child").evaluate_all("dots => dots.map(d => +d.dataset.id)")
    assert sorted(lit) == sorted(children[target]) and len(lit) >= 2
    assert page.locator("line.edge.kin").count() == 1 + len(children[target])
    assert f"parent 1:{parent}" in page.locator("#hover").inner_text()  # one run: its numbers are the ids

    page.mouse.click(*at)  # a click selects it; its diff wraps and its feedback has one label
    page.wait_for_selector(f'.detail[data-program="{target}"] #program-diff')
    diff = page.locator("#program-diff")
    assert diff.evaluate("pre => pre.scrollWidth <= pre.clientWidth") and "weight_39 * feature_39" in diff.inner_text()
    detail = page.locator("#detail").inner_text()
    assert detail.count("feedback") == 1 and "feedback:" not in detail

    move = (150 if at[0] < box["x"] + box["width"] / 2 else -150, 90 if at[1] < box["y"] + box["height"] / 2 else -90)
    to = (at[0] + move[0], at[1] + move[1])  # towards the middle: the program stays in the pane
    page.mouse.move(*at)
    page.mouse.down()
    page.mouse.move(*to, steps=5)
    page.mouse.up()  # a drag pans, and the click it ends with selects nothing
    _until(page, lambda: abs(box["x"] + _dots(page)[target]["x"] - to[0]) < 1.5, 30, "the drag to pan")
    assert abs(box["y"] + _dots(page)[target]["y"] - to[1]) < 1.5
    assert page.locator(f'.detail[data-program="{target}"]').count() == 1
    page.click("#tree-fit")
    assert _dots(page) == dots  # back to the whole tree
    page.close()


@pytest.mark.browser
def test_a_program_page_wraps_long_diff_lines(browser: Any, big: Served) -> None:
    page = browser.new_page(viewport={"width": 1000, "height": 800})
    page.goto(f"{big.base}/runs/1/programs/{PROGRAMS}")
    diff = page.wait_for_selector("#program-diff")
    assert diff is not None and LONG_LINE.strip() in diff.inner_text().replace("\n", "")
    assert diff.evaluate("pre => pre.scrollWidth <= pre.clientWidth && pre.getBoundingClientRect().right <= 1000")
    page.goto(f"{big.base}/runs/1/lineage/{PROGRAMS}")  # the lineage page's own style (as `evolve lineage` writes it)
    page.wait_for_selector("pre.diff")
    assert LONG_LINE.strip() in page.locator("pre.diff").all_inner_texts()[-1].replace("\n", "")
    assert page.evaluate("() => [...document.querySelectorAll('pre.diff')].every(pre => pre.scrollWidth <= "
                         "pre.clientWidth && pre.getBoundingClientRect().right <= 1000)")
    page.close()


@pytest.mark.browser
def test_every_page_has_the_same_bar_and_a_missing_run_gets_a_not_found_page(browser: Any, big: Served) -> None:
    page = browser.new_page(viewport={"width": 1400, "height": 900})
    for path, status in (("/", 200), ("/runs/1", 200), (f"/runs/1/programs/{PROGRAMS}", 200), ("/runs/1/lineage/40",
                         200), ("/runs/99", 404), ("/runs/1/programs/99999", 404), ("/no/such/page", 404)):
        response = page.goto(big.base + path)
        assert response is not None and response.status == status, path
        bar = page.wait_for_selector("header.top")
        assert bar is not None and page.locator("header.top").count() == 1 and page.locator("nav").count() == 0, path
        assert bar.evaluate("e => getComputedStyle(e).backgroundColor") == BAR, path
        assert page.locator("header.top a.brand").inner_text() == "evolve", path
        assert page.locator("header.top a", has_text="runs").first.get_attribute("href") == "/", path
        if status == 404:  # one message and a way back, not empty panels and the run page's hint
            assert page.locator("h1").inner_text() == "Not found", path
            assert page.locator("#tree-svg, #detail").count() == 0 and "click a program" not in page.content()
    page.goto(f"{big.base}/runs/99")
    assert page.locator("#not-found").inner_text().startswith("no run 99 in ")
    page.goto(f"{big.base}/runs/1/programs/99999")
    assert page.locator("#back").get_attribute("href") == "/runs/1"

    page.goto(f"{big.base}/")  # the runs list says "no" for a run that solved nothing, not a blank
    page.wait_for_selector('#runs-table tr[data-run="1"]')
    assert page.locator('tr[data-run="1"] td.solved').inner_text() == "no"
    page.close()
