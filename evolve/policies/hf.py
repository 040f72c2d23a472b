"""Local transformers policy: requests in flight are batched into one generate() call in a worker thread."""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import torch
from transformers import AutoModelForCausalLM, AutoTokenizer, StoppingCriteria, StoppingCriteriaList
from transformers.utils import logging as transformers_logging

from evolve.policies.base import PolicyError, cut_at_stop, render_prompt
from evolve.policies.cpu import cpu_threads
from evolve.policies.model_files import ModelFileError, offline_hub
from evolve.records import Completion
from evolve.seeds import batch_seed

if TYPE_CHECKING:
    from evolve.search.prompts import Prompt

_GATHER_S = 0.01  # once a request arrives, how long the batcher waits for others submitted alongside it
_DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16}


@dataclass
class _Request:
    prompt: Prompt
    seed: int
    submitted: float
    future: asyncio.Future[Completion] = field(repr=False)


@dataclass(frozen=True)
class _RowResult:
    text: str
    prompt_tokens: int
    completion_tokens: int
    finish_reason: str  # "stop" (stop string or end of turn) or "length"


class _RowStops(StoppingCriteria):
    """Finishes each row on its own: end-of-turn token, one of its stop strings, or its own token limit.

    Records where and why each row finished, so the caller can cut every row exactly."""

    def __init__(self, tokenizer: Any, prompt_length: int, prompts: Sequence[Prompt], eos_ids: set[int],
                 abort: threading.Event) -> None:
        self.tokenizer = tokenizer
        self.prompt_length = prompt_length
        self.prompts = prompts
        self.eos_ids = eos_ids
        self.abort = abort
        self.finished_at: list[int | None] = [None] * len(prompts)
        self.reasons: list[str] = ["length"] * len(prompts)

    def __call__(self, input_ids: torch.LongTensor, scores: torch.FloatTensor, **kwargs: Any) -> torch.BoolTensor:
        generated = input_ids.shape[1] - self.prompt_length
        for row, prompt in enumerate(self.prompts):
            if self.finished_at[row] is not None:
                continue
            if int(input_ids[row, -1]) in self.eos_ids:
                self.finished_at[row], self.reasons[row] = generated, "stop"
            elif prompt.stop and cut_at_stop(prompt.prefill, self._decode(input_ids[row]), prompt.stop)[1]:
                self.finished_at[row], self.reasons[row] = generated, "stop"
            elif generated >= prompt.max_new_tokens:
                self.finished_at[row], self.reasons[row] = generated, "length"
        done = [at is not None or self.abort.is_set() for at in self.finished_at]
        return torch.tensor(done, dtype=torch.bool, device=input_ids.device)

    def _decode(self, row_ids: torch.Tensor) -> str:
        return self.tokenizer.decode(row_ids[self.prompt_length:].tolist(), skip_special_tokens=True)


def load_hf_model(model_path: Path | str, dtype: str, device: str, threads: int) -> tuple[Any, Any, set[int]]:
    """(tokenizer padding on the left, model in eval mode on `device`, end-of-turn token ids) from a local folder."""
    offline_hub()
    if dtype == "auto":
        dtype = "float32" if device == "cpu" else "bfloat16"
    if dtype not in _DTYPES:
        raise ModelFileError(f"dtype '{dtype}' is not one of {', '.join(_DTYPES)}")
    torch.set_num_threads(cpu_threads(threads))
    transformers_logging.disable_progress_bar()
    try:
        tokenizer = AutoTokenizer.from_pretrained(model_path)
        model = AutoModelForCausalLM.from_pretrained(model_path, dtype=_DTYPES[dtype]).to(device)
    except Exception as exc:
        raise ModelFileError(f"cannot load the model from '{model_path}': {exc}") from exc
    model.eval()
    tokenizer.padding_side = "left"
    if tokenizer.pad_token_id is None:
        tokenizer.pad_token = tokenizer.eos_token
    eos = model.generation_config.eos_token_id
    eos_ids = {eos} if isinstance(eos, int) else set(eos or [])
    if tokenizer.eos_token_id is not None:
        eos_ids.add(tokenizer.eos_token_id)
    return tokenizer, model, eos_ids


class LocalHFModel:
    """What both transformers policies hold: the model and tokenizer loaded from a local folder, the sampling
    settings, and the prompt rendering."""

    def __init__(self, name: str, model_path: Path | str, temperature: float, top_p: float, max_batch: int,
                 dtype: str, device: str, threads: int) -> None:
        if max_batch < 1:
            raise ValueError("max_batch must be at least 1")
        self.name = name
        self.temperature = temperature
        self.top_p = top_p
        self.max_batch = max_batch
        self.device = device
        self.tokenizer, self.model, self.eos_ids = load_hf_model(model_path, dtype, device, threads)

    def render(self, prompt: Prompt) -> str:
        """The exact text the model continues (policies.base.render_prompt)."""
        return render_prompt(self.tokenizer, prompt)


class HFPolicy(LocalHFModel):
    """A causal LM served from a local Hugging Face folder; safe to call from many asyncio tasks at once.

    Requests are queued; a batcher task takes up to `max_batch` of them, renders each with the chat
    template plus its prefill, left-pads them, and runs one `model.generate` in a worker thread."""

    def __init__(self, name: str, model_path: Path | str, temperature: float = 0.8, top_p: float = 0.95,
                 max_batch: int = 8, dtype: str = "float32", device: str = "cpu", threads: int = 0) -> None:
        super().__init__(name, model_path, temperature, top_p, max_batch, dtype, device, threads)
        self.batches_run = 0  # model.generate calls finished, for tests and benchmarks
        self.batch_sizes: list[int] = []
        self._abort = threading.Event()
        self._closed = False
        self._loop: asyncio.AbstractEventLoop | None = None
        self._queue: asyncio.Queue[_Request] | None = None
        self._batcher: asyncio.Task[None] | None = None

    async def generate(self, prompt: Prompt, seed: int) -> Completion:
        if self._closed:
            raise PolicyError(f"policy {self.name} is closed")
        loop = asyncio.get_running_loop()
        if self._queue is None or self._loop is not loop:  # first call, or a new event loop
            self._loop, self._queue = loop, asyncio.Queue()
            self._batcher = loop.create_task(self._serve(self._queue))
        future: asyncio.Future[Completion] = loop.create_future()
        self._queue.put_nowait(_Request(prompt, seed, time.monotonic(), future))
        return await future

    async def close(self) -> None:
        self._closed = True
        self._abort.set()  # a batch still generating stops after its current token
        batcher, queue = self._batcher, self._queue
        self._batcher = self._queue = self._loop = None
        if batcher is not None and not batcher.done():
            batcher.cancel()
            if batcher.get_loop() is asyncio.get_running_loop():
                await asyncio.gather(batcher, return_exceptions=True)
        while queue is not None and not queue.empty():
            _fail([queue.get_nowait()], PolicyError(f"policy {self.name} was closed"))

    async def _serve(self, queue: asyncio.Queue[_Request]) -> None:
        batch: list[_Request] = []
        try:
            while True:
                batch = [await queue.get()]
                await asyncio.sleep(_GATHER_S)
                while len(batch) < self.max_batch and not queue.empty():
                    batch.append(queue.get_nowait())
                batch = [request for request in batch if not request.future.done()]
                if not batch:
                    continue
                try:
                    results = await asyncio.to_thread(self._generate_batch, [r.prompt for r in batch],
                                                      [r.seed for r in batch])
                except Exception as exc:  # the batch's requests fail; the queue keeps being served
                    _fail(batch, PolicyError(f"generation failed: {type(exc).__name__}: {exc}"))
                    continue
                now = time.monotonic()
                for request, result in zip(batch, results, strict=True):
                    if request.future.done():
                        continue
                    if isinstance(result, Exception):
                        request.future.set_exception(result)
                    else:
                        request.future.set_result(Completion(result.text, result.prompt_tokens,
                                                             result.completion_tokens, now - request.submitted,
                                                             result.finish_reason))
                batch = []
        except asyncio.CancelledError:
            _fail(batch, PolicyError(f"policy {self.name} was closed"))
            raise
        except BaseException as exc:  # a bug here must not leave callers waiting forever
            _fail(batch, PolicyError(f"policy batcher died: {exc!r}"))
            while not queue.empty():
                _fail([queue.get_nowait()], PolicyError(f"policy batcher died: {exc!r}"))
            self._queue = None
            raise

    def _generate_batch(self, prompts: Sequence[Prompt], seeds: Sequence[int]) -> list[_RowResult | Exception]:
        """Runs in a worker thread: one model.generate for every request that could be rendered."""
        results: list[_RowResult | Exception | None] = [None] * len(prompts)
        texts: list[str] = []
        rows: list[int] = []
        for index, prompt in enumerate(prompts):
            try:
                if prompt.max_new_tokens < 1:
                    raise ValueError(f"max_new_tokens must be at least 1, got {prompt.max_new_tokens}")
                texts.append(self.render(prompt))
                rows.append(index)
            except Exception as exc:  # a malformed prompt fails alone, not its batch mates
                results[index] = PolicyError(f"cannot render the prompt: {type(exc).__name__}: {exc}")
        if rows:
            generated = self._run_model(texts, [prompts[i] for i in rows], [seeds[i] for i in rows])
            for index, result in zip(rows, generated, strict=True):
                results[index] = result
            self.batches_run += 1
            self.batch_sizes.append(len(rows))
        return [result for result in results if result is not None]  # every slot is filled by now

    def _run_model(self, texts: list[str], prompts: list[Prompt], seeds: list[int]) -> list[_RowResult]:
        encoded = self.tokenizer(texts, return_tensors="pt", padding=True, add_special_tokens=False).to(self.device)
        prompt_length = int(encoded["input_ids"].shape[1])
        stops = _RowStops(self.tokenizer, prompt_length, prompts, self.eos_ids, self._abort)
        sampling: dict[str, Any] = {"do_sample": False, "temperature": None, "top_p": None, "top_k": None}
        if self.temperature > 0:
            sampling = {"do_sample": True, "temperature": self.temperature, "top_p": self.top_p, "top_k": None}
        torch.manual_seed(batch_seed(seeds))
        with torch.inference_mode():
            output = self.model.generate(
                **encoded,
                max_new_tokens=max(prompt.max_new_tokens for prompt in prompts),
                stopping_criteria=StoppingCriteriaList([stops]),
                pad_token_id=self.tokenizer.pad_token_id,
                eos_token_id=sorted(self.eos_ids),
                **sampling,
            )
        results = []
        for row, prompt in enumerate(prompts):
            produced = output.shape[1] - prompt_length
            count = min(stops.finished_at[row] or produced, produced, prompt.max_new_tokens)
            tokens = output[row, prompt_length:prompt_length + count].tolist()
            raw = self.tokenizer.decode(tokens, skip_special_tokens=True)
            text, found = cut_at_stop(prompt.prefill, raw, prompt.stop)
            finish = "stop" if found or stops.reasons[row] == "stop" else "length"
            results.append(_RowResult(text, int(encoded["attention_mask"][row].sum()), count, finish))
        return results


def _fail(requests: Sequence[_Request], error: Exception) -> None:
    for request in requests:
        if not request.future.done():
            request.future.set_exception(error)
