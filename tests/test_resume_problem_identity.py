"""A resume is tied to the problem its run started with: the problems' folder is found from the config file's folder
(a run stored before with a relative programs_dir too, from anywhere), a new run stores it whole, and a problem
folder that now declares other objectives than the run was scored on is refused in one line naming both, by `evolve
run --resume` and by an experiment's resumed cell, with nothing of the run lost."""

from __future__ import annotations

import json
import re
import shutil
from pathlib import Path

import pytest
from fake_policy_server import FakePolicyServer

from evolve.cli.main import main
from evolve.config import load_config
from evolve.engine.experiment import ExperimentRunner
from evolve.engine.experiment_spec import load_experiment
from evolve.engine.run_driver import resumed_programs_dir
from evolve.store.program_store import ChildRecord, ProgramStore

ROOT = Path(__file__).resolve().parents[1]
FIZZBUZZ_OBJECTIVES = [f"test_{index:02d}" for index in range(20)]
DEAD_URL = "http://127.0.0.1:9/v1"  # nothing listens on port 9: a refusal must come before the policy is asked


def project(folder: Path) -> Path:
    """FOLDER/proj: evolve.toml (its store runs.db beside it) and programs/fizzbuzz."""
    proj = folder / "proj"
    shutil.copytree(ROOT / "programs" / "fizzbuzz", proj / "programs" / "fizzbuzz")
    (proj / "evolve.toml").write_text('[run]\ndb = "runs.db"\n')
    return proj


def stored_run(db: Path, programs_dir: str, url: str, seed_scores: dict[str, float] | None = None) -> int:
    """A fizzbuzz run of 2 iterations stored as `evolve run` stored it before (programs_dir as given), interrupted;
    with `seed_scores`, its seed program scored so."""
    config = load_config(None, {"run.problem": "fizzbuzz", "run.programs_dir": programs_dir, "run.iterations": 2,
                                "run.concurrency": 1, "run.eval_workers": 1, "policy.backend": "openai",
                                "policy.url": url, "policy.model": "fake", "policy.retries": 0})
    store = ProgramStore(str(db))
    run_id = store.create_run("r", "fizzbuzz", config.policy.name, 0, config.model_dump_json(), 2)
    if seed_scores is not None:
        seed = (ROOT / "programs" / "fizzbuzz" / "initial.py").read_text()
        scalar = sum(seed_scores.values()) / len(seed_scores)
        store.record_iteration(run_id, 0, [ChildRecord(seed, None, 0, "", "", seed_scores, scalar, False)])
    store.set_run_status(run_id, "interrupted")
    store.close()
    return run_id


def declare_objectives(problem_toml: Path, names: list[str]) -> None:
    text = problem_toml.read_text()
    problem_toml.write_text(re.sub(r"^objectives = \[.*?\]", f"objectives = {json.dumps(names)}", text,
                                   count=1, flags=re.S | re.M))


def test_a_run_stored_with_a_relative_programs_dir_resumes_from_another_folder_with_the_config_named(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.setenv("COLUMNS", "1000")
    proj = project(tmp_path)
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    with FakePolicyServer(latency_s=0.0) as server:
        first = stored_run(proj / "runs.db", "programs", server.url)
        second = stored_run(proj / "runs.db", "programs", server.url)
        monkeypatch.chdir(elsewhere)
        code = main(["run", "--plain", "--resume", str(first), "-c", "../proj/evolve.toml"])
        out = " ".join(capsys.readouterr().out.split())
        assert code == 0 and "no such problem folder" not in out, out
        monkeypatch.chdir(proj)  # from the project's own folder (its evolve.toml read by default): as before
        code = main(["run", "--plain", "--resume", str(second)])
        out = " ".join(capsys.readouterr().out.split())
        assert code == 0, out
    store = ProgramStore(str(proj / "runs.db"), mode="read")
    for run_id in (first, second):
        assert store.get_run(run_id).status == "finished" and store.completed_iterations(run_id) == {0, 1, 2}


def test_the_stored_programs_dir_is_read_beside_the_config_else_where_only_the_working_folder_has_it(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    proj = project(tmp_path)
    monkeypatch.chdir(tmp_path)
    assert resumed_programs_dir("programs", "proj/evolve.toml") == str(Path("proj") / "programs")
    assert resumed_programs_dir("programs", None) == "programs"  # no config file: the working folder, as before
    assert resumed_programs_dir(str(proj / "programs"), "elsewhere/evolve.toml") == str(proj / "programs")
    # stored before by `evolve run -c proj/evolve.toml` from here: the path as typed from here still finds it
    assert resumed_programs_dir("proj/programs", "proj/evolve.toml") == "proj/programs"


def test_a_new_run_stores_its_programs_dir_whole_and_resumes_from_any_folder(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.setenv("COLUMNS", "1000")
    proj = project(tmp_path)
    elsewhere, third = tmp_path / "elsewhere", tmp_path / "third"
    elsewhere.mkdir()
    third.mkdir()
    with FakePolicyServer(latency_s=0.0) as server:
        (proj / "evolve.toml").write_text(
            '[run]\nproblem = "fizzbuzz"\ndb = "runs.db"\niterations = 1\nconcurrency = 1\neval_workers = 1\n'
            f'[policy]\nbackend = "openai"\nurl = "{server.url}"\nmodel = "fake"\nretries = 0\n')
        monkeypatch.chdir(elsewhere)
        assert main(["run", "--plain", "-c", "../proj/evolve.toml"]) == 0
        capsys.readouterr()
        store = ProgramStore(str(proj / "runs.db"), mode="read")
        stored = json.loads(store.get_run(1).config_json)["run"]["programs_dir"]
        store.close()
        assert Path(stored).is_absolute() and Path(stored).resolve() == (proj / "programs").resolve()
        monkeypatch.chdir(third)  # no config here at all: the store named, the stored folder used as it is
        code = main(["run", "--plain", "--resume", "1", "--db", str(proj / "runs.db")])
        out = " ".join(capsys.readouterr().out.split())
        assert code == 0 and "no such problem folder" not in out, out


def test_resuming_a_run_whose_problem_now_declares_other_objectives_is_refused_naming_both(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.setenv("COLUMNS", "1000")
    proj = project(tmp_path)
    run_id = stored_run(proj / "runs.db", "programs", DEAD_URL, dict.fromkeys(FIZZBUZZ_OBJECTIVES, 0.5))
    declare_objectives(proj / "programs" / "fizzbuzz" / "problem.toml", ["a", "b"])
    monkeypatch.chdir(proj)
    code = main(["run", "--plain", "--resume", str(run_id)])
    out = capsys.readouterr().out
    assert code == 1 and out.count("\n") == 1 and out.startswith("error: "), out
    line = " ".join(out.split())
    assert (f"run {run_id} was scored on 20 objectives (test_00, test_01, test_02, test_03, test_04, ... (15 more)), "
            f"but {proj / 'programs' / 'fizzbuzz' / 'problem.toml'} now declares 2 objectives (a, b)") in line, line
    assert "resuming run" not in line
    store = ProgramStore(str(proj / "runs.db"), mode="read")  # nothing of the run changed
    assert store.get_run(run_id).status == "interrupted" and store.count_programs(run_id) == 1
    assert store.completed_iterations(run_id) == {0}


def test_an_experiment_cell_whose_problem_now_declares_other_objectives_fails_alone_and_resumes_once_restored(
        tmp_path: Path) -> None:
    shutil.copytree(ROOT / "programs" / "fizzbuzz", tmp_path / "programs" / "fizzbuzz")
    problem_toml = tmp_path / "programs" / "fizzbuzz" / "problem.toml"
    declared = problem_toml.read_text()
    with FakePolicyServer(latency_s=0.0) as server:
        path = tmp_path / "exp.toml"
        path.write_text(f'problems = ["fizzbuzz"]\nseeds = [0]\niterations = 2\n[run]\nprograms_dir = '
                        f'"{tmp_path / "programs"}"\nconcurrency = 1\neval_workers = 1\n[[policies]]\nname = "fake"\n'
                        f'backend = "openai"\nurl = "{server.url}"\nmodel = "fake"\n')
        spec = load_experiment(path)
        store = ProgramStore(spec.db)
        store.save_experiment(spec.name, spec.model_dump_json())
        config = spec.cell_config("fizzbuzz", "fake", 0)
        run_id = store.create_run(config.run.name, "fizzbuzz", "fake", 0, config.model_dump_json(), 2,
                                  experiment=spec.name)
        seed = (tmp_path / "programs" / "fizzbuzz" / "initial.py").read_text()
        store.record_iteration(run_id, 0, [ChildRecord(seed, None, 0, "", "", dict.fromkeys(FIZZBUZZ_OBJECTIVES, 0.5),
                                                       0.5, False)])
        store.set_run_status(run_id, "interrupted")
        declare_objectives(problem_toml, ["a", "b"])
        outcome = ExperimentRunner(spec).run()
        (error,) = outcome.errors
        assert error.startswith(f"fizzbuzz/fake/0: run {run_id} was scored on 20 objectives (test_00, ") and \
            f"{problem_toml} now declares 2 objectives (a, b)" in error and "\n" not in error, error
        assert store.get_run(run_id).status == "failed" and store.count_programs(run_id) == 1  # kept as it was
        assert outcome.cells[("fizzbuzz", "fake", 0)].status == "failed"
        problem_toml.write_text(declared)  # the folder restored: the same cell goes on from its seed
        outcome = ExperimentRunner(spec).run()
    assert outcome.finished and not outcome.errors, outcome.errors
    assert store.get_run(run_id).status == "finished" and store.completed_iterations(run_id) == {0, 1, 2}
