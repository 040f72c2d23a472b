"""bfloat16 in training: the trainer's bfloat16 matmuls (compute_dtype, autocast over float32 weights), where they
are chosen, and one group's log-probs, entropy, loss and gradient on the real SmolLM2 within stated tolerances of
float32's; a bfloat16 model's LoRA update kept by its merged checkpoint."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest
import torch

from evolve.policies.cpu import native_bfloat16
from evolve.rl.train_config import TrainConfig

ROOT = Path(__file__).resolve().parents[1]


def test_auto_runs_bfloat16_matmuls_exactly_where_the_cpu_has_native_bfloat16() -> None:
    flags = Path("/proc/cpuinfo").read_text().split() if Path("/proc/cpuinfo").is_file() else []
    if flags:
        assert native_bfloat16() == ("avx512_bf16" in flags or "amx_bf16" in flags)
    assert TrainConfig(device="cpu").autocast_dtype == (torch.bfloat16 if native_bfloat16() else None)
    assert TrainConfig(device="cpu", compute_dtype="float32").autocast_dtype is None
    assert TrainConfig(device="cpu", compute_dtype="bfloat16").autocast_dtype == torch.bfloat16


@pytest.mark.slow
def test_bfloat16_matmuls_keep_a_groups_logprobs_loss_and_gradient_within_tolerance_of_float32() -> None:
    """Tolerances (docs/training.md): per-token log-probs 0.05 nats in mean absolute difference, entropy 0.02 nats,
    the loss 1 %, the gradient's direction cosine >= 0.99 (measured: 0.023 nats, 0.007, 0.001 %, 0.9994)."""
    from evolve.problems.problem import load_problem
    from evolve.rl.loss import completion_logprobs, rl_loss
    from evolve.rl.rollouts import make_task, sample_group
    from evolve.rl.trainer import load_model
    from evolve.search.prompt_templates import load_template
    from evolve.search.prompts import PromptOptions

    torch.set_num_threads(1)
    torch.manual_seed(0)
    tokenizer, model, _ = load_model(TrainConfig(device="cpu"))
    for name, parameter in model.named_parameters():
        if "lora_B" in name:  # a policy some steps in: its adapters change the logits
            torch.nn.init.normal_(parameter, std=0.002)
    task = asyncio.run(make_task(load_problem("fizzbuzz", ROOT / "programs"), tokenizer,
                                 PromptOptions(max_new_tokens_cap=48), load_template("default")))
    with torch.no_grad():
        rollouts = sample_group(model, tokenizer, task, 4, seed=3)
    width = max(len(rollout.completion_ids) for rollout in rollouts)
    completions, mask = torch.zeros(4, width, dtype=torch.long), torch.zeros(4, width)
    for row, rollout in enumerate(rollouts):
        completions[row, :len(rollout.completion_ids)] = torch.tensor(rollout.completion_ids)
        mask[row, :len(rollout.completion_ids)] = 1.0
    prompt, advantages = torch.tensor(task.prompt_ids), torch.tensor([1.0, -0.5, 0.7, -1.2])

    def group(bfloat16: bool) -> tuple[torch.Tensor, torch.Tensor, float, torch.Tensor]:
        model.zero_grad()
        scope = lambda: torch.autocast("cpu", dtype=torch.bfloat16, enabled=bfloat16)  # noqa: E731
        with scope():
            logp, entropy = completion_logprobs(model, prompt, completions, with_entropy=True, lengths=mask.sum(1))
        with torch.no_grad(), model.disable_adapter(), scope():
            reference, _ = completion_logprobs(model, prompt, completions, lengths=mask.sum(1))
        old = logp.detach() - 0.01 * advantages[:, None]  # a ratio off 1, so the clip terms take part
        parts = rl_loss(logp, old, reference, advantages, mask)
        parts.loss.backward()
        gradient = torch.cat([p.grad.flatten() for p in model.parameters() if p.grad is not None])
        assert entropy is not None
        return logp.detach(), entropy, float(parts.loss.detach()), gradient

    (logp32, entropy32, loss32, grad32), (logp16, entropy16, loss16, grad16) = group(False), group(True)
    real = mask.bool()
    assert int(real.sum()) > 40
    assert float((logp32 - logp16).abs()[real].mean()) < 0.05
    assert abs(float(entropy32[real].mean() - entropy16[real].mean())) < 0.02
    assert abs(loss16 - loss32) <= 0.01 * abs(loss32) + 1e-6
    assert float(torch.nn.functional.cosine_similarity(grad32, grad16, dim=0)) >= 0.99
    assert float((logp32 - logp16).abs()[real].max()) > 0  # the bfloat16 pass did run in bfloat16


def test_a_bfloat16_models_lora_update_below_bfloat16_spacing_survives_the_merge() -> None:
    from peft import LoraConfig, get_peft_model
    from transformers import LlamaConfig, LlamaForCausalLM

    from evolve.rl.checkpoints import merged_model

    torch.manual_seed(4)
    config = LlamaConfig(vocab_size=50, hidden_size=32, intermediate_size=64, num_hidden_layers=1,
                         num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=64)
    base = LlamaForCausalLM(config).eval().to(torch.bfloat16)
    original = base.model.layers[0].self_attn.q_proj.weight.detach().float().clone()
    model = get_peft_model(base, LoraConfig(r=4, lora_alpha=4, target_modules=["q_proj"]))
    with torch.no_grad():
        for name, parameter in model.named_parameters():
            if "lora_B" in name:
                parameter.fill_(1e-5)  # an update ~1e-5 at weights ~2e-2, where bfloat16's spacing is ~1e-4
    delta = (model.base_model.model.model.layers[0].self_attn.q_proj.get_delta_weight("default")).float()
    assert float((((original.to(torch.bfloat16) + delta.to(torch.bfloat16)).float() - original) != 0).float().mean()) < 0.2
    merged = merged_model(model).model.layers[0].self_attn.q_proj.weight.detach()
    assert merged.dtype == torch.float32
    assert torch.allclose(merged - original, delta, atol=1e-7)
