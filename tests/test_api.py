"""The public API (`import evolve`) and UserError: light to import, every name there, a real run through it, and
every error the user can fix printed by the CLI as one line."""

from __future__ import annotations

import ast
import importlib
import io
import json
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from rich.console import Console

import evolve
from evolve.cli.main import exit_code, main
from evolve.errors import UserError
from tests.scripted_policy_server import ScriptedPolicyServer

ROOT = Path(__file__).resolve().parents[1]

RUN_LENGTH_ENCODER = '''def encode(s: str) -> str:
    """Each run of one repeated character becomes its length followed by the character."""
    variant = {number}
    out = []
    start = 0
    while start < len(s):
        end = start
        while end < len(s) and s[end] == s[start]:
            end += 1
        out.append(f"{{end - start}}{{s[start]}}")
        start = end
    return "".join(out) if variant >= 0 else ""
'''


def test_import_evolve_loads_neither_torch_nor_transformers_nor_the_engine() -> None:
    probe = ("import sys, evolve; heavy = [m for m in ('torch', 'transformers', 'sqlalchemy', 'evolve.engine.controller') "
             "if m in sys.modules]; print(heavy)")
    result = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, cwd=ROOT, timeout=120)
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "[]"


def test_every_public_name_resolves_without_torch() -> None:
    probe = ("import sys, evolve; missing = [n for n in evolve.__all__ if getattr(evolve, n, None) is None]; "
             "print(missing, 'torch' in sys.modules)")
    result = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, cwd=ROOT, timeout=120)
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "[] False"


def test_public_names_are_the_documented_ones() -> None:
    for name in ("load_config", "RunConfig", "load_problem", "Problem", "ProgramStore", "run", "run_experiment",
                 "experiment_report", "UserError", "EvaluationResult", "Sandbox", "__version__"):
        assert name in evolve.__all__, name
    assert evolve.UserError is UserError
    assert evolve.run.__module__ == "evolve.api" and callable(evolve.experiment_report)
    with pytest.raises(AttributeError):
        evolve.no_such_name  # noqa: B018 - the attribute access is the test


def test_python_dash_m_evolve_is_the_command_line() -> None:
    result = subprocess.run([sys.executable, "-m", "evolve", "--help"], capture_output=True, text=True, cwd=ROOT,
                            timeout=120)
    assert result.returncode == 0 and "new-problem" in result.stdout, result.stderr


# ---------------------------------------------------------------- a real run through evolve.run


@pytest.fixture
def encoder_server() -> Iterator[tuple[str, list[dict]]]:
    """A real OpenAI-compatible endpoint on loopback whose every chat answer is a correct run-length encoder (a
    different variant per request, so each child is a new program)."""
    with ScriptedPolicyServer(lambda number, body: RUN_LENGTH_ENCODER.format(number=number),
                              tokens=(50, 60)) as server:
        yield server.url, server.requests


# scores below the seed (which encodes every run as a run of one): every child is valid and worse
WORSE_ENCODER = 'def encode(s: str) -> str:\n    return "{number}" * 0\n'


def test_evolve_run_drives_a_real_run_that_stores_scored_programs(tmp_path: Path,
                                                                  encoder_server: tuple[str, list[dict]]) -> None:
    url, bodies = encoder_server
    db = tmp_path / "api.db"
    overrides = {"run.problem": "run_length", "run.programs_dir": str(ROOT / "programs"), "run.iterations": 2,
                 "run.seed": 3, "run.db": str(db), "run.concurrency": 1, "run.eval_workers": 1,
                 "policy.backend": "openai", "policy.url": url, "policy.model": "m", "policy.name": "scripted",
                 "policy.prefill": False, "policy.retries": 0}
    events: list[object] = []
    outcome = evolve.run(overrides=overrides, on_event=events.append)
    assert outcome.status == "finished"
    assert len(bodies) == 2
    kinds = [type(event).__name__ for event in events]
    assert kinds[:2] == ["RunLoading", "RunStarted"]
    assert kinds.count("RequestStarted") == kinds.count("RequestEnded") == 2
    assert kinds.count("IterationCommitted") == 2 and kinds.count("EvaluationStarted") == kinds.count("EvaluationEnded")
    assert [event.iteration for event in events if type(event).__name__ == "IterationCommitted"] == [1, 2]
    assert all(event.tokens > 0 and not event.error for event in events if type(event).__name__ == "RequestEnded")
    store = evolve.ProgramStore(str(db), mode="read")
    assert store.count_programs(outcome.run_id) == 3  # the seed and one child per iteration
    best = store.best_programs(outcome.run_id, 1)[0]
    assert best.iteration >= 1 and "variant =" in best.code
    problem = evolve.load_problem("run_length", ROOT / "programs")
    assert problem.is_solved(best.scores), best.scores


def test_evolve_run_refuses_overrides_on_a_built_config(tmp_path: Path) -> None:
    with pytest.raises(evolve.ConfigError, match="model_copy"):
        evolve.run(evolve.load_config(None), overrides={"run.seed": 2})


# ---------------------------------------------------------------- UserError through the command line


def _user_error_classes() -> list[type[UserError]]:
    """Every UserError subclass in the package: found in the source (so a new module's class is not missed), then
    imported."""
    names = {"UserError"}
    modules: dict[str, set[str]] = {}
    trees = {path: ast.parse(path.read_text()) for path in (ROOT / "evolve").rglob("*.py")}
    grew = True
    while grew:  # subclasses of subclasses, across modules
        grew = False
        for path, tree in trees.items():
            for node in ast.walk(tree):
                bases = {getattr(base, "id", getattr(base, "attr", "")) for base in getattr(node, "bases", [])}
                if isinstance(node, ast.ClassDef) and bases & names and node.name not in names:
                    names.add(node.name)
                    module = ".".join(path.relative_to(ROOT).with_suffix("").parts)
                    modules.setdefault(module, set()).add(node.name)
                    grew = True
    return [getattr(importlib.import_module(module), name) for module, found in sorted(modules.items())
            for name in sorted(found)]


def test_the_errors_a_user_can_fix_are_user_errors() -> None:
    found = {cls.__name__ for cls in _user_error_classes()}
    expected = {"ProblemError", "RunError", "SeedProgramError", "StoreError", "ModelFileError", "PolicyError",
                "TemplateError", "RolloutEngineError", "ResumeError", "ConfigError"}
    assert expected <= found, expected - found


def test_every_user_error_exits_1_with_one_line_and_config_errors_exit_2() -> None:
    long_message = "programs/nope: no such problem folder (problems in programs: " + ", ".join(["x" * 12] * 20) + ")"
    for cls in _user_error_classes():
        def command(error_type: type[UserError] = cls) -> int:
            raise error_type(long_message + "\nand a second line")

        console = Console(record=True, width=60, file=io.StringIO())
        code = exit_code(command, console)
        text = console.export_text()
        is_config = issubclass(cls, evolve.ConfigError)
        assert code == (2 if is_config else 1), cls
        assert text.count("\n") == 1 and text.startswith("config error: " if is_config else "error: "), (cls, text)
        assert "and a second line" in text, cls


def test_a_bad_problem_name_is_one_error_line_with_exit_1(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                         capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.chdir(tmp_path)
    code = main(["run", "--plain", "--problem", "nope", "--db", str(tmp_path / "x.db"),
                 f"--set=run.programs_dir=\"{ROOT / 'programs'}\""])
    out = capsys.readouterr().out
    assert code == 1
    assert out.startswith("error: ") and out.count("\n") == 1 and "nope: no such problem folder" in out, out


def test_an_engine_bug_keeps_its_traceback() -> None:
    def command() -> int:
        raise ZeroDivisionError("a bug, not the user's mistake")

    with pytest.raises(ZeroDivisionError):
        exit_code(command, Console(file=io.StringIO()))


def test_a_toml_file_that_cannot_be_read_is_one_line(tmp_path: Path) -> None:
    latin1 = tmp_path / "latin1.toml"
    latin1.write_bytes(b'[run]\nname = "caf\xe9"\n')
    with pytest.raises(evolve.ConfigError) as error:
        evolve.load_config(latin1)
    assert str(error.value) == f"{latin1}: not UTF-8 text, so not a TOML file"
    with pytest.raises(evolve.ConfigError) as error:
        evolve.load_config(tmp_path)  # a folder
    assert str(error.value).startswith(f"{tmp_path}: cannot read it (") and "\n" not in str(error.value)
    folder = tmp_path / "programs" / "broken"
    folder.mkdir(parents=True)
    for name in ("initial.py", "evaluator.py"):
        (folder / name).write_text("")
    (folder / "problem.toml").write_bytes(b'name = "broken\xff"\n')
    with pytest.raises(evolve.ProblemError, match="not UTF-8 text"):
        evolve.load_problem("broken", tmp_path / "programs")


# ---------------------------------------------------------------- what a new user meets (issue 30, items 1 and 4)


def scripted_overrides(url: str, db: Path) -> dict[str, object]:
    return {"run.problem": "run_length", "run.programs_dir": str(ROOT / "programs"), "run.iterations": 2,
            "run.seed": 3, "run.db": str(db), "run.concurrency": 1, "run.eval_workers": 1,
            "policy.backend": "openai", "policy.url": url, "policy.model": "m", "policy.name": "scripted",
            "policy.prefill": False, "policy.retries": 0}


def cli_run(url: str, db: Path, capsys: pytest.CaptureFixture[str]) -> str:
    flags = [f"--set={key}={json.dumps(value)}" for key, value in scripted_overrides(url, db).items()
             if key not in ("run.problem", "run.iterations", "run.db")]
    code = main(["run", "--plain", "--problem", "run_length", "--iterations", "2", "--db", str(db), *flags])
    assert code == 0
    return capsys.readouterr().out


def test_the_end_of_a_run_says_when_no_child_beat_the_seed(tmp_path: Path,
                                                           capsys: pytest.CaptureFixture[str]) -> None:
    with ScriptedPolicyServer(lambda number, body: WORSE_ENCODER.format(number=number),
                              tokens=(50, 60)) as server:
        out = cli_run(server.url, tmp_path / "worse.db", capsys)
    assert "no child beat the seed program (scalar " in out and "2 valid children evaluated" in out
    assert "the best program is still the seed" in out


def test_the_end_of_a_run_gives_the_best_child_against_the_seed(tmp_path: Path,
                                                                encoder_server: tuple[str, list[dict]],
                                                                capsys: pytest.CaptureFixture[str]) -> None:
    out = cli_run(encoder_server[0], tmp_path / "better.db", capsys)
    line = next(line for line in out.splitlines() if "beat the seed" in line)
    assert line.startswith("the best child, 1:") and "against" in line and "solves the problem" in line


def test_the_python_api_prints_nothing_unless_asked(tmp_path: Path, encoder_server: tuple[str, list[dict]],
                                                    capsys: pytest.CaptureFixture[str]) -> None:
    outcome = evolve.run(overrides=scripted_overrides(encoder_server[0], tmp_path / "quiet.db"))
    assert outcome.status == "finished" and outcome.db == str(tmp_path / "quiet.db")
    assert capsys.readouterr() == ("", "")


def test_a_config_file_elsewhere_reads_its_paths_from_its_own_folder(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                                     encoder_server: tuple[str, list[dict]]) -> None:
    project = tmp_path / "project"
    (project / "problems").mkdir(parents=True)
    import shutil

    shutil.copytree(ROOT / "programs" / "run_length", project / "problems" / "run_length")
    (project / "evolve.toml").write_text(
        '[run]\nproblem = "run_length"\nprograms_dir = "problems"\ndb = "runs.db"\niterations = 1\nconcurrency = 1\n'
        'eval_workers = 1\n\n[policy]\nbackend = "openai"\nmodel = "m"\nprefill = false\nretries = 0\n'
        f'url = "{encoder_server[0]}"\n')
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    monkeypatch.chdir(elsewhere)
    outcome = evolve.run(project / "evolve.toml")
    assert outcome.status == "finished"
    assert (project / "runs.db").is_file() and not (elsewhere / "runs.db").exists()
    # an override is typed where the user stands: it stays relative to the working directory
    outcome = evolve.run(str(project / "evolve.toml"), overrides={"run.db": "here.db"})
    assert (elsewhere / "here.db").is_file()


def test_load_problem_reads_the_programs_folder_by_default_and_dir_lists_the_public_names(
        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(ROOT)
    assert evolve.load_problem("lis").name == "lis"
    assert dir(evolve) == sorted(evolve.__all__)
    assert not {"Any", "TYPE_CHECKING", "annotations", "importlib"} & set(dir(evolve))


def test_progress_draws_the_run_as_the_command_does_and_on_event_still_gets_every_event(
        tmp_path: Path, encoder_server: tuple[str, list[dict]], capsys: pytest.CaptureFixture[str]) -> None:
    events: list[object] = []
    outcome = evolve.run(overrides=scripted_overrides(encoder_server[0], tmp_path / "drawn.db"), progress=True,
                         on_event=events.append)
    out = capsys.readouterr().out
    assert outcome.status == "finished" and "IterationCommitted" in {type(event).__name__ for event in events}
    for line in ("loading scripted (openai: m) ...", "starting run 1: problem run_length", "[2/2] ",
                 "run 1 finished", "best program 1:"):
        assert line in out, out
