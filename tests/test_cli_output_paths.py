"""What the command line writes and prints loses nothing and says one line when it cannot: a run's store that would
vanish at exit (':memory:', '') is refused; --out files are written beside their target and renamed into place, only
once the run they export is known; an output path that cannot be written is one line naming it (for `sample`,
before any sampling); a --problems-file that is not UTF-8, a --score-range that is not finite, likewise; a database
password is never printed; and run.stop_when_solved drops the iterations still in flight, as its description says."""

from __future__ import annotations

import errno
import socket
import threading
import time
from io import StringIO
from pathlib import Path
from typing import Any

import pytest
from canned_http import ThreadedLoopbackServer, chat_reply, json_handler, models_reply
from fake_policy_server import BODIES
from pydantic import ValidationError
from rich.console import Console
from test_hardening import PROGRAMS, small_store

from evolve.cli.main import main
from evolve.config import ConfigError, RunSection, load_config, memory_store
from evolve.engine.experiment_spec import ExperimentSpec, load_experiment

ROOT = Path(__file__).resolve().parents[1]
DEAD_POLICY = ["--set", "policy.backend='openai'", "--set", "policy.url='http://127.0.0.1:9/v1'"]


def one_line(capsys: pytest.CaptureFixture[str], code: int, expected_code: int = 1) -> str:
    out = capsys.readouterr()
    text = (out.out + out.err).strip()
    assert code == expected_code and "Traceback" not in text and len(text.splitlines()) == 1, (code, text)
    return text


def closed_port() -> int:
    """A loopback port nothing listens on (bound, then let go)."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


# ---------------------------------------------------------------- a store that outlives the process


@pytest.mark.parametrize("db", [":memory:", "", "  ", "sqlite://", "sqlite:///:memory:", "sqlite+pysqlite://",
                                "sqlite:///file::memory:?uri=true", "sqlite:///file:x?mode=memory&uri=true"])
def test_an_in_memory_or_empty_store_is_refused_in_one_config_line(db: str) -> None:
    assert memory_store(db)
    with pytest.raises(ConfigError, match=r"run\.db.*(in-memory SQLite database ends with the process|an empty "
                                          r"value names no store).*give a file path"):
        load_config(None, {"run.db": db})


@pytest.mark.parametrize("db", ["evolve.db", "runs/a.db", "/tmp/x.db", "sqlite:///evolve.db", "sqlite:////tmp/x.db",
                                "postgresql://u@127.0.0.1/x", "mysql+pymysql://u@h/db"])
def test_a_store_in_a_file_or_on_a_server_is_kept(db: str) -> None:
    assert memory_store(db) == "" and RunSection(db=db).db == db


@pytest.mark.parametrize("flags", [["--db", ":memory:"], ["--set", 'run.db=""'], ["--set", "run.db='sqlite://'"]])
def test_run_into_a_store_that_vanishes_at_exit_is_refused_before_anything_runs(
        flags: list[str], tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.chdir(tmp_path)
    text = one_line(capsys, main(["run", "--plain", "--problem", "fizzbuzz", "--iterations", "1", "--set",
                                  f"run.programs_dir='{PROGRAMS}'", *DEAD_POLICY, *flags]), 2)
    assert text.startswith("config error: ") and "run.db" in text and "give a file path" in text, text
    assert "--resume" not in text and list(tmp_path.iterdir()) == []


@pytest.mark.parametrize("db", [":memory:", "sqlite://"])
def test_an_experiment_into_a_store_that_vanishes_at_exit_is_refused_before_any_policy_loads(
        db: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    spec = load_experiment(ROOT / "experiments" / "default.toml")
    with pytest.raises(ValidationError, match="in-memory SQLite"):  # from Python too (evolve.run_experiment's spec)
        ExperimentSpec.model_validate(spec.model_dump(mode="json") | {"db": db})
    monkeypatch.chdir(tmp_path)
    text = one_line(capsys, main(["experiment", str(ROOT / "experiments" / "default.toml"), "--db", db]), 2)
    assert text.startswith(f"config error: --db: invalid value for 'db': '{db}' (an in-memory SQLite database ends "
                           "with the process"), text
    assert list(tmp_path.iterdir()) == []


# ---------------------------------------------------------------- --out: whole files, only once the run is known


def test_export_of_a_missing_run_leaves_the_out_file_as_it_was(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.chdir(tmp_path)
    db = small_store(tmp_path)
    keep = tmp_path / "keep.jsonl"
    keep.write_text("what was there\n")
    text = one_line(capsys, main(["export", "99", "--db", str(db), "--out", str(keep)]))
    assert text == f"error: no run 99 in {db}"
    assert keep.read_text() == "what was there\n"
    assert sorted(path.name for path in tmp_path.iterdir()) == ["keep.jsonl", "small.db"]  # no partial file left
    assert main(["export", "1", "--db", str(db), "--out", str(keep)]) == 0
    assert "wrote 2 records to" in capsys.readouterr().out and len(keep.read_text().splitlines()) == 2


@pytest.mark.parametrize("command", [["show", "1:2", "--out"], ["lineage", "1", "--out"], ["export", "1", "--out"]])
def test_a_write_that_fails_midway_keeps_the_old_file_and_leaves_no_partial_one(
        command: list[str], tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
        capsys: pytest.CaptureFixture[str]) -> None:
    import evolve.cli.common as common

    monkeypatch.chdir(tmp_path)
    db = small_store(tmp_path)
    out = tmp_path / "out.txt"
    out.write_text("kept\n")
    out.chmod(0o640)

    def full_disk(_fd: int) -> None:
        raise OSError(errno.ENOSPC, "No space left on device")

    with monkeypatch.context() as patch:
        patch.setattr(common.os, "fsync", full_disk)
        text = one_line(capsys, main([*command, str(out), "--db", str(db)]))
    assert text == f"error: cannot write {out}: No space left on device", text
    assert out.read_text() == "kept\n"
    assert sorted(path.name for path in tmp_path.iterdir()) == ["out.txt", "small.db"]
    capsys.readouterr()
    assert main([*command, str(out), "--db", str(db)]) == 0  # now written whole, keeping the file's permissions
    capsys.readouterr()
    assert out.read_text() != "kept\n" and out.stat().st_mode & 0o777 == 0o640


@pytest.mark.parametrize("command", [["show", "1:2"], ["lineage", "1"], ["export", "1"]])
@pytest.mark.parametrize("where", ["folder", "missing folder", "under a file"])
def test_an_out_path_that_cannot_be_written_is_one_line_naming_it(
        command: list[str], where: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
        capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.chdir(tmp_path)
    db = small_store(tmp_path)
    (tmp_path / "a_folder").mkdir()
    out = {"folder": "a_folder", "missing folder": "nowhere/x.txt", "under a file": "small.db/x.txt"}[where]
    text = one_line(capsys, main([*command, "--db", str(db), "--out", out]))
    reason = {"folder": "it is a folder; name a file", "missing folder": f"no folder {tmp_path / 'nowhere'}",
              "under a file": f"{tmp_path / 'small.db'} is not a folder"}[where]
    assert text == f"error: cannot write {out}: {reason}", text


def test_report_into_a_file_is_one_line_before_any_work(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.chdir(tmp_path)
    db = small_store(tmp_path)  # a store, so the command gets as far as the report's folder
    (tmp_path / "a_file").write_text("kept")
    for out, says in (("a_file", "it is a file, not a folder"), ("a_file/sub", "it lies in a_file, which is a file")):
        text = one_line(capsys, main(["report", str(ROOT / "experiments" / "default.toml"), "--db", str(db),
                                      "--out", out]))
        assert text.startswith(f"error: cannot write the report to {out}: {says}"), text
    assert (tmp_path / "a_file").read_text() == "kept"
    assert sorted(path.name for path in tmp_path.iterdir()) == ["a_file", "small.db"]


def test_a_report_file_that_cannot_be_written_is_one_report_error_line(tmp_path: Path) -> None:
    from evolve.report.report_files import ReportFolderError, write_report

    (tmp_path / "report.html").mkdir()  # where the page goes: a folder
    with pytest.raises(ReportFolderError, match=f"cannot write the report to {tmp_path}: {tmp_path}/report.html: "
                                                "Is a directory"):
        write_report(None, tmp_path, page="<html></html>")  # type: ignore[arg-type] - the page fails first


@pytest.mark.parametrize("flag", ["--out", "--hard-out"])
@pytest.mark.parametrize("where", ["a_folder", "nowhere/x.txt"])
def test_sample_checks_its_output_paths_before_sampling(
        flag: str, where: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
        capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.chdir(tmp_path)
    (tmp_path / "a_folder").mkdir()
    text = one_line(capsys, main(["sample", "--problems", "fizzbuzz", "--programs-dir", str(PROGRAMS), "--db",
                                  str(tmp_path / "s.db"), *DEAD_POLICY, flag, where]))
    assert text.startswith(f"error: cannot write {where}: "), text
    assert not (tmp_path / "s.db").exists()  # nothing sampled, no store made


def test_a_problems_file_that_is_not_utf8_is_one_config_line(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.chdir(tmp_path)
    names = tmp_path / "names.txt"
    names.write_bytes("fizzbuzz\nd\u00e9j\u00e0\n".encode("latin-1"))
    text = one_line(capsys, main(["sample", "--problems-file", str(names), "--programs-dir", str(PROGRAMS), "--db",
                                  str(tmp_path / "s.db"), *DEAD_POLICY]), 2)
    assert text == f"config error: --problems-file {names}: not UTF-8 text (byte 10 is e9); write one problem name " \
                   "per line as UTF-8", text
    assert not (tmp_path / "s.db").exists()


@pytest.mark.parametrize("score_range", ["0,inf", "-inf,1", "nan,1", "0,nan", "-1e308,1e308"])
def test_a_score_range_that_is_not_finite_is_one_config_line(
        score_range: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    experiment_file = tmp_path / "x.toml"
    experiment_file.write_text('problems = ["fizzbuzz"]\niterations = 1\n[[policies]]\nname = "p"\n')
    text = one_line(capsys, main(["report", str(experiment_file), f"--score-range={score_range}"]), 2)
    assert text.startswith(f"config error: --score-range '{score_range}': ") and "finite" in text, text


# ---------------------------------------------------------------- a database password is never printed


@pytest.mark.parametrize("command", [["runs"], ["show", "1"], ["export", "1"], ["run", "--plain", "--resume", "1"]])
def test_a_store_that_cannot_be_opened_is_named_without_its_password(
        command: list[str], tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
        capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.chdir(tmp_path)
    url = f"postgresql://u:secret@127.0.0.1:{closed_port()}/x"
    text = one_line(capsys, main([*command, "--db", url]))
    assert "secret" not in text and f"cannot open the store postgresql://u:***@127.0.0.1:{url.split(':')[3]}" in text


def test_an_unparsable_url_is_named_without_its_password(capsys: pytest.CaptureFixture[str]) -> None:
    text = one_line(capsys, main(["runs", "--db", "postgresql://u:secret@127.0.0.1:notaport/x"]))
    assert "secret" not in text and "postgresql://u:***@127.0.0.1:notaport/x" in text, text


def test_the_run_header_the_resume_hint_and_the_experiment_header_hide_the_password() -> None:
    from evolve.cli.experiments import experiment_header
    from evolve.engine.events import RunStarted
    from evolve.engine.experiment_spec import load_experiment
    from evolve.engine.run_driver import RunOutcome
    from evolve.engine.run_stats import RunStats
    from evolve.problems.problem import load_problem
    from evolve.report.run_drawing import RunDrawing, draw_outcome

    url = f"postgresql://u:secret@127.0.0.1:{closed_port()}/x"
    config = load_config(None, {"run.db": url, "run.problem": "fizzbuzz", "run.programs_dir": str(PROGRAMS),
                                "policy.backend": "openai", "policy.url": "http://127.0.0.1:9/v1"})
    console = Console(file=StringIO(), width=300)
    drawing = RunDrawing(console, live=False)
    drawing(RunStarted(1, config, load_problem("fizzbuzz", PROGRAMS), False, RunStats(iterations_target=1)))
    drawing.close()
    draw_outcome(console, RunOutcome(1, "interrupted", RunStats(iterations_target=1), url))
    printed = console.file.getvalue()
    assert "store postgresql://u:***@127.0.0.1" in printed and "--db postgresql://u:***@127.0.0.1" in printed
    header = experiment_header(load_experiment(ROOT / "experiments" / "default.toml", url))
    assert "store postgresql://u:***@127.0.0.1" in header
    assert "secret" not in printed + header


# ---------------------------------------------------------------- stop_when_solved drops what is in flight


class SolvedWhileOthersWait(ThreadedLoopbackServer):
    """An OpenAI-compatible endpoint (continuing fizzbuzz's prefilled line, as tests/fake_policy_server.py does). The
    first request goes alone (the policy's prefill probe) and gets a child that does not solve; the second gets one
    that solves, once a third request is in; the third and later wait until `release` is set. So when the solving
    child is committed, at least one iteration's request is surely in flight."""

    def __init__(self) -> None:
        self.release = threading.Event()
        self.third = threading.Event()
        self.requests = 0
        self._lock = threading.Lock()
        super().__init__(json_handler(lambda: models_reply("fake"), self._reply), name="solved-while-others-wait")

    def _reply(self, _request: bytes) -> dict[str, Any]:
        with self._lock:
            self.requests += 1
            number = self.requests
        if number == 2:
            self.third.wait(60)
        elif number >= 3:
            self.third.set()
            self.release.wait(120)
        return chat_reply(BODIES[1 if number == 1 else 2].replace("{k}", str(number)))  # 1: no FizzBuzz at 15


def test_stop_when_solved_cancels_the_iterations_in_flight_and_stores_none_of_them(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    from evolve.store.program_store import ProgramStore

    description = RunSection.model_fields["stop_when_solved"].description or ""
    assert "cancelled" in description and "dropped" in description and "are committed" not in description
    monkeypatch.chdir(tmp_path)
    db = tmp_path / "stop.db"
    with SolvedWhileOthersWait() as server:
        try:
            started = time.monotonic()
            code = main(["run", "--plain", "--problem", "fizzbuzz", "--iterations", "8", "--db", str(db),
                         "--set", f"run.programs_dir='{PROGRAMS}'", "--set", "run.concurrency=3",
                         "--set", "run.eval_workers=1", "--set", "run.stop_when_solved=true",
                         "--set", "policy.backend='openai'", "--set", f"policy.url='{server.url}'",
                         "--set", "policy.model='fake'"])
            took = time.monotonic() - started
            asked = server.requests
        finally:
            server.release.set()
    assert code == 0 and took < 100, (code, took)  # it did not wait for the answers in flight
    assert "stopped early: solved at iteration" in capsys.readouterr().out
    store = ProgramStore(str(db), mode="read")
    try:
        assert len(store.completed_iterations(1)) == 3  # the seed's, the probe's and the one that solved it
        assert store.attempt_totals(1).policy_calls == 2 < asked  # the calls still in flight: dropped, not stored
        assert store.count_programs(1) == 3 and store.first_solved(1) is not None
    finally:
        store.close()
