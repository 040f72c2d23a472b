"""Writes tests/file_seconds.json, each test file's seconds (its test cases' setup + call + teardown summed) from a
pytest JUnit XML report; tests/conftest.py hands the longest files to the parallel workers first.

    bash scripts/test.sh --junitxml=/tmp/suite.xml -o junit_family=xunit2
    .venv/bin/python scripts/dev/test_file_seconds.py /tmp/suite.xml
"""

from __future__ import annotations

import argparse
import json
import xml.etree.ElementTree as ElementTree
from collections import defaultdict
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
TABLE = ROOT / "tests" / "file_seconds.json"


def file_seconds(report: Path) -> dict[str, float]:
    """{'tests/test_x.py': seconds}, from the test cases' `file` attribute or else their class name."""
    seconds: dict[str, float] = defaultdict(float)
    for case in ElementTree.parse(report).iter("testcase"):
        path = case.get("file") or _module_path(case.get("classname", ""))
        if path:
            seconds[path] += float(case.get("time") or 0.0)
    return {path: round(total, 1) for path, total in sorted(seconds.items(), key=lambda item: -item[1])}


def _module_path(classname: str) -> str:
    """'tests.test_x' or 'tests.test_x.TestClass' -> 'tests/test_x.py'."""
    parts = [part for part in classname.split(".") if part]
    while parts and not (ROOT / Path(*parts).with_suffix(".py")).is_file():
        parts.pop()
    return f"{Path(*parts).as_posix()}.py" if parts else ""


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("report", type=Path, help="pytest's --junitxml file")
    parser.add_argument("--out", type=Path, default=TABLE)
    args = parser.parse_args()
    table = file_seconds(args.report)
    args.out.write_text(json.dumps(table, indent=1) + "\n")
    print(f"wrote {args.out}: {len(table)} files, {sum(table.values()):.0f} s in all")


if __name__ == "__main__":
    main()
