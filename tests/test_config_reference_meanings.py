"""The configuration reference gives every key a meaning, shows descriptions as written, and lays its tables out to
fit the page (issue 58 item 13)."""

from __future__ import annotations

import re
import runpy
from pathlib import Path
from types import SimpleNamespace

import pytest

ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="module")
def gen() -> SimpleNamespace:
    return SimpleNamespace(**runpy.run_path(str(ROOT / "scripts" / "dev" / "gen_reference.py")))


def _rows(page: str) -> list[tuple[str, str, list[str]]]:
    """(section heading, key, cells) of every key row of the page's tables."""
    found = []
    for chunk in page.split("\n### ")[1:]:
        heading, _, body = chunk.partition("\n")
        for line in body.splitlines():
            if line.startswith("| `"):
                cells = [part.strip() for part in re.split(r"(?<!\\)\|", line.strip())[1:-1]]
                found.append((heading, cells[0].strip("`"), cells))
    return found


def test_every_key_of_the_configuration_reference_has_a_meaning(gen: SimpleNamespace) -> None:
    rows = _rows(gen.config_reference())
    assert len(rows) > 150
    assert [f"{heading}: {key}" for heading, key, cells in rows if not cells[-1]] == []


def test_problem_toml_keys_once_without_a_meaning_have_one(gen: SimpleNamespace) -> None:
    problem = gen.config_reference().split("\n## problem.toml")[1].split("\n## ")[0]
    meanings = {key: cells[-1] for _, key, cells in _rows(problem)}
    for key in ("name", "count", "pattern", "reduction", "wall_time_s", "cpu_time_s", "memory_mb", "max_processes",
                "max_output_bytes", "features"):
        assert len(meanings[key]) > 10, key


def test_a_meaning_with_angle_brackets_is_shown_not_parsed_as_html(gen: SimpleNamespace) -> None:
    assert gen.cell("<tag_1>...</tag_1> and `<code>`") == "&lt;tag_1&gt;...&lt;/tag_1&gt; and `<code>`"


def test_the_site_lays_the_configuration_tables_out_in_its_own_stylesheet(gen: SimpleNamespace) -> None:
    page = SimpleNamespace(file=SimpleNamespace(src_uri=gen.CONFIG_PAGE))
    other = SimpleNamespace(file=SimpleNamespace(src_uri="index.md"))
    assert gen.on_page_content("<table></table>", page, None, None).startswith(f'<div class="{gen.CONFIG_CLASS}">')
    assert gen.on_page_content("<table></table>", other, None, None) == "<table></table>"
    mkdocs = (ROOT / "mkdocs.yml").read_text()
    stylesheet = re.search(r"extra_css:\n\s+- (\S+)", mkdocs)
    assert stylesheet is not None
    css = (ROOT / "docs" / stylesheet.group(1)).read_text()
    assert f".{gen.CONFIG_CLASS} table" in css and "white-space: nowrap" in css and "min-width: 0" in css
