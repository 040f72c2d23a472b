"""An experiment of one store keeps the design it ran with, as an experiment in pieces does: running it again with
another design (an edited file, other --set) is refused in one line naming each setting that differs, with the stored
design and the cells left as they were; the same design (the same file, or --set giving what the file gave) goes on."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from fake_policy_server import FakePolicyServer

from evolve.cli.main import main
from evolve.engine.experiment_spec import ExperimentSpec, design_changes, load_experiment
from evolve.store.program_store import ProgramStore

ROOT = Path(__file__).resolve().parents[1]


def experiment_file(folder: Path, url: str, iterations: int = 1, temperature: float = 0.7) -> Path:
    path = folder / "exp.toml"
    path.write_text(f'problems = ["fizzbuzz"]\nseeds = [0]\niterations = {iterations}\n[run]\nprograms_dir = '
                    f'"{ROOT / "programs"}"\nconcurrency = 1\neval_workers = 1\n[[policies]]\nname = "fake"\n'
                    f'backend = "openai"\nurl = "{url}"\nmodel = "fake"\ntemperature = {temperature}\n')
    return path


def test_a_one_store_experiment_run_again_with_another_design_is_refused_and_keeps_its_own(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.setenv("COLUMNS", "1000")
    with FakePolicyServer(latency_s=0.0) as server:
        path = experiment_file(tmp_path, server.url)
        assert main(["experiment", str(path), "--plain"]) == 0
        capsys.readouterr()
        db = load_experiment(path).db
        store = ProgramStore(db, mode="read")
        design = store.experiment_spec("exp")
        (cell,) = store.experiment_cells("exp")
        config = store.get_run(cell.run_id).config_json
        store.close()
        before = Path(db).read_bytes()

        experiment_file(tmp_path, server.url, iterations=3, temperature=1.5)  # edited since it ran
        for flags in ([], ["--set", "iterations=1"]):
            code = main(["experiment", str(path), "--plain", *flags])
            out = capsys.readouterr().out
            line = out.splitlines()[-1]  # after the command's line saying what the file asks for
            assert code == 2 and line.startswith("config error: ") and "Traceback" not in out, out
            changes = ("iterations 1 -> 3; policies.fake.temperature 0.7 -> 1.5" if not flags
                       else "policies.fake.temperature 0.7 -> 1.5")
            assert f"experiment exp: {db} ran with another design (ran -> now: {changes}); run it with the same " \
                   "file and --set, or give a new design its own name or db" in line, line
            assert Path(db).read_bytes() == before  # refused before anything is written
        store = ProgramStore(db, mode="read")
        assert store.experiment_spec("exp") == design and json.loads(design or "{}")["iterations"] == 1
        assert store.get_run(cell.run_id).config_json == config and len(store.experiment_cells("exp")) == 1

        # the design it ran with, given by --set over the edited file: the same design, so it goes on
        code = main(["experiment", str(path), "--plain", "--set", "iterations=1",
                     "--set", "policies.*.temperature=0.7"])
        out = " ".join(capsys.readouterr().out.split())
        assert code == 0 and "another design" not in out, out
    stored = json.loads(ProgramStore(db, mode="read").experiment_spec("exp") or "{}")
    assert stored["iterations"] == 1 and stored["overrides"] == {"iterations": 1, "policies.*.temperature": 0.7}


def test_a_design_the_store_does_not_keep_yet_is_saved_and_the_same_file_runs_again(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    with FakePolicyServer(latency_s=0.0) as server:
        path = experiment_file(tmp_path, server.url)
        assert main(["experiment", str(path), "--plain"]) == 0
        assert main(["experiment", str(path), "--plain"]) == 0  # every cell finished: nothing to do, no refusal
    out = capsys.readouterr().out
    assert "another design" not in out
    spec = load_experiment(path)
    assert ProgramStore(spec.db, mode="read").experiment_spec("exp") == spec.model_dump_json()


def test_settings_that_only_say_how_fast_cells_run_may_change_between_sessions(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    with FakePolicyServer(latency_s=0.0) as server:
        path = experiment_file(tmp_path, server.url)
        assert main(["experiment", str(path), "--plain"]) == 0
        assert main(["experiment", str(path), "--plain", "--set", "parallel_cells=2"]) == 0  # a bigger machine
    assert "another design" not in capsys.readouterr().out
    assert json.loads(ProgramStore(load_experiment(path).db, mode="read").experiment_spec("exp") or "{}")[
        "parallel_cells"] == 2


def test_a_llamacpp_policys_threads_and_engines_are_no_design_change_but_its_slots_are() -> None:
    ran = load_experiment(ROOT / "experiments" / "default.toml")

    def with_policies(**settings: int) -> ExperimentSpec:
        data = ran.model_dump(mode="json")
        data["policies"] = [policy | settings for policy in data["policies"]]
        return ExperimentSpec.model_validate(data)

    assert design_changes(ran, with_policies(threads=2, engines=2)) == []
    assert design_changes(ran, with_policies(slots=8)) == [f"policies.{p.name}.slots 16 -> 8" for p in ran.policies]
