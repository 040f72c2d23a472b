"""Training rollouts sampled with vLLM (`evolve train --rollouts vllm`): the policy being trained, as a LoRA adapter.

vLLM runs in this process next to the trainer's transformers model (on a GPU both share it: vLLM takes
``gpu_memory_utilization`` of it; on a machine without one, vLLM's CPU build). Before each step the trainer's
current adapter is saved and given to vLLM as a new LoRARequest, so every rollout is sampled from the weights being
trained; the base weights in vLLM never change, which is why vLLM rollouts need LoRA (full fine-tuning would need
a weight sync into vLLM's workers). All of a step's prompts go to vLLM in one call, G samples each (n = G), seeded.
The loss then recomputes every sampled token's log-probability with the transformers model (the PPO ratio's
"old" side), as veRL does: vLLM's own log-probs differ from them by kernel numerics.
"""

from __future__ import annotations

import shutil
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from evolve.errors import UserError
from evolve.policies.base import cut_at_stop
from evolve.policies.vllm_engine import NO_VLLM, vllm_environment
from evolve.rl.rollouts import Rollout, Task

# the LoRA ranks vLLM accepts for max_lora_rank
VLLM_LORA_RANKS = (1, 8, 16, 32, 64, 128, 256, 320, 512)


class RolloutEngineError(UserError, RuntimeError):
    """vLLM is missing or could not start; the message says which and what to do."""


class VllmSampler:
    """vLLM's offline engine on the base model, sampling with the trainer's latest LoRA adapter."""

    def __init__(self, base_path: Path, adapters_dir: Path, lora_rank: int, seed: int = 0,
                 gpu_memory_utilization: float = 0.3, max_model_len: int = 4096, dtype: str = "auto") -> None:
        vllm_environment()
        try:
            from vllm import LLM, SamplingParams
            from vllm.inputs import TokensPrompt
            from vllm.lora.request import LoRARequest
        except ImportError as exc:
            raise RolloutEngineError(f"--rollouts vllm: {NO_VLLM} ({exc})") from None
        rank = next((r for r in VLLM_LORA_RANKS if r >= lora_rank), None)
        if rank is None:
            raise RolloutEngineError(f"--rollouts vllm: LoRA rank {lora_rank} is above vLLM's largest, 512")
        self._sampling_params, self._tokens_prompt, self._lora_request = SamplingParams, TokensPrompt, LoRARequest
        self.adapters_dir = adapters_dir
        self.lora: Any = None
        try:
            self.llm: Any = LLM(model=str(base_path), dtype=dtype, seed=seed, max_model_len=max_model_len,
                                gpu_memory_utilization=gpu_memory_utilization, enable_lora=True,
                                max_lora_rank=rank, max_loras=1, disable_log_stats=True)
        except Exception as exc:
            raise RolloutEngineError(f"vLLM could not start on '{base_path}': {type(exc).__name__}: {exc}") from exc

    def close(self) -> None:
        """Stop vLLM's engine process now (at interpreter exit its own cleanup logs errors into closed streams)
        and remove the per-step adapter folder (the checkpoints hold the adapter)."""
        shutil.rmtree(self.adapters_dir, ignore_errors=True)
        llm, self.llm = self.llm, None
        if llm is not None:
            llm.llm_engine.engine_core.shutdown()
            del llm

    def sync(self, model: Any, step: int) -> None:
        """Save the trainer's adapter as it is now and sample the next rollouts with it (a new LoRA id per step)."""
        folder = self.adapters_dir / f"step_{step}"
        model.save_pretrained(folder)
        previous = self.lora
        self.lora = self._lora_request(f"policy-step-{step}", step, str(folder))
        if previous is not None:  # vLLM has read it into its cache; keep one adapter on disk
            shutil.rmtree(previous.lora_path, ignore_errors=True)

    def sample(self, tasks: Sequence[Task], group_size: int, seeds: Sequence[int],
               temperature: float = 1.0) -> list[list[Rollout]]:
        """G completions of each task's prompt from the current adapter: full distribution (no top-p/top-k)."""
        prompts = [self._tokens_prompt(prompt_token_ids=list(task.prompt_ids)) for task in tasks]
        params = [self._sampling_params(n=group_size, seed=seed, temperature=temperature, top_p=1.0,
                                        max_tokens=task.prompt.max_new_tokens, stop=list(task.prompt.stop))
                  for task, seed in zip(tasks, seeds, strict=True)]
        outputs = self.llm.generate(prompts, params, lora_request=self.lora, use_tqdm=False)
        groups = []
        for task, output in zip(tasks, outputs, strict=True):
            prompt = task.prompt
            groups.append([Rollout(list(sample.token_ids), cut_at_stop(prompt.prefill, sample.text, prompt.stop)[0])
                           for sample in output.outputs])
        return groups
