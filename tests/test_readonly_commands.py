"""Commands that only read write nothing: after `evolve study FILE --status`, `runs`, `show`, `lineage`, `export`,
`problems` and `check`, every file and folder under the test's folder (the working directory, the store, the study
folder, the problem folder) is byte-identical to what it was, and a study folder that did not exist still does not.
"""

from __future__ import annotations

import shutil
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from fake_policy_server import FakePolicyServer
from test_study import STUDY  # a tiny study: 3 algorithms x 2 training seeds, 7 cells

from evolve.cli.main import main

ROOT = Path(__file__).resolve().parents[1]



def tree(root: Path) -> dict[str, bytes | None]:
    """Every path under root: a file's bytes, None for a folder."""
    return {str(path.relative_to(root)): None if path.is_dir() else path.read_bytes()
            for path in sorted(root.rglob("*"))}


@pytest.fixture(scope="module")
def finished_run(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A folder holding a store with one finished run of fizzbuzz (2 iterations, children from a fake policy)."""
    folder = tmp_path_factory.mktemp("readonly")
    with FakePolicyServer(latency_s=0.0) as server:  # a process of its own, so that its store is closed as a user's
        subprocess.run([sys.executable, "-m", "evolve.cli.main", "run", "--plain", "--db", str(folder / "runs.db"),
                        "--problem", "fizzbuzz", "--iterations", "2", "--set", f"run.programs_dir='{ROOT / 'programs'}'",
                        "--set", "policy.backend='openai'", "--set", f"policy.url='{server.url}'",
                        "--set", "policy.model='fake'"], check=True, timeout=300, capture_output=True)
    shutil.copytree(ROOT / "programs" / "fizzbuzz", folder / "fizzbuzz")
    (folder / "study.toml").write_text(STUDY)
    return folder


@pytest.fixture
def inside(finished_run: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    monkeypatch.chdir(finished_run)  # a file a command made in the working directory would show too
    yield finished_run


@pytest.mark.parametrize("argv", [
    ["runs", "--db", "runs.db"],
    ["show", "1", "--db", "runs.db"],
    ["show", "1:2", "--db", "runs.db"],
    ["show", "1", "--json", "--db", "runs.db"],
    ["lineage", "1", "--db", "runs.db"],
    ["export", "1", "--db", "runs.db"],
    ["problems", "--programs-dir", str(ROOT / "programs")],
    ["check", "fizzbuzz", "--programs-dir", "."],
    ["check", "fizzbuzz", "--programs-dir", ".", "--solution", str(ROOT / "tests" / "solutions" / "fizzbuzz.py")],
    ["study", "study.toml", "--out", "fresh_study", "--status"],
    ["study", "study.toml", "--out", "fresh_study", "--db", "runs.db", "--status"],
])
def test_a_reading_command_leaves_every_byte_as_it_was(inside: Path, argv: list[str],
                                                        capsys: pytest.CaptureFixture[str]) -> None:
    before = tree(inside)
    code = main(argv)
    out = capsys.readouterr().out
    assert code == 0, out
    assert tree(inside) == before, argv


def test_the_status_of_a_study_under_way_reads_its_folder_and_store_and_changes_neither(
        inside: Path, capsys: pytest.CaptureFixture[str]) -> None:
    study = inside / "study_under_way"
    study.mkdir(exist_ok=True)
    shutil.copy(inside / "runs.db", study / "study.db")
    (study / "study_state.json").write_text(f'{{"db": "{study / "study.db"}", "seconds": {{"train": 120.0}}}}\n')
    before = tree(inside)
    assert main(["study", "study.toml", "--out", str(study), "--status"]) == 0
    out = " ".join(capsys.readouterr().out.split())
    assert "1. train to do 0/6 training runs" in out and "120 s so far" in out, out
    assert tree(inside) == before


def test_the_status_of_a_study_never_run_creates_no_folder(inside: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["study", "study.toml", "--out", "never_run", "--status"]) == 0
    assert "3. evolve  to do    0/7 cells finished (0 started)" in capsys.readouterr().out
    assert not (inside / "never_run").exists()


def test_the_status_of_a_study_whose_store_has_no_tables_yet_makes_none(
        inside: Path, postgresql_url: str, capsys: pytest.CaptureFixture[str]) -> None:
    from sqlalchemy import create_engine, inspect

    assert main(["study", "study.toml", "--out", "never_run", "--db", postgresql_url, "--status"]) == 0
    assert "2. sample  to do    0/7 (policy, problem) runs" in capsys.readouterr().out
    engine = create_engine(postgresql_url)
    try:
        assert inspect(engine).get_table_names() == []
    finally:
        engine.dispose()
    assert not (inside / "never_run").exists()
