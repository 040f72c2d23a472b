"""Headless Chromium for the browser tests (Playwright): one browser launched for a test module, or the test skipped
saying what is missing (the `playwright` package, a Chromium at /usr/bin/chromium or $EVOLVE_CHROMIUM, or one that
starts).

    @pytest.fixture(scope="module")
    def browser() -> Iterator[Any]:
        with chromium() as launched:
            yield launched
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest

CHROMIUM = os.environ.get("EVOLVE_CHROMIUM", "/usr/bin/chromium")


@contextmanager
def chromium() -> Iterator[Any]:  # a playwright Browser
    """A headless Chromium at CHROMIUM while the block runs; skips the test when there is none that starts."""
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
        try:
            yield launched
        finally:
            launched.close()
