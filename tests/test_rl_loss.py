"""RL loss by hand: masked means, PPO clipping, k3 KL, token log-probs against a full forward of a tiny model."""

from __future__ import annotations

import math

import pytest
import torch

from evolve.rl.loss import clipped_pg_loss, completion_logprobs, k3_kl, masked_mean, rl_loss


def close(tensor: torch.Tensor | None, expected: list[list[float]]) -> bool:
    return tensor is not None and torch.allclose(tensor.float(), torch.tensor(expected), atol=1e-6)


def test_masked_mean_counts_only_masked_tokens_and_takes_a_step_denominator() -> None:
    values = torch.tensor([[1.0, 2.0, 100.0], [3.0, 100.0, 100.0]])
    mask = torch.tensor([[1, 1, 0], [1, 0, 0]])
    assert float(masked_mean(values, mask)) == pytest.approx(2.0)  # (1 + 2 + 3) / 3
    assert float(masked_mean(values, mask, denom=6)) == pytest.approx(1.0)  # (1 + 2 + 3) / 6
    assert float(masked_mean(values, torch.zeros_like(mask))) == 0.0


def test_clipped_loss_by_hand() -> None:
    # ratios e^0 = 1, 1.5, 0.5 on row 0 (A = +1) and the same on row 1 (A = -1)
    ratios = torch.tensor([[1.0, 1.5, 0.5], [1.0, 1.5, 0.5]])
    logp, old = torch.log(ratios), torch.zeros(2, 3)
    out = clipped_pg_loss(logp, old, torch.tensor([1.0, -1.0]), clip=0.2)
    # A = +1: -min(r, clip(r)) -> -1, -1.2 (clipped above), -0.5 (not clipped: min takes 0.5 < 0.8)
    # A = -1: -min(-r, -clip(r)) -> 1, 1.5 (not clipped: max(r, clip r)), 0.8 (clipped below); all under 3 |A|
    assert close(out.loss, [[-1.0, -1.2, -0.5], [1.0, 1.5, 0.8]])
    assert out.clipped.tolist() == [[0.0, 1.0, 0.0], [0.0, 0.0, 1.0]]
    assert out.dual_clipped.tolist() == [[0.0, 0.0, 0.0], [0.0, 0.0, 0.0]]


def test_dual_clip_caps_a_negative_advantage_tokens_loss_at_c_times_its_advantage_by_hand() -> None:
    # ratios 2, 5, 10 under A = -0.5 (row 0) and A = +0.5 (row 1); clip 0.2, clip_ratio_c 3
    logp = torch.log(torch.tensor([[2.0, 5.0, 10.0], [2.0, 5.0, 10.0]])).requires_grad_(True)
    out = clipped_pg_loss(logp, torch.zeros(2, 3), torch.tensor([-0.5, 0.5]), clip=0.2, clip_ratio_c=3.0)
    # A < 0: PPO alone gives max(.5 r, .5 * 1.2) = 1, 2.5, 5; the dual clip caps it at 3 * .5 = 1.5
    # A > 0: -min(.5 r, .5 * 1.2) = -.6 everywhere, the dual clip does not apply
    assert close(out.loss, [[1.0, 1.5, 1.5], [-0.6, -0.6, -0.6]])
    assert out.dual_clipped.tolist() == [[0.0, 1.0, 1.0], [0.0, 0.0, 0.0]]
    out.loss.sum().backward()
    # d(.5 r)/d logp = .5 r = 1 for the unclipped token; capped and clipped tokens get no gradient
    assert close(logp.grad, [[1.0, 0.0, 0.0], [0.0, 0.0, 0.0]])
    with pytest.raises(ValueError, match="clip_ratio_c"):
        clipped_pg_loss(logp, torch.zeros(2, 3), torch.tensor([-0.5, 0.5]), clip_ratio_c=1.0)
    parts = rl_loss(logp.detach(), torch.zeros(2, 3), None, torch.tensor([-0.5, 0.5]), torch.ones(2, 3))
    # the ratio clip binds only on row 1 (A > 0, r > 1.2); for A < 0 PPO keeps the larger, unclipped loss
    assert parts.dual_clip_frac == pytest.approx(2 / 6) and parts.clip_frac == pytest.approx(3 / 6)
    assert parts.ppo_kl == pytest.approx(-float(torch.log(torch.tensor([2.0, 5.0, 10.0])).mean()))


def test_a_token_far_from_its_old_log_prob_gives_a_finite_loss_and_gradient() -> None:
    # log-ratios of +100 and -100 (float32: exp(100) is inf) under both signs of the advantage
    logp = torch.tensor([[0.0, -100.0], [0.0, -100.0]], requires_grad=True)
    old = torch.tensor([[-100.0, 0.0], [-100.0, 0.0]])
    out = clipped_pg_loss(logp, old, torch.tensor([1.0, -1.0]))
    # the log-ratio is clamped to +-20 before exp: A = +1 gives -min(r, 1.2) = -1.2 and -min(e^-20, .8) = -e^-20;
    # A = -1 gives min(max(r, 1.2), 3) = 3 (dual clip) and max(e^-20, .8) = .8
    assert close(out.loss, [[-1.2, -math.exp(-20)], [3.0, 0.8]])
    out.loss.sum().backward()
    assert bool(torch.isfinite(logp.grad).all())  # without the clamp: 0 * inf = NaN from the branch not taken
    assert out.log_ratio.abs().max().item() == 20.0


def test_k3_kl_is_clamped_for_a_token_the_policy_ruled_out() -> None:
    logp = torch.tensor([-100.0, -30.0, -2.0], requires_grad=True)
    ref = torch.tensor([0.0, 0.0, -1.0])
    kl = k3_kl(logp, ref)
    # d = ref - logp = 100, 30 (both clamped to 20, then the KL to 10) and 1: e - 2
    assert kl.tolist() == pytest.approx([10.0, 10.0, math.e - 2])
    kl.sum().backward()
    assert bool(torch.isfinite(logp.grad).all()) and logp.grad[:2].tolist() == [0.0, 0.0]


def test_k3_kl_by_hand() -> None:
    logp = torch.log(torch.tensor([0.5, 0.25, 0.5]))
    ref = torch.log(torch.tensor([0.5, 0.5, 0.25]))
    kl = k3_kl(logp, ref)
    # d = ref - logp: 0 -> 0; log 2 -> 2 - log 2 - 1; -log 2 -> 0.5 + log 2 - 1
    assert kl.tolist() == pytest.approx([0.0, 1 - math.log(2), math.log(2) - 0.5])
    assert bool((kl >= 0).all())


def test_rl_loss_gradient_at_ratio_one_is_minus_advantage_per_token() -> None:
    logp = torch.log(torch.tensor([[0.5, 0.25, 0.1], [0.2, 0.3, 0.1]])).requires_grad_(True)
    mask = torch.tensor([[1, 1, 1], [1, 1, 0]])
    advantages = torch.tensor([2.0, -1.0])
    parts = rl_loss(logp, logp.detach(), logp.detach(), advantages, mask, clip=0.2, kl_coef=1e-3)
    parts.loss.backward()
    # loss = sum over 5 tokens of -A_g * ratio / 5; d ratio / d logp = 1 at ratio 1; the k3 KL has zero gradient there
    assert close(logp.grad, [[-0.4, -0.4, -0.4], [0.2, 0.2, 0.0]])
    assert parts.tokens == 5 and parts.kl == pytest.approx(0.0) and parts.clip_frac == 0.0
    assert parts.pg_loss == pytest.approx(-(3 * 2.0 - 2 * 1.0) / 5)


def test_rl_loss_adds_the_kl_term_with_its_coefficient() -> None:
    logp = torch.log(torch.tensor([[0.25]]))
    ref = torch.log(torch.tensor([[0.5]]))
    parts = rl_loss(logp, logp, ref, torch.tensor([0.0]), torch.ones(1, 1), kl_coef=0.1)
    assert float(parts.loss) == pytest.approx(0.1 * (1 - math.log(2)))
    assert parts.kl == pytest.approx(1 - math.log(2))
    assert float(rl_loss(logp, logp, None, torch.tensor([0.0]), torch.ones(1, 1)).loss) == 0.0


class _BigramModel(torch.nn.Module):
    """logits at a position depend only on the token there: log-probs are checkable by hand."""

    def __init__(self, table: torch.Tensor) -> None:
        super().__init__()
        self.table = table

    def forward(self, input_ids: torch.Tensor, **_: object) -> object:
        return type("Out", (), {"logits": self.table[input_ids]})()


def test_completion_logprobs_shift_by_hand() -> None:
    # vocabulary of 2; after token 0 the model says p(1) = 0.75, after token 1 it says p(0) = 0.5
    table = torch.log(torch.tensor([[0.25, 0.75], [0.5, 0.5]]))
    logp, entropy = completion_logprobs(_BigramModel(table), torch.tensor([0]), torch.tensor([[1, 0], [0, 0]]),
                                        with_entropy=True)
    assert close(logp.exp(), [[0.75, 0.5], [0.25, 0.25]])
    h0 = -(0.25 * math.log(0.25) + 0.75 * math.log(0.75))
    assert close(entropy, [[h0, math.log(2)], [h0, h0]])
    hot, _ = completion_logprobs(_BigramModel(table), torch.tensor([0]), torch.tensor([[1, 0]]), temperature=0.5)
    # temperature 0.5 squares the odds: p(1 | 0) = 0.75^2 / (0.75^2 + 0.25^2) = 0.9
    assert hot.exp()[0, 0].item() == pytest.approx(0.9)


def test_shared_prompt_cache_matches_a_full_forward_of_a_tiny_llama() -> None:
    from transformers import LlamaConfig, LlamaForCausalLM

    torch.manual_seed(0)
    config = LlamaConfig(vocab_size=50, hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                         num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=64)
    model = LlamaForCausalLM(config).eval()
    prompt = torch.randint(0, 50, (7,))
    completions = torch.randint(0, 50, (3, 5))
    logp, _ = completion_logprobs(model, prompt, completions)
    full = torch.cat([prompt.expand(3, 7), completions], dim=1)
    expected = torch.log_softmax(model(input_ids=full).logits.float(), -1)[:, 6:-1]
    expected = expected.gather(-1, completions.unsqueeze(-1)).squeeze(-1)
    assert torch.allclose(logp, expected, atol=1e-5)
    logp.sum().backward()  # gradients reach the weights through the shared, repeated prompt cache
    assert model.model.layers[0].self_attn.q_proj.weight.grad is not None


def _tiny_llama(vocab: int = 50) -> torch.nn.Module:
    from transformers import LlamaConfig, LlamaForCausalLM

    config = LlamaConfig(vocab_size=vocab, hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                         num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=64)
    return LlamaForCausalLM(config).eval()


@pytest.mark.parametrize("lora", [False, True])
def test_chunked_vocabulary_projection_matches_the_whole_model_in_values_entropy_and_gradients(
        monkeypatch: pytest.MonkeyPatch, lora: bool) -> None:
    import evolve.rl.loss as loss

    torch.manual_seed(1)
    model = _tiny_llama()
    if lora:
        from peft import LoraConfig, get_peft_model

        model = get_peft_model(model, LoraConfig(r=4, lora_alpha=8, target_modules=["q_proj", "v_proj"]))
    prompt, completions = torch.randint(0, 50, (6,)), torch.randint(0, 50, (3, 7))

    def run(chunk_elements: int) -> tuple[torch.Tensor, torch.Tensor, list[torch.Tensor]]:
        monkeypatch.setattr(loss, "LOGIT_CHUNK_ELEMENTS", chunk_elements)
        model.zero_grad()
        logp, entropy = completion_logprobs(model, prompt, completions, temperature=0.7, with_entropy=True)
        (logp * torch.linspace(-1, 1, 7)).sum().backward()
        assert entropy is not None
        grads = [param.grad.clone() for param in model.parameters() if param.requires_grad and param.grad is not None]
        return logp.detach(), entropy, grads

    whole = run(1 << 30)
    chunked = run(3 * 50 * 2)  # two tokens per chunk: four chunks
    assert torch.allclose(whole[0], chunked[0], atol=1e-6) and torch.allclose(whole[1], chunked[1], atol=1e-6)
    assert len(whole[2]) == len(chunked[2]) > 0
    assert all(torch.allclose(a, b, atol=1e-6) for a, b in zip(whole[2], chunked[2], strict=True))
    # and both equal the plain full-sequence forward of the model
    full = torch.cat([prompt.expand(3, 6), completions], dim=1)
    with torch.no_grad():
        expected = torch.log_softmax(model(input_ids=full).logits.float() / 0.7, -1)[:, 5:-1]
    assert torch.allclose(chunked[0], expected.gather(-1, completions.unsqueeze(-1)).squeeze(-1), atol=1e-5)


def test_a_model_that_rescales_its_logits_after_the_head_is_called_whole() -> None:
    from evolve.rl.loss import _decoder_and_head

    model = _tiny_llama()
    assert _decoder_and_head(model) is not None
    model.config.final_logit_softcapping = 30.0
    assert _decoder_and_head(model) is None


def test_length_buckets_take_every_row_at_least_half_as_long_as_their_longest() -> None:
    from evolve.rl.loss import length_buckets

    assert length_buckets([10, 384, 40, 200, 0, 30], 384) == [([1, 3], 384), ([2, 5], 40), ([0], 10), ([4], 1)]
    assert length_buckets([5, 5, 5], 5) == [([0, 1, 2], 5)]


@pytest.mark.parametrize("lora", [False, True])
def test_rows_in_length_buckets_give_the_padded_batchs_values_entropy_and_gradients(lora: bool) -> None:
    torch.manual_seed(2)
    model = _tiny_llama()
    if lora:
        from peft import LoraConfig, get_peft_model

        model = get_peft_model(model, LoraConfig(r=4, lora_alpha=8, target_modules=["q_proj", "v_proj"]))
    prompt = torch.randint(0, 50, (6,))
    lengths = torch.tensor([3, 12, 2, 7, 12, 1])  # one long pair, then rows a quarter as long: four buckets
    completions = torch.randint(1, 50, (6, 12))
    mask = (torch.arange(12)[None, :] < lengths[:, None]).float()
    completions = completions * mask.long()  # right-padded with token 0, as the trainer's group_batch pads
    weights = torch.linspace(-1, 1, 12)

    def run(row_lengths: torch.Tensor | None) -> tuple[torch.Tensor, torch.Tensor, list[torch.Tensor]]:
        model.zero_grad()
        logp, entropy = completion_logprobs(model, prompt, completions, temperature=0.7, with_entropy=True,
                                            lengths=row_lengths)
        assert logp.shape == entropy.shape == (6, 12)
        (logp * mask * weights).sum().backward()
        grads = [param.grad.clone() for param in model.parameters() if param.requires_grad and param.grad is not None]
        return (logp * mask).detach(), entropy * mask, grads

    padded, bucketed = run(None), run(lengths)
    assert torch.allclose(padded[0], bucketed[0], atol=1e-5) and torch.allclose(padded[1], bucketed[1], atol=1e-5)
    assert len(padded[2]) == len(bucketed[2]) > 0
    assert all(torch.allclose(a, b, atol=1e-5) for a, b in zip(padded[2], bucketed[2], strict=True))


def test_a_frozen_heads_fused_gradient_equals_autograd_through_the_whole_model() -> None:
    """LoRA leaves the vocabulary projection frozen, so completion_logprobs takes each token's gradient in the forward
    pass (no recompute of the logits); values, entropy and every adapter's gradient are those of plain autograd
    through the model's own full-sequence forward, and the same as the checkpointed path a trained head takes."""
    from peft import LoraConfig, get_peft_model

    from evolve.rl.loss import _decoder_and_head

    torch.manual_seed(3)
    model = get_peft_model(_tiny_llama(), LoraConfig(r=4, lora_alpha=8, target_modules=["q_proj", "v_proj"]))
    for name, param in model.named_parameters():
        if "lora_B" in name:  # B starts at zero; move it so the adapters change the logits and get gradients
            torch.nn.init.normal_(param, std=0.1)
    prompt, completions = torch.randint(0, 50, (6,)), torch.randint(0, 50, (3, 7))
    weights = torch.linspace(-1, 1, 7)
    head = _decoder_and_head(model)[1]  # type: ignore[index]

    def adapter_grads() -> list[torch.Tensor]:
        grads = [param.grad.clone() for name, param in model.named_parameters() if "lora" in name]
        model.zero_grad()
        return grads

    assert not head.weight.requires_grad
    logp, entropy = completion_logprobs(model, prompt, completions, temperature=0.7, with_entropy=True)
    (logp * weights).sum().backward()
    fused = (logp.detach(), entropy, adapter_grads())

    full = torch.cat([prompt.expand(3, 6), completions], dim=1)
    logits = model(input_ids=full).logits.float()[:, 5:-1] / 0.7
    expected = torch.log_softmax(logits, -1).gather(-1, completions.unsqueeze(-1)).squeeze(-1)
    expected_entropy = -(torch.softmax(logits, -1) * torch.log_softmax(logits, -1)).sum(-1).detach()
    (expected * weights).sum().backward()
    plain = adapter_grads()

    head.weight.requires_grad_(True)  # a trained head: the checkpointed projection
    logp_checkpointed, _ = completion_logprobs(model, prompt, completions, temperature=0.7)
    (logp_checkpointed * weights).sum().backward()
    checkpointed = [grad for grad in adapter_grads()][:len(plain)]
    head.weight.requires_grad_(False)

    assert torch.allclose(fused[0], expected.detach(), atol=1e-5) and torch.allclose(fused[1], expected_entropy,
                                                                                     atol=1e-5)
    assert len(plain) == len(fused[2]) > 0 and all(grad.abs().sum() > 0 for grad in plain)
    assert all(torch.allclose(a, b, atol=1e-6) for a, b in zip(fused[2], plain, strict=True))
    assert all(torch.allclose(a, b, atol=1e-6) for a, b in zip(fused[2], checkpointed, strict=True))


def test_rl_loss_subtracts_the_entropy_bonus_with_its_coefficient_and_needs_the_entropy() -> None:
    logp = torch.log(torch.tensor([[0.25, 0.5]]))
    entropy = torch.tensor([[1.0, 3.0]], requires_grad=True)
    parts = rl_loss(logp, logp, None, torch.tensor([0.0]), torch.ones(1, 2), entropy=entropy, entropy_coef=0.1)
    assert float(parts.loss.detach()) == pytest.approx(-0.1 * 2.0)  # minus the coefficient x the mean entropy
    parts.loss.backward()
    assert close(entropy.grad, [[-0.05, -0.05]])  # raising the entropy lowers the loss
    with pytest.raises(ValueError, match="needs the tokens' entropy"):
        rl_loss(logp, logp, None, torch.tensor([0.0]), torch.ones(1, 2), entropy_coef=0.1)


@pytest.mark.parametrize("trained_head", [False, True])
def test_the_entropys_gradient_equals_autograd_through_the_whole_model(trained_head: bool) -> None:
    """entropy_grad: the fused frozen-head path keeps dH/d hidden from its forward pass, the checkpointed path (a
    trained head) differentiates the entropy it recomputes; both give plain autograd's adapter gradients for a loss
    mixing log-probs and entropy, and without entropy_grad the entropy carries no gradient."""
    from peft import LoraConfig, get_peft_model

    from evolve.rl.loss import _decoder_and_head

    torch.manual_seed(4)
    model = get_peft_model(_tiny_llama(), LoraConfig(r=4, lora_alpha=8, target_modules=["q_proj", "v_proj"]))
    for name, param in model.named_parameters():
        if "lora_B" in name:
            torch.nn.init.normal_(param, std=0.1)
    head = _decoder_and_head(model)[1]  # type: ignore[index]
    head.weight.requires_grad_(trained_head)
    prompt, completions = torch.randint(0, 50, (6,)), torch.randint(0, 50, (3, 7))
    weights, entropy_weights = torch.linspace(-1, 1, 7), torch.linspace(0.5, -0.5, 7)

    def adapter_grads() -> list[torch.Tensor]:
        grads = [param.grad.clone() for name, param in model.named_parameters() if "lora" in name]
        model.zero_grad()
        return grads

    logp, entropy = completion_logprobs(model, prompt, completions, temperature=0.7, entropy_grad=True)
    assert entropy is not None and entropy.requires_grad
    ((logp * weights).sum() + (entropy * entropy_weights).sum()).backward()
    ours = adapter_grads()

    full = torch.cat([prompt.expand(3, 6), completions], dim=1)
    logits = model(input_ids=full).logits.float()[:, 5:-1] / 0.7
    expected = torch.log_softmax(logits, -1).gather(-1, completions.unsqueeze(-1)).squeeze(-1)
    expected_entropy = -(torch.softmax(logits, -1) * torch.log_softmax(logits, -1)).sum(-1)
    ((expected * weights).sum() + (expected_entropy * entropy_weights).sum()).backward()
    plain = adapter_grads()
    head.weight.requires_grad_(False)

    assert torch.allclose(entropy.detach(), expected_entropy.detach(), atol=1e-5)
    assert len(plain) == len(ours) > 0 and all(grad.abs().sum() > 0 for grad in plain)
    assert all(torch.allclose(a, b, atol=1e-6) for a, b in zip(ours, plain, strict=True))
    _, no_grad = completion_logprobs(model, prompt, completions, temperature=0.7, with_entropy=True)
    assert no_grad is not None and not no_grad.requires_grad
