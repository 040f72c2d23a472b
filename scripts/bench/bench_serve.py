"""Benchmark: `evolve serve` on a 100,000-program run: what a poll, a tree page, the whole tree and a program cost
over HTTP, and (with --browser) how long headless Chromium takes to draw the whole tree.

The store is built by scripts/bench/bench_resume.py's builder (bulk SQL: three islands, a parent per program, a policy
call per iteration); `evolve serve --port 0` runs as a subprocess and is asked over loopback (medians of 5).

    .venv/bin/python scripts/bench/bench_serve.py [--programs 100000] [--db /tmp/bench_serve.db] [--keep] [--browser]
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

import httpx

ROOT = Path(__file__).resolve().parents[2]
sys.path[:0] = [str(ROOT / "scripts"), str(ROOT / "tests")]

from bench_resume import build  # noqa: E402
from serve_run import start_serve  # noqa: E402

REPEATS = 5


def timed(url: str) -> float:
    times = []
    for _ in range(REPEATS):
        started = time.perf_counter()
        response = httpx.get(url, timeout=300)
        times.append(time.perf_counter() - started)
        response.raise_for_status()
    return statistics.median(times)


def whole_tree(base: str) -> tuple[int, float]:
    started, last, count = time.perf_counter(), 0, 0
    while True:
        page = httpx.get(f"{base}/api/runs/1/tree", params={"since": last}, timeout=300).json()
        count, last = count + len(page["nodes"]), page["last"]
        if not page["more"]:
            return count, time.perf_counter() - started


def browser_draw(base: str, programs: int) -> float:
    from playwright.sync_api import sync_playwright

    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path="/usr/bin/chromium", headless=True)
        page = browser.new_page(viewport={"width": 1500, "height": 950})
        started = time.perf_counter()
        page.goto(f"{base}/runs/1")
        count = page.locator("#program-count")
        while count.count() == 0 or count.inner_text() != str(programs) or "loading" in page.locator(
                "#live").inner_text():
            page.wait_for_timeout(100)
        elapsed = time.perf_counter() - started
        browser.close()
    return elapsed


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--programs", type=int, default=100_000)
    parser.add_argument("--db", type=Path, default=Path("/tmp/bench_serve.db"))
    parser.add_argument("--keep", action="store_true", help="reuse --db if it exists")
    parser.add_argument("--browser", action="store_true", help="also time the whole tree drawn in Chromium")
    args = parser.parse_args()
    if not (args.keep and args.db.exists()):
        args.db.unlink(missing_ok=True)
        started = time.perf_counter()
        build(args.db, args.programs)
        print(f"built {args.programs} programs in {time.perf_counter() - started:.1f} s")
    served = start_serve(args.db)
    try:
        base = served.base
        httpx.get(f"{base}/api/runs/1", timeout=300).raise_for_status()  # the run's counts, computed once
        for what, path in (("poll with nothing new (tree?since=last)", f"tree?since={args.programs}"),
                           ("tree page of 2000 programs", "tree?since=0"),
                           ("program detail (code, diff, prompt)", f"programs/{args.programs // 2}")):
            print(f"{what}: {timed(f'{base}/api/runs/1/{path}') * 1e3:.0f} ms")
        count, elapsed = whole_tree(base)
        print(f"whole tree over HTTP: {count} programs in {elapsed:.1f} s")
        if args.browser:
            print(f"whole tree drawn in Chromium: {browser_draw(base, args.programs):.1f} s")
    finally:
        served.stop()


if __name__ == "__main__":
    main()
