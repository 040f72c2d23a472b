"""The command line's edges: a bad flag value, an unknown command or choice is one error line and at most a hint
line (never argparse's usage block); every flag of every command has help text; tab completion answers from the
one parser (argcomplete) and `evolve completion SHELL` prints the code a shell loads."""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
from pathlib import Path

import pytest

from evolve.cli.main import _parser, main

ROOT = Path(__file__).resolve().parents[1]


@pytest.mark.parametrize(("argv", "error"), [
    (["run", "--iterations", "abc"], "evolve run: error: argument --iterations: invalid int value: 'abc'"),
    (["rnu"], "evolve: error: argument COMMAND: invalid choice: 'rnu' (choose from"),
    (["import", "mbpp"],
     "evolve import: error: argument dataset: invalid choice: 'mbpp' (choose from 'humaneval', 'generated')"),
    ([], "evolve: error: the following arguments are required: COMMAND"),
    (["show", "3", "--no-such-flag"], "evolve: error: unrecognized arguments: --no-such-flag"),
])
def test_an_argument_error_is_one_line_and_a_hint_without_the_usage_block(
        argv: list[str], error: str, capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exited:
        main(argv)
    assert exited.value.code == 2
    captured = capsys.readouterr()
    lines = captured.err.splitlines()
    assert len(lines) == 2 and lines[0].startswith(error), captured.err
    assert lines[1].startswith("hint: ") and "--help`" in lines[1], captured.err
    assert "usage:" not in captured.err + captured.out


def test_a_mistyped_command_gets_the_closest_one_as_a_hint(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit):
        main(["lineag", "3"])
    assert capsys.readouterr().err.splitlines()[1] == "hint: did you mean `evolve lineage`? see `evolve --help`"


def _flags_without_help(parser: argparse.ArgumentParser, name: str) -> list[str]:
    missing: list[str] = []
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            missing += [f"{name} {choice.dest} (command)" for choice in action._choices_actions if not choice.help]
            for command, sub in action.choices.items():
                missing += _flags_without_help(sub, f"{name} {command}")
        elif not action.help:
            missing.append(f"{name} {'/'.join(action.option_strings) or action.dest}")
    return missing


def test_every_flag_of_every_command_has_help_text() -> None:
    assert _flags_without_help(_parser(), "evolve") == []


@pytest.mark.parametrize("command", ["show", "lineage", "export", "runs"])
def test_the_config_flag_says_what_it_is_for(command: str, capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit):
        main([command, "--help"])
    out = " ".join(capsys.readouterr().out.split())
    assert "--config CONFIG, -c CONFIG TOML config" in out, out


def test_tab_completion_answers_commands_flags_and_choices(tmp_path: Path) -> None:
    pytest.importorskip("argcomplete")

    def completions(line: str) -> set[str]:
        answer = tmp_path / "completions"
        env = {**os.environ, "_ARGCOMPLETE": "1", "COMP_LINE": line, "COMP_POINT": str(len(line)),
               "_ARGCOMPLETE_STDOUT_FILENAME": str(answer)}
        subprocess.run([sys.executable, "-m", "evolve.cli.main"], cwd=tmp_path, env=env, check=True, timeout=120,
                       stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        return {word.strip() for word in answer.read_text().split("\013")}

    assert completions("evolve ru") == {"run", "runs"}
    assert "--pairs" in completions("evolve report default --pa")
    assert "humaneval" in completions("evolve import ")


@pytest.mark.parametrize("shell", ["bash", "zsh", "fish"])
def test_the_completion_command_prints_the_code_a_shell_loads(shell: str, capsys: pytest.CaptureFixture[str]) -> None:
    pytest.importorskip("argcomplete")
    assert main(["completion", shell]) == 0
    code = capsys.readouterr().out
    assert "evolve" in code and "_ARGCOMPLETE" in code


def test_the_completion_command_without_argcomplete_says_what_to_install(
        monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.setitem(sys.modules, "argcomplete", None)  # import argcomplete now raises ImportError
    assert main(["completion", "bash"]) == 1
    out = " ".join(capsys.readouterr().out.split())
    assert out == "error: shell completion needs argcomplete: pip install argcomplete"


def test_a_background_command_started_with_sigint_ignored_stops_on_sigint_in_synchronous_work(
        tmp_path: Path) -> None:
    # A script's `nohup evolve ... &` job starts with SIGINT ignored; `scripts/study/study.sh save` stops it with
    # SIGINT. Here the command is held in synchronous work by a study file that is a pipe with nobody writing yet.
    import signal

    fifo = tmp_path / "study.toml"
    os.mkfifo(fifo)
    command = subprocess.Popen([sys.executable, "-m", "evolve.cli.main", "study", str(fifo)], cwd=ROOT,
                               stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                               preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_IGN))
    try:
        # opening the write end waits for the command to open the read end: after that it is blocked reading
        with open(fifo, "w"):
            command.send_signal(signal.SIGINT)
            output, _ = command.communicate(timeout=120)
    finally:
        command.kill()
    assert command.returncode == 130, output
    assert output.strip().splitlines()[-1] == "interrupted" and "Traceback" not in output, output


@pytest.mark.parametrize("argv", [["runs"], ["show", "1"], ["run", "--iterations", "1"]])
def test_a_store_or_problem_missed_without_an_evolve_toml_here_suggests_the_config_flag(
        argv: list[str], tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.chdir(tmp_path)  # no evolve.toml, no programs/, no store: the defaults point at nothing
    assert main(argv) == 1
    out = " ".join(capsys.readouterr().out.split())
    assert out.startswith("error: ") and out.endswith(
        "; no evolve.toml in this folder, so the defaults were read: name your config with -c/--config FILE"), out


def test_with_the_store_named_no_config_hint_is_given(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                      capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.chdir(tmp_path)
    assert main(["runs", "--db", "other.db"]) == 1
    assert capsys.readouterr().out.strip() == "error: no store at other.db"
