"""An experiment's report as files in one folder: report.html, report.json, one CSV per table and figures/ (each
chart as a standalone SVG)."""

from __future__ import annotations

import os
from pathlib import Path

from evolve.errors import UserError
from evolve.report.figures import FIGURES_DIR, write_figures
from evolve.report.html import report_html
from evolve.report.results import ExperimentResults
from evolve.report.results_files import write_csvs, write_json


def write_report(results: ExperimentResults, folder: Path, page: str | None = None) -> tuple[Path, ...]:
    """Write the report's files into `folder` (made if missing); the paths written, report.html first and the
    figures/ folder last. `page` is the finished report.html when a caller composed more sections into it (a
    study's arms and training); by default the experiment's own page."""
    check_report_folder(folder)
    if page is None:
        page = report_html(results)
    try:
        folder.mkdir(parents=True, exist_ok=True)
        (folder / "report.html").write_text(page, encoding="utf-8")
        write_json(results, folder / "report.json")
        csvs = write_csvs(results, folder)
        write_figures(page, folder)
    except OSError as exc:  # a full disk, a file of the folder that is a folder or not ours...
        where = f"{exc.filename}: " if exc.filename else ""
        raise ReportFolderError(f"cannot write the report to {folder}: {where}{exc.strerror or exc}") from None
    return (folder / "report.html", folder / "report.json", *csvs, folder / FIGURES_DIR)


class ReportFolderError(UserError):
    """A report folder that cannot be written, as one line naming it and the reason."""


def check_report_folder(folder: Path) -> None:
    """ReportFolderError unless the report's files can be written into `folder`: a folder we may write in, or a
    path whose first existing parent is one (the folders are made then). Makes nothing: a command checks this
    before the work whose result goes there."""
    existing = folder
    while not existing.exists() and existing != existing.parent:
        if existing.is_symlink():  # a link to nowhere: mkdir would fail on it
            raise ReportFolderError(f"cannot write the report to {folder}: {existing} is a broken link")
        existing = existing.parent
    if not existing.is_dir():
        what = "is a file" if existing == folder else f"lies in {existing}, which is a file"
        raise ReportFolderError(f"cannot write the report to {folder}: it {what}, not a folder; name a folder")
    if not os.access(existing, os.W_OK | os.X_OK):
        raise ReportFolderError(f"cannot write the report to {folder}: {existing} is not writable (permission "
                                "denied)")
