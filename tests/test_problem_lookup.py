"""Problems are found by name wherever they sit under the programs folder (programs/humaneval/he_016 is he_016): one
folder of that name loads, several are one error naming them, none suggests the close names; `evolve problems` and
tab completion list them; a run's name is the problem's name, never the path it was given by, and no two runs in a
store share a name."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from evolve.cli.main import main
from evolve.config import load_config
from evolve.engine.run_setup import run_name
from evolve.problems.problem import ProblemError, list_problems, load_problem
from tests.scripted_policy_server import ScriptedPolicyServer

ROOT = Path(__file__).resolve().parents[1]


def programs_with_a_suite(tmp_path: Path) -> Path:
    """programs/ holding run_length at the top and fizzbuzz and lis inside a suite folder, as `evolve import`
    writes its problems."""
    programs = tmp_path / "programs"
    shutil.copytree(ROOT / "programs" / "run_length", programs / "run_length")
    for name in ("fizzbuzz", "lis"):
        shutil.copytree(ROOT / "programs" / name, programs / "suite" / name)
    return programs


def test_a_problem_in_a_folder_of_the_programs_folder_loads_by_its_name(tmp_path: Path) -> None:
    programs = programs_with_a_suite(tmp_path)
    problem = load_problem("fizzbuzz", programs)
    assert problem.name == "fizzbuzz" and problem.path == (programs / "suite" / "fizzbuzz").resolve()
    assert list_problems(programs) == ["fizzbuzz", "lis", "run_length"]


def test_a_name_that_several_folders_hold_is_one_error_naming_them(tmp_path: Path) -> None:
    programs = programs_with_a_suite(tmp_path)
    shutil.copytree(ROOT / "programs" / "fizzbuzz", programs / "other" / "fizzbuzz")
    with pytest.raises(ProblemError) as error:
        load_problem("fizzbuzz", programs)
    message = str(error.value)
    assert "\n" not in message and "in 2 folders" in message
    assert str(programs / "other" / "fizzbuzz") in message and str(programs / "suite" / "fizzbuzz") in message
    assert sorted(list_problems(programs)) == ["lis", "other/fizzbuzz", "run_length", "suite/fizzbuzz"]
    assert load_problem("other/fizzbuzz", programs).path == (programs / "other" / "fizzbuzz").resolve()


def test_an_unknown_name_suggests_the_close_ones(tmp_path: Path) -> None:
    programs = programs_with_a_suite(tmp_path)
    with pytest.raises(ProblemError) as error:
        load_problem("fizbuzz", programs)
    assert "no such problem folder; did you mean fizzbuzz?" in str(error.value)
    assert "(problems in " in str(error.value) and "fizzbuzz, lis, run_length)" in str(error.value)


def test_evolve_problems_and_check_find_the_problems_of_a_suite(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                                capsys: pytest.CaptureFixture[str]) -> None:
    programs_with_a_suite(tmp_path)
    monkeypatch.chdir(tmp_path)
    assert main(["problems"]) == 0
    listed = capsys.readouterr().out
    assert all(f"│ {name} " in listed for name in ("fizzbuzz", "lis", "run_length")), listed
    assert main(["check", "lis"]) == 0
    assert capsys.readouterr().out.splitlines()[-1] == "lis: passes the check"


def test_tab_completion_offers_the_problem_names(tmp_path: Path) -> None:
    pytest.importorskip("argcomplete")
    programs_with_a_suite(tmp_path)

    def completions(line: str) -> set[str]:
        answer = tmp_path / "completions"
        env = {**os.environ, "_ARGCOMPLETE": "1", "COMP_LINE": line, "COMP_POINT": str(len(line)),
               "_ARGCOMPLETE_STDOUT_FILENAME": str(answer), "PYTHONPATH": str(ROOT)}
        subprocess.run([sys.executable, "-m", "evolve.cli.main"], cwd=tmp_path, env=env, check=True, timeout=120,
                       stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        return {word.strip() for word in answer.read_text().split("\013")}

    assert completions("evolve run --problem ") == {"fizzbuzz", "lis", "run_length"}
    assert completions("evolve check l") == {"lis"}


def test_a_new_run_is_named_by_the_problem_and_takes_a_suffix_when_the_name_is_taken() -> None:
    config = load_config(None, {"run.problem": "programs/humaneval/he_016", "policy.name": "m", "run.seed": 2})
    assert run_name(config, set()) == "he_016-m-s2"
    assert run_name(config, {"he_016-m-s2", "he_016-m-s2-2"}) == "he_016-m-s2-3"
    named = load_config(None, {"run.name": "mine"})
    assert run_name(named, {"mine"}) == "mine-2"


def test_two_runs_of_a_problem_given_by_its_path_get_two_names_without_the_path(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    programs = programs_with_a_suite(tmp_path)
    db = tmp_path / "runs.db"
    with ScriptedPolicyServer(lambda number, body: "def fizzbuzz(n):\n    return str(n)\n") as server:
        settings = {"run.concurrency": 1, "run.eval_workers": 1, "policy.backend": "openai", "policy.url": server.url,
                    "policy.model": "m", "policy.name": "scripted", "policy.prefill": False, "policy.retries": 0}
        flags = [f"--set={key}={json.dumps(value)}" for key, value in settings.items()]
        for _ in range(2):
            assert main(["run", "--plain", "--problem", str(programs / "suite" / "fizzbuzz"), "--iterations", "1",
                         "--db", str(db), *flags]) == 0
    capsys.readouterr()
    from evolve.store.program_store import ProgramStore

    names = [run.name for run in ProgramStore(str(db), mode="read").list_runs()]
    assert names == ["fizzbuzz-scripted-s0", "fizzbuzz-scripted-s0-2"]
