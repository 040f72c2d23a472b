"""The suite's own order: each file's measured seconds read from a JUnit report, and the longest files collected first."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "scripts" / "dev"))

from test_file_seconds import file_seconds  # noqa: E402

REPORT = """<?xml version="1.0" encoding="utf-8"?><testsuites><testsuite name="pytest">
<testcase classname="" name="tests.test_vllm_rollouts" time="0.000"><skipped message="collection skipped"/></testcase>
<testcase classname="tests.test_docs" name="test_a" time="1.5" />
<testcase classname="tests.test_train" name="test_b[vpo]" time="100.25" />
<testcase classname="tests.test_docs" name="test_c" time="2.0" />
<testcase classname="tests.test_train" name="test_d" time="0.5" />
</testsuite></testsuites>"""


def test_a_junit_report_gives_each_files_seconds_longest_first(tmp_path: Path) -> None:
    report = tmp_path / "suite.xml"
    report.write_text(REPORT)
    table = file_seconds(report)
    assert table == {"tests/test_train.py": 100.8, "tests/test_docs.py": 3.5}
    assert list(table) == ["tests/test_train.py", "tests/test_docs.py"]


def test_the_longest_file_in_the_table_is_collected_first_and_each_files_tests_stay_together() -> None:
    table = json.loads((ROOT / "tests" / "file_seconds.json").read_text())
    assert table["tests/test_train.py"] > table["tests/test_docs.py"]
    listed = subprocess.run([sys.executable, "-m", "pytest", "--collect-only", "-q", "-p", "no:cacheprovider",
                             "tests/test_docs.py", "tests/test_train.py"], cwd=ROOT, capture_output=True, text=True,
                            timeout=300)
    files = [line.split("::")[0] for line in listed.stdout.splitlines() if "::" in line]
    assert files and files[0] == "tests/test_train.py"
    first_docs = files.index("tests/test_docs.py")
    assert set(files[:first_docs]) == {"tests/test_train.py"} and set(files[first_docs:]) == {"tests/test_docs.py"}
