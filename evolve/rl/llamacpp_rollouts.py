"""Training rollouts sampled with llama.cpp (`evolve train --rollouts llamacpp`, the default on CPU): the policy being
trained, as a LoRA adapter on the base model's GGUF.

Before each step the trainer's current LoRA weights are written as a GGUF LoRA adapter (a few MB, well under a
second) and applied to the engine, so every rollout is sampled from exactly the weights being trained: no stale
policy. The base weights are the GGUF the policy was loaded from (the embedded SmolLM2 file, whose dequantised
weights are what the trainer's transformers model holds, or the GGUF converted from a checkpoint folder), which is
why these rollouts need LoRA (full fine-tuning would re-export the whole model every step). All of a step's
prompts x G samples go to the continuously batched engine at once; the G samples of one prompt share its prefill.
The engine runs in a process of its own (rollout_process.py), which only gets token ids, stop strings and seeds.
The loss then recomputes every sampled token's log-probability with the transformers model (the PPO ratio's "old"
side), as veRL does with vLLM: llama.cpp's own numerics differ from torch's by float noise
(scripts/bench/check_fidelity.py measures how much).
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from evolve.rl.rollout_process import RolloutEngineError, RolloutProcess, RolloutPrompt
from evolve.rl.rollouts import Rollout, Task

__all__ = ["LlamaCppSampler", "RolloutEngineError", "lora_tensors", "write_lora_gguf"]

_PROJECTIONS = {"q_proj": "attn_q", "k_proj": "attn_k", "v_proj": "attn_v", "o_proj": "attn_output",
                "gate_proj": "ffn_gate", "up_proj": "ffn_up", "down_proj": "ffn_down"}


def lora_tensors(model: Any, n_head: int, n_kv_head: int) -> dict[str, np.ndarray]:
    """The peft model's LoRA weights under llama.cpp's adapter names (blk.N.attn_q.weight.lora_a / .lora_b).

    lora_A is [r, in] and lora_B [out, r], as llama.cpp wants them; lora_B of q and k is permuted as the GGUF
    converter permutes q and k weights (llama.cpp's rotary layout)."""
    tensors: dict[str, np.ndarray] = {}
    for name, parameter in model.named_parameters():
        if ".lora_A." not in name and ".lora_B." not in name:
            continue
        parts = name.split(".")
        layer = parts[parts.index("layers") + 1]
        projection = next((p for p in parts if p in _PROJECTIONS), None)
        if projection is None:
            raise RolloutEngineError(f"--rollouts llamacpp: LoRA on {name} has no llama.cpp name (target only "
                                     f"{', '.join(_PROJECTIONS)})")
        weight = parameter.detach().float().cpu().numpy()
        side = "a" if ".lora_A." in name else "b"
        if side == "b" and projection in ("q_proj", "k_proj"):
            heads = n_head if projection == "q_proj" else n_kv_head
            out, rank = weight.shape
            weight = weight.reshape(heads, 2, out // heads // 2, rank).swapaxes(1, 2).reshape(out, rank)
        tensors[f"blk.{layer}.{_PROJECTIONS[projection]}.weight.lora_{side}"] = np.ascontiguousarray(weight)
    if not tensors:
        raise RolloutEngineError("--rollouts llamacpp samples from a LoRA adapter: enable LoRA (lora.enabled = true)")
    return tensors


def write_lora_gguf(tensors: dict[str, np.ndarray], alpha: float, path: Path) -> None:
    """A GGUF LoRA adapter for a llama-architecture base, written under a temporary name and renamed."""
    import gguf

    partial = path.with_suffix(".partial")
    writer = gguf.GGUFWriter(str(partial), "llama")
    writer.add_string("general.type", "adapter")
    writer.add_string("adapter.type", "lora")
    writer.add_float32("adapter.lora.alpha", float(alpha))
    for name, value in tensors.items():
        writer.add_tensor(name, value.astype(np.float32))
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    partial.replace(path)


class LlamaCppSampler:
    """The trainer's side of llama.cpp rollouts: exports its LoRA adapter every step; sampling runs in `rollouts`,
    the engine's process (rollout_process.py)."""

    def __init__(self, base_gguf: Path, adapters_dir: Path, tokenizer_path: Path, model_config: Any, alpha: float,
                 slots: int = 16, context: int = 4096, threads: int = 0, engines: int = 1) -> None:
        self.adapters_dir = adapters_dir
        self.alpha = alpha
        self.n_head = int(model_config.num_attention_heads)
        self.n_kv_head = int(getattr(model_config, "num_key_value_heads", None) or self.n_head)
        self.rollouts = RolloutProcess(base_gguf, tokenizer_path, slots, context, threads, engines)
        self.adapter: Path | None = None
        self.sync_seconds = 0.0

    def close(self) -> None:
        self.rollouts.close()
        for leftover in self.adapters_dir.glob("step_*.gguf"):
            leftover.unlink(missing_ok=True)

    def sync(self, model: Any, step: int) -> None:
        """Write the trainer's adapter as it is now and sample the next rollouts with it."""
        started = time.monotonic()
        self.adapters_dir.mkdir(parents=True, exist_ok=True)
        path = self.adapters_dir / f"step_{step}.gguf"
        write_lora_gguf(lora_tensors(model, self.n_head, self.n_kv_head), self.alpha, path)
        self.rollouts.set_lora(path)
        previous, self.adapter = self.adapter, path
        if previous is not None and previous != path:
            previous.unlink(missing_ok=True)
        self.sync_seconds = time.monotonic() - started

    def sample(self, tasks: Sequence[Task], group_size: int, seeds: Sequence[int],
               temperature: float = 1.0) -> list[list[Rollout]]:
        """G completions of each task's prompt from the current adapter: the full distribution (no top-p/top-k)."""
        prompts = [RolloutPrompt(tuple(task.prompt_ids), task.prompt.max_new_tokens, tuple(task.prompt.stop),
                                 task.prompt.prefill) for task in tasks]
        sampled = self.rollouts.sample(prompts, group_size, seeds, temperature)
        return [[Rollout(tokens, text) for tokens, text in rows] for rows in sampled]
