"""A command whose reader goes away (`evolve export 1 | head`) ends quietly, as a Unix tool that SIGPIPE ended:
nothing on stderr, exit 141; what it writes to files (lineage --out) is written whatever becomes of stdout; a
broken pipe that is not stdout's is still a bug with its traceback."""

from __future__ import annotations

import io
import os
import subprocess
import sys
from pathlib import Path

import pytest
from rich.console import Console

from evolve.cli.main import exit_code

ROOT = Path(__file__).resolve().parents[1]


def chained_store(path: Path, programs: int = 40) -> str:
    """One run of `programs` programs, each the child of the one before (an attempt each, as export reads),
    with code long enough to fill a pipe."""
    from evolve.store.program_store import ProgramStore

    store = ProgramStore(str(path))
    run = store.create_run(name="r", problem="fizzbuzz", policy="p", seed=0, config_json="{}",
                           iterations_target=programs)
    parent = None
    for step in range(programs):
        code = f"x = {step}\n" + "# padding line of a long program\n" * 200
        child = store.add_program(run, code, parent, 0, step, "p" if step else "", "", {"a": step / programs},
                                  step / programs, False).id
        store.record_attempt(run, step, "child", child_code=code, program_id=child, parent_id=parent)  # exported
        parent = child
    store.close()
    return str(path)


def with_reader_gone(args: list[str], cwd: Path) -> subprocess.CompletedProcess[str]:
    """`evolve ARGS` writing into a pipe whose read end is closed before it starts."""
    read_end, write_end = os.pipe()
    os.close(read_end)
    try:
        return subprocess.run([sys.executable, "-m", "evolve.cli.main", *args], stdout=write_end,
                              stderr=subprocess.PIPE, text=True, cwd=cwd, timeout=120,
                              env={**os.environ, "PYTHONPATH": str(ROOT)})
    finally:
        os.close(write_end)


@pytest.mark.parametrize("command", [["export", "1"], ["show", "1"], ["runs"], ["show", "1", "--code"]])
def test_a_command_whose_reader_went_away_ends_quietly_with_141(command: list[str], tmp_path: Path) -> None:
    db = chained_store(tmp_path / "s.db")
    done = with_reader_gone([*command, "--db", db], tmp_path)
    assert (done.returncode, done.stderr) == (141, "")


def test_lineage_writes_its_page_whatever_becomes_of_stdout(tmp_path: Path) -> None:
    db = chained_store(tmp_path / "s.db")
    done = with_reader_gone(["lineage", "1", "40", "--out", "page.html", "--db", db], tmp_path)
    assert (done.returncode, done.stderr) == (141, "")
    assert "<html" in (tmp_path / "page.html").read_text()


def test_a_broken_pipe_that_is_not_stdout_keeps_its_traceback() -> None:
    def talks_to_a_gone_peer() -> int:
        raise BrokenPipeError(32, "Broken pipe")  # a socket's, say: stdout is fine

    with pytest.raises(BrokenPipeError):
        exit_code(talks_to_a_gone_peer, Console(file=io.StringIO()))
