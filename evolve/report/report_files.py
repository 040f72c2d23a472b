"""An experiment's report as files in one folder: report.html, report.json and one CSV per table."""

from __future__ import annotations

from pathlib import Path

from evolve.report.html import report_html
from evolve.report.results import ExperimentResults
from evolve.report.results_files import write_csvs, write_json


def write_report(results: ExperimentResults, folder: Path) -> tuple[Path, ...]:
    """Write the report's files into `folder` (made if missing); the paths written, report.html first."""
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "report.html").write_text(report_html(results))
    write_json(results, folder / "report.json")
    return (folder / "report.html", folder / "report.json", *write_csvs(results, folder))
