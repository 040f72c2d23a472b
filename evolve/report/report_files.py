"""An experiment's report as files in one folder: report.html, report.json, one CSV per table and figures/ (each
chart as a standalone SVG)."""

from __future__ import annotations

from pathlib import Path

from evolve.report.figures import FIGURES_DIR, write_figures
from evolve.report.html import report_html
from evolve.report.results import ExperimentResults
from evolve.report.results_files import write_csvs, write_json


def write_report(results: ExperimentResults, folder: Path, page: str | None = None) -> tuple[Path, ...]:
    """Write the report's files into `folder` (made if missing); the paths written, report.html first and the
    figures/ folder last. `page` is the finished report.html when a caller composed more sections into it (a
    study's arms and training); by default the experiment's own page."""
    folder.mkdir(parents=True, exist_ok=True)
    if page is None:
        page = report_html(results)
    (folder / "report.html").write_text(page)
    write_json(results, folder / "report.json")
    csvs = write_csvs(results, folder)
    write_figures(page, folder)
    return (folder / "report.html", folder / "report.json", *csvs, folder / FIGURES_DIR)
