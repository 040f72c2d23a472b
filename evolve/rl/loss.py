"""The policy-gradient loss for RL on sampled completions: token log-probs, dual-clip PPO, k3 KL to a reference.

Shapes: a group is one prompt ``[P]`` and its G sampled completions ``[G, C]`` (right-padded; ``mask [G, C]`` is 1
on real tokens). Each rollout has one advantage ``[G]``, broadcast to every one of its completion tokens.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import Tensor
from torch.utils.checkpoint import checkpoint


def masked_mean(values: Tensor, mask: Tensor, denom: float | None = None) -> Tensor:
    """Sum of ``values`` over the tokens where ``mask`` is 1, divided by ``denom`` (default: the token count).

    Pass ``denom`` = the token count of the whole step when a step's groups are summed one at a time, so the
    accumulated gradient is the token mean over the step (not a mean of group means).
    """
    total = (values * mask).sum()
    count = float(mask.sum()) if denom is None else float(denom)
    return total / max(count, 1.0)


LOGIT_CHUNK_ELEMENTS = 1 << 26  # [rows, tokens, vocab] logits held at once in completion_logprobs (256 MB float32)
# config keys of transformers models whose forward rescales or caps the logits after the vocabulary projection
_LOGIT_POSTPROCESSING = ("final_logit_softcapping", "logit_scale", "logits_scaling")


def completion_logprobs(
    model: torch.nn.Module, prompt_ids: Tensor, completion_ids: Tensor, temperature: float = 1.0,
    with_entropy: bool = False, lengths: Tensor | None = None, entropy_grad: bool = False,
) -> tuple[Tensor, Tensor | None]:
    """log p(token t | prompt, tokens < t) for each completion token ``[G, C]``, and the entropy there if asked
    (``entropy_grad``: with its gradient, for an entropy term in the loss; otherwise it carries none).

    The prompt is run once (batch 1) and its KV cache repeated for the G rows, so a group costs one prompt
    forward instead of G; gradients still flow through the shared prompt. Logits are divided by the sampling
    temperature so the log-probs are those of the distribution the tokens were drawn from.

    ``lengths [G]`` (each row's real tokens; the rest is right padding) runs the rows in buckets of similar length,
    each only as wide as its longest row (length_buckets): one capped answer in a group no longer makes every row
    as long as it. Positions past a row's bucket width come back 0 (padding, masked by the caller); the real
    tokens' values and gradients are those of the whole padded batch, as causal attention never looks right.

    For a transformers model (one with a decoder and an output embedding) the vocabulary projection runs on
    chunks of completion tokens, each recomputed in the backward pass, so memory holds one chunk's
    ``[G, k, vocab]`` logits (LOGIT_CHUNK_ELEMENTS) instead of the group's ``[G, C, vocab]``: with a 150k
    vocabulary, G = 8 and C = 1024 that is 256 MB instead of several GB per copy.
    """
    if prompt_ids.dim() != 1 or completion_ids.dim() != 2 or prompt_ids.numel() < 1:
        raise ValueError("prompt_ids must be [P] (P >= 1) and completion_ids [G, C]")
    rows, width = completion_ids.shape
    split = _decoder_and_head(model)
    body = split[0] if split is not None else model
    prompt_cache = None
    if prompt_ids.numel() > 1:
        prompt_cache = body(input_ids=prompt_ids[None, :-1], use_cache=True).past_key_values
    buckets = [(torch.arange(rows, device=completion_ids.device), width)] if lengths is None else [
        (torch.as_tensor(bucket, device=completion_ids.device), bucket_width)
        for bucket, bucket_width in length_buckets([int(n) for n in lengths.tolist()], width)]
    parts = []
    for members, bucket_width in buckets:
        if prompt_cache is None:
            cache = None
        elif len(buckets) == 1:
            cache = prompt_cache
            cache.batch_repeat_interleave(len(members))
        else:  # a cache per bucket, each from the one prompt forward (its tensors are never changed in place)
            cache = _repeated_cache(prompt_cache, len(members))
        bucket_ids = completion_ids[:, :bucket_width] if len(buckets) == 1 else completion_ids[members, :bucket_width]
        chosen, entropy = _rows_logprobs(body, split, cache, prompt_ids[-1:], bucket_ids, temperature,
                                         with_entropy or entropy_grad, entropy_grad)
        parts.append((members, chosen, entropy))
    if len(parts) == 1 and parts[0][1].shape[1] == width:
        return parts[0][1], parts[0][2]
    order = torch.cat([members for members, _, _ in parts]).argsort()

    def gather(tensors: list[Tensor]) -> Tensor:
        padded = [torch.nn.functional.pad(tensor, (0, width - tensor.shape[1])) for tensor in tensors]
        return torch.cat(padded)[order]

    chosen = gather([part[1] for part in parts])
    entropy = gather([part[2] for part in parts if part[2] is not None]) if with_entropy or entropy_grad else None
    return chosen, entropy


def length_buckets(lengths: list[int], width: int) -> list[tuple[list[int], int]]:
    """Rows grouped by length, longest first: a bucket takes the longest row left and every next row at least half
    as long, and is as wide as that longest row (at least 1, at most `width`). Padding is then at most half of a
    bucket's tokens instead of most of a group's when one row is far longer than the rest."""
    order = sorted(range(len(lengths)), key=lambda row: -lengths[row])
    buckets: list[tuple[list[int], int]] = []
    start = 0
    while start < len(order):
        longest = lengths[order[start]]
        end = start + 1
        while end < len(order) and 2 * lengths[order[end]] >= longest:
            end += 1
        buckets.append((sorted(order[start:end]), min(width, max(1, longest))))
        start = end
    return buckets


def _repeated_cache(prompt_cache: object, rows: int) -> object:
    from transformers import DynamicCache

    cache = DynamicCache()
    for layer_index, layer in enumerate(prompt_cache.layers):  # type: ignore[attr-defined]
        cache.update(layer.keys.repeat_interleave(rows, dim=0), layer.values.repeat_interleave(rows, dim=0),
                     layer_index)
    return cache


def _rows_logprobs(body: torch.nn.Module, split: tuple[torch.nn.Module, torch.nn.Linear] | None, cache: object,
                   last_prompt_id: Tensor, completion_ids: Tensor, temperature: float,
                   with_entropy: bool, entropy_grad: bool = False) -> tuple[Tensor, Tensor | None]:
    """completion_logprobs on rows that share one prompt, given its cache already repeated for them."""
    rows = completion_ids.shape[0]
    # the last prompt token predicts the first completion token; completion token t-1 predicts token t
    inputs = torch.cat([last_prompt_id.expand(rows, 1), completion_ids[:, :-1]], dim=1)
    output = body(input_ids=inputs, past_key_values=cache, use_cache=cache is not None)
    if split is None:
        return _token_logprobs(output.logits, completion_ids, temperature, with_entropy, entropy_grad)
    head = split[1]
    hidden = output.last_hidden_state
    step = max(1, LOGIT_CHUNK_ELEMENTS // max(1, rows * head.out_features))
    chunks = []
    fused = torch.is_grad_enabled() and not head.weight.requires_grad and head.bias is None
    for start in range(0, completion_ids.shape[1], step):
        args = (head, hidden[:, start:start + step], completion_ids[:, start:start + step], temperature, with_entropy,
                entropy_grad)
        if fused:
            chunks.append(_frozen_head_logprobs(*args))
        elif torch.is_grad_enabled():
            chunks.append(checkpoint(_projected_logprobs, *args, use_reentrant=False))
        else:
            chunks.append(_projected_logprobs(*args))
    chosen = torch.cat([chunk[0] for chunk in chunks], dim=1)
    entropy = torch.cat([chunk[1] for chunk in chunks], dim=1) if with_entropy else None
    return chosen, entropy


def _decoder_and_head(model: torch.nn.Module) -> tuple[torch.nn.Module, torch.nn.Linear] | None:
    """The decoder stack and the vocabulary projection of a transformers causal LM (through a peft wrapper),
    None for any other module (which is then called whole and must return .logits)."""
    base = model.get_base_model() if hasattr(model, "get_base_model") else model
    get_decoder, get_head = getattr(base, "get_decoder", None), getattr(base, "get_output_embeddings", None)
    if get_decoder is None or get_head is None:
        return None
    config = getattr(base, "config", None)
    if any(getattr(config, name, None) not in (None, 1, 1.0) for name in _LOGIT_POSTPROCESSING):
        return None  # its forward changes the logits after the head: keep calling it whole
    decoder, head = get_decoder(), get_head()
    return (decoder, head) if isinstance(head, torch.nn.Linear) and decoder is not base else None


def _projected_logprobs(head: torch.nn.Linear, hidden: Tensor, ids: Tensor, temperature: float,
                        with_entropy: bool, entropy_grad: bool = False) -> tuple[Tensor, Tensor]:
    chosen, entropy = _token_logprobs(head(hidden), ids, temperature, with_entropy, entropy_grad)
    return chosen, entropy if entropy is not None else chosen.new_zeros(())


class _FrozenHeadLogprobs(torch.autograd.Function):
    """Chosen-token log-probs through a frozen vocabulary projection, their gradient taken in the forward pass.

    d logp_t / d hidden_t = (onehot(token_t) - softmax(z_t / T)) W / T is known once the softmax is, and is only
    ``[G, k, hidden]``: keeping it costs no recompute of the ``[G, k, vocab]`` logits in the backward pass (the
    checkpointed path runs the projection three times, this one twice) and no more memory than the hidden states.
    Only for a head whose weight takes no gradient (LoRA's frozen base): the weight's own gradient would need the
    logits again. The entropy, when asked, comes from the same softmax; with ``entropy_grad`` its gradient is kept
    the same way, dH/d hidden = -(p (log p + H)) W / T, another ``[G, k, hidden]``.
    """

    @staticmethod
    def forward(ctx: torch.autograd.function.FunctionCtx, hidden: Tensor, weight: Tensor, ids: Tensor,
                temperature: float, with_entropy: bool, entropy_grad: bool = False) -> tuple[Tensor, Tensor]:
        shifted = torch.nn.functional.linear(hidden, weight).float().div_(temperature)
        shifted = shifted.sub_(torch.logsumexp(shifted, dim=-1, keepdim=True))  # log-softmax, in place
        chosen = shifted.gather(-1, ids.unsqueeze(-1)).squeeze(-1)
        probs = shifted.exp()
        entropy = -(probs * shifted).sum(-1) if with_entropy or entropy_grad else chosen.new_zeros(())
        saved = []
        if entropy_grad:  # dH/dz = -p (log p + H), taken before probs is overwritten below
            along = (probs * (shifted + entropy.unsqueeze(-1))).neg_().div_(temperature)
            saved.append(torch.matmul(along.to(weight.dtype), weight))
        direction = probs.neg_().scatter_add_(-1, ids.unsqueeze(-1), torch.ones_like(chosen).unsqueeze(-1))
        ctx.save_for_backward(torch.matmul(direction.div_(temperature).to(weight.dtype), weight), *saved)
        ctx.hidden_dtype = hidden.dtype  # type: ignore[attr-defined]
        if not entropy_grad:
            ctx.mark_non_differentiable(entropy)
        return chosen, entropy

    @staticmethod
    def backward(ctx: torch.autograd.function.FunctionCtx, grad_chosen: Tensor,
                 grad_entropy: Tensor) -> tuple[Tensor | None, ...]:
        jacobian, *entropy_jacobian = ctx.saved_tensors  # type: ignore[attr-defined]
        hidden_grad = grad_chosen.unsqueeze(-1) * jacobian
        if entropy_jacobian and grad_entropy is not None:
            hidden_grad = hidden_grad + grad_entropy.unsqueeze(-1) * entropy_jacobian[0]
        return hidden_grad.to(ctx.hidden_dtype), None, None, None, None, None  # type: ignore[attr-defined]


def _frozen_head_logprobs(head: torch.nn.Linear, hidden: Tensor, ids: Tensor, temperature: float,
                          with_entropy: bool, entropy_grad: bool = False) -> tuple[Tensor, Tensor]:
    chosen, entropy = _FrozenHeadLogprobs.apply(hidden, head.weight, ids, temperature, with_entropy, entropy_grad)
    return chosen, entropy


def _token_logprobs(logits: Tensor, ids: Tensor, temperature: float,
                    with_entropy: bool, entropy_grad: bool = False) -> tuple[Tensor, Tensor | None]:
    logits = logits.float() / temperature
    chosen = logits.gather(-1, ids.unsqueeze(-1)).squeeze(-1) - torch.logsumexp(logits, dim=-1)
    entropy = None
    if entropy_grad:
        entropy = _entropy(logits)
    elif with_entropy:
        with torch.no_grad():  # row by row: the [C, vocab] temporaries of one row, not [G, C, vocab]
            entropy = torch.stack([_entropy(row) for row in logits])
    return chosen, entropy


def _entropy(logits: Tensor) -> Tensor:
    logprobs = torch.log_softmax(logits, dim=-1)
    return -(logprobs.exp() * logprobs).sum(-1)


LOG_RATIO_CLAMP = 20.0  # |log(pi / pi_old)| and |log(pi_ref / pi)| are clamped here before exp, as veRL does
KL_CLAMP = 10.0  # a token's k3 KL is clamped to [-KL_CLAMP, KL_CLAMP], as veRL's low_var_kl


@dataclass(frozen=True)
class ClippedLoss:
    """Per-token PPO loss ``[G, C]`` and, per token, 1.0 where each clip was the one that bound."""

    loss: Tensor
    clipped: Tensor  # the ratio clip (1 - c, 1 + c) set the loss
    dual_clipped: Tensor  # a negative-advantage token whose loss the dual clip capped at clip_ratio_c * |A|
    log_ratio: Tensor  # log(pi / pi_old) after the clamp


def clipped_pg_loss(logp: Tensor, old_logp: Tensor, advantages: Tensor, clip: float = 0.2,
                    clip_ratio_c: float = 3.0) -> ClippedLoss:
    """Dual-clip PPO per token, as veRL's ``compute_policy_loss_vanilla``; ``advantages [G]`` is broadcast over tokens.

    r = exp(clamp(logp - old_logp, -20, 20)); the PPO loss is ``max(-r A, -clip(r, 1 - c, 1 + c) A)``, and for
    A < 0 it is further capped at ``-clip_ratio_c A`` (Ye et al. 2019, arXiv 1912.09729): a token the policy now
    finds far likelier than when it was sampled cannot make the loss unbounded. The clamp keeps exp finite, so no
    0 * inf = NaN reaches the gradient of the branch that was not chosen.
    """
    if clip_ratio_c <= 1.0:
        raise ValueError(f"clip_ratio_c must be > 1 (dual-clip PPO), got {clip_ratio_c}")
    log_ratio = torch.clamp(logp - old_logp, -LOG_RATIO_CLAMP, LOG_RATIO_CLAMP)
    ratio = torch.exp(log_ratio)
    adv = advantages.to(logp.dtype).unsqueeze(-1).expand_as(logp)
    unclipped = -adv * ratio
    clipped = -adv * torch.clamp(ratio, 1.0 - clip, 1.0 + clip)
    ppo = torch.maximum(unclipped, clipped)
    capped = torch.minimum(ppo, -adv * clip_ratio_c)
    negative = adv < 0
    return ClippedLoss(
        loss=torch.where(negative, capped, ppo),
        clipped=(clipped > unclipped).to(logp.dtype),
        dual_clipped=(negative & (ppo > -adv * clip_ratio_c)).to(logp.dtype),
        log_ratio=log_ratio,
    )


def k3_kl(logp: Tensor, ref_logp: Tensor) -> Tensor:
    """Per-token KL(policy || reference) in the low-variance k3 form: exp(d) - d - 1 with d = ref_logp - logp (>= 0).

    d is clamped to [-20, 20] and the result to [-10, 10], as veRL's ``low_var_kl``, so one token the policy has
    all but ruled out cannot make the KL term (or its gradient) infinite.
    """
    delta = torch.clamp(ref_logp - logp, -LOG_RATIO_CLAMP, LOG_RATIO_CLAMP)
    return torch.clamp(torch.exp(delta) - delta - 1.0, -KL_CLAMP, KL_CLAMP)


@dataclass(frozen=True)
class LossParts:
    """One group's loss (to backpropagate) and its parts as floats, each a token mean over the group."""

    loss: Tensor
    pg_loss: float
    kl: float
    clip_frac: float
    tokens: int
    dual_clip_frac: float = 0.0  # negative-advantage tokens whose loss the dual clip capped
    ppo_kl: float = 0.0  # mean of log(pi_old / pi): how far the policy has moved from the one that sampled


def rl_loss(
    logp: Tensor, old_logp: Tensor, ref_logp: Tensor | None, advantages: Tensor, mask: Tensor,
    clip: float = 0.2, kl_coef: float = 1e-3, denom: float | None = None, clip_ratio_c: float = 3.0,
    entropy: Tensor | None = None, entropy_coef: float = 0.0,
) -> LossParts:
    """Dual-clip PPO policy-gradient loss plus ``kl_coef`` x k3 KL to the reference, minus ``entropy_coef`` x the
    token entropy ``[G, C]`` (a bonus for keeping the distribution spread; give it with its gradient), masked mean
    over completion tokens (``denom``: see masked_mean)."""
    mask = mask.to(logp.dtype)
    pg = clipped_pg_loss(logp, old_logp, advantages, clip, clip_ratio_c)
    per_token = pg.loss
    kl = torch.zeros((), dtype=logp.dtype)
    if ref_logp is not None:
        kl_tokens = k3_kl(logp, ref_logp)
        per_token = pg.loss + kl_coef * kl_tokens
        kl = masked_mean(kl_tokens.detach(), mask)
    if entropy_coef:
        if entropy is None:
            raise ValueError("entropy_coef > 0 needs the tokens' entropy (completion_logprobs(entropy_grad=True))")
        per_token = per_token - entropy_coef * entropy
    return LossParts(
        loss=masked_mean(per_token, mask, denom),
        pg_loss=float(masked_mean(pg.loss.detach(), mask)),
        kl=float(kl),
        clip_frac=float(masked_mean(pg.clipped, mask)),
        tokens=int(mask.sum()),
        dual_clip_frac=float(masked_mean(pg.dual_clipped, mask)),
        ppo_kl=float(masked_mean(-pg.log_ratio.detach(), mask)),
    )
