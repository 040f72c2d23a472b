"""A report page's charts as standalone SVG files (figures/), for a README, a paper or slides to embed.

The report pages draw every chart as inline SVG inside `<figure class="chart" data-...>`; this module takes each
out of the finished page, names it from its data attributes (`cracked_share-iterations.svg`,
`best_score-iterations-he_023.svg`, `training-reward.svg`) and gives it a white background, so it reads the
same on a dark page as in the report. The files are the report's own drawings, never redrawn.
"""

from __future__ import annotations

import re
from html import unescape
from pathlib import Path

FIGURES_DIR = "figures"

_FIGURE = re.compile(r'<figure class="chart"(?P<attrs>[^>]*)>(?P<svg><svg\b.*?</svg>)', re.S)
_ATTR = re.compile(r'data-(?P<key>[a-z]+)="(?P<value>[^"]*)"')
_SVG_OPEN = re.compile(r"<svg\b[^>]*>")


def figure_name(attrs: str) -> str:
    """The file stem of one chart from its figure's data attributes: training-NAME, METRIC-AXIS[-PROBLEM], or
    METRIC-arms-AXIS for a chart of a study's arms (data-by="arm")."""
    data = {m["key"]: unescape(m["value"]) for m in _ATTR.finditer(attrs)}
    if "training" in data:
        parts = ["training", data["training"]]
    else:
        parts = [data.get("metric", "chart"), "arms" if data.get("by") == "arm" else "", data.get("axis", "")]
        if "problem" in data:
            parts.append(data["problem"].rsplit("/", 1)[-1])  # a problem given as a path: its folder's name
    return "-".join(_slug(part) for part in parts if part)


def page_figures(page: str) -> dict[str, str]:
    """Every chart of a report page: {file name: standalone SVG}, in the page's order; a name met twice gets -2,
    -3, ... so no chart is lost."""
    figures: dict[str, str] = {}
    for match in _FIGURE.finditer(page):
        stem = figure_name(match["attrs"])
        name, count = f"{stem}.svg", 1
        while name in figures:
            count += 1
            name = f"{stem}-{count}.svg"
        figures[name] = _standalone(match["svg"])
    return figures


def write_figures(page: str, folder: Path) -> list[Path]:
    """Write every chart of `page` into `folder`/figures/ (replacing what an earlier report left there); the
    paths written."""
    target = folder / FIGURES_DIR
    target.mkdir(parents=True, exist_ok=True)
    for stale in target.glob("*.svg"):
        stale.unlink()
    paths = []
    for name, svg in page_figures(page).items():
        path = target / name
        path.write_text(svg)
        paths.append(path)
    return paths


def _standalone(svg: str) -> str:
    opening = _SVG_OPEN.match(svg)
    assert opening is not None  # _FIGURE only matches an <svg ...> element
    background = '<rect width="100%" height="100%" fill="#ffffff"/>'
    return f'<?xml version="1.0" encoding="UTF-8"?>\n{opening.group(0)}\n{background}{svg[opening.end():]}\n'


def _slug(text: str) -> str:
    return re.sub(r"[^A-Za-z0-9_.]+", "_", text).strip("_.") or "chart"
