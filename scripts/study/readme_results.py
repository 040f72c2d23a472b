"""Put a finished study's results into README.md: the text between `<!-- results:start -->` and
`<!-- results:end -->` becomes evolve.report.study_markdown's Markdown of STUDY/report/study_report.json, its figures
linked from the README's folder (issue 28, item 6): its shorter form, which links STUDY/report/results.md for each
problem's cells, the wall time and every figure. The hardware and what can be concluded stay the README's own
words, outside the markers.

    .venv/bin/python scripts/study/readme_results.py studies/study_cpu/report [--readme README.md]
"""

from __future__ import annotations

import argparse
import json
import os
from pathlib import Path

from evolve.report.figures import FIGURES_DIR
from evolve.report.study_markdown import results_markdown

START, END = "<!-- results:start -->", "<!-- results:end -->"


def with_results(readme: str, markdown: str) -> str:
    """`readme` with the text between the markers replaced by `markdown`; ValueError when the markers are missing."""
    start, end = readme.find(START), readme.find(END)
    if start < 0 or end < start:
        raise ValueError(f"README has no {START} ... {END} pair to fill")
    return readme[:start + len(START)] + "\n" + markdown.rstrip() + "\n" + readme[end:]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("report", type=Path, help="the study's report folder (STUDY/report)")
    parser.add_argument("--readme", type=Path, default=Path("README.md"))
    args = parser.parse_args()
    document = json.loads((args.report / "study_report.json").read_text())
    figures = args.report / FIGURES_DIR
    present = [path.name for path in figures.glob("*.svg")]
    readme_dir = args.readme.resolve().parent
    link = Path(os.path.relpath(figures.resolve(), readme_dir))
    whole = Path(os.path.relpath((args.report / "results.md").resolve(), readme_dir))
    text = with_results(args.readme.read_text(), results_markdown(document, link.as_posix(), present,
                                                                  whole=whole.as_posix()))
    args.readme.write_text(text)
    print(f"{args.readme}: results of {document.get('study', '?')} written between the markers "
          f"({len(present)} figures in {figures})")


if __name__ == "__main__":
    main()
