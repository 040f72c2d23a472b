"""`evolve train --rollouts vllm`: vLLM samples from the adapter being trained. Needs vLLM (skips without it):
bash scripts/install/install_vllm.sh && bash scripts/dev/check_vllm.sh run it on vLLM's CPU build."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import torch

pytest.importorskip("vllm")
pytestmark = pytest.mark.slow

ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="module")
def setup(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Any, Any, Any, Any]]:
    from evolve.problems.problem import load_problem
    from evolve.rl.rollouts import make_task
    from evolve.rl.trainer import TrainConfig, load_model
    from evolve.rl.vllm_rollouts import VllmSampler
    from evolve.search.prompt_templates import load_template
    from evolve.search.prompts import PromptOptions

    tokenizer, model, base = load_model(TrainConfig())
    torch.manual_seed(0)
    with torch.no_grad():  # an adapter far from the base (fresh LoRA B is zero: no change at all)
        for name, param in model.named_parameters():
            if "lora_B" in name:
                param.normal_(0.0, 0.05)
    options = PromptOptions(answers=3, max_new_tokens_cap=48)
    task = asyncio.run(make_task(load_problem("fizzbuzz", ROOT / "programs"), tokenizer, options,
                                 load_template("default")))
    sampler = VllmSampler(base, tmp_path_factory.mktemp("adapters"), lora_rank=16, dtype="float32",
                          max_model_len=2048)
    sampler.sync(model, 1)
    yield model, tokenizer, task, sampler
    sampler.close()


def test_samples_are_seeded_groups_of_G_within_the_prompts_budget(setup: tuple[Any, Any, Any, Any]) -> None:
    _, _, task, sampler = setup
    first = sampler.sample([task, task], 4, [11, 12], temperature=1.0)
    again = sampler.sample([task, task], 4, [11, 12], temperature=1.0)
    assert [len(group) for group in first] == [4, 4]
    ids = [[r.completion_ids for r in group] for group in first]
    assert ids == [[r.completion_ids for r in group] for group in again]  # seeded per group
    assert ids[0] != ids[1]  # different seeds, different samples
    assert all(0 < len(r.completion_ids) <= task.prompt.max_new_tokens for group in first for r in group)
    assert len({tuple(r) for r in ids[0]}) > 1  # G samples, not one repeated


def test_vllm_samples_from_the_trained_adapter_not_the_base(setup: tuple[Any, Any, Any, Any]) -> None:
    """vLLM's log-probs of its own samples equal the transformers model's with the adapter, not without it."""
    from vllm import SamplingParams
    from vllm.inputs import TokensPrompt

    from evolve.rl.loss import completion_logprobs

    model, _, task, sampler = setup
    params = SamplingParams(n=1, temperature=1.0, top_p=1.0, seed=5, max_tokens=24, logprobs=0)
    sample = sampler.llm.generate([TokensPrompt(prompt_token_ids=list(task.prompt_ids))], params,
                                  lora_request=sampler.lora, use_tqdm=False)[0].outputs[0]
    tokens = list(sample.token_ids)
    vllm_logp = torch.tensor([step[token].logprob for step, token in zip(sample.logprobs, tokens, strict=True)])
    prompt, completion = torch.tensor(task.prompt_ids), torch.tensor([tokens])
    with torch.no_grad():
        adapted = completion_logprobs(model, prompt, completion, 1.0)[0][0]
        with model.disable_adapter():
            base = completion_logprobs(model, prompt, completion, 1.0)[0][0]
    assert (vllm_logp - adapted).abs().max() < 0.05
    assert (vllm_logp - base).abs().mean() > 5 * (vllm_logp - adapted).abs().mean()


def test_sync_gives_vllm_the_new_weights_and_keeps_one_adapter_on_disk(setup: tuple[Any, Any, Any, Any]) -> None:
    model, _, task, sampler = setup
    before = sampler.sample([task], 2, [3])[0]
    with torch.no_grad():
        for name, param in model.named_parameters():
            if "lora_B" in name:
                param.mul_(-1.0)
    sampler.sync(model, 2)
    after = sampler.sample([task], 2, [3])[0]
    assert sampler.lora.lora_int_id == 2
    assert [p.name for p in sampler.adapters_dir.iterdir()] == ["step_2"]
    assert [r.completion_ids for r in before] != [r.completion_ids for r in after]

