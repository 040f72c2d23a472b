"""Local transformers policy with continuous batching: a request joins the running batch at the next decode step.

The static batcher of hf.py runs one `generate()` per batch, so a request arriving while a batch decodes waits for
its slowest row; with evolution's requests arriving spread over evaluations, a GPU's batches then run one after
another (docs/study_gpu.md). Here every request goes to transformers' `ContinuousBatchingManager` (a paged KV cache,
one decode loop in a background thread): it is admitted at the next step and leaves when it ends. Rows stop at an
end-of-turn token, their own `max_new_tokens`, or one of their stop strings (checked on the streamed tokens, then
cancelled). Sampling is one stream for the whole engine: a request's text depends on what else is in flight, so
`seed` does not reproduce it (the static batcher seeds each batch).
"""

from __future__ import annotations

import asyncio
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from evolve.policies.base import PolicyError, call_soon_safely, cut_at_stop, prompt_ids
from evolve.policies.hf import LocalHFModel
from evolve.records import Completion

if TYPE_CHECKING:
    from evolve.search.prompts import Prompt

_CACHE_SHARE = 0.25  # of the free accelerator memory, for the paged cache: a study opens several policies at once
# On CPU transformers reckons "free memory" as the host's whole RAM less this process, shared with everything else
# on the machine (a study's other policies, its evaluators, other processes): there the cache is sized for what the
# policy can hold, `max_batch` requests of this many tokens (a prompt and its answer), and a forward takes at most
# _CPU_BATCH_TOKENS (longer prompts prefill in chunks), which bounds its attention masks.
_CPU_TOKENS_PER_REQUEST = 4096
_CPU_BATCH_TOKENS = 1024
_STOP_TAIL_TOKENS = 24  # a stop string is looked for in the text of this many last tokens before a full decode


@dataclass
class _Pending:
    prompt: Prompt
    prompt_tokens: int
    submitted: float
    future: asyncio.Future[Completion] = field(repr=False)
    streamed: int = 0  # tokens seen so far


class HFContinuousPolicy(LocalHFModel):
    """A causal LM from a local Hugging Face folder, served by transformers' continuous batching; safe to call from
    many asyncio tasks of one event loop at once. `max_batch` bounds the requests decoded together."""

    def __init__(self, name: str, model_path: Path | str, temperature: float = 0.8, top_p: float = 0.95,
                 max_batch: int = 8, dtype: str = "float32", device: str = "cpu", threads: int = 0) -> None:
        super().__init__(name, model_path, temperature, top_p, max_batch, dtype, device, threads)
        self._manager: Any = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._pending: dict[str, _Pending] = {}
        self._dispatcher: threading.Thread | None = None
        self._closed = False

    @property
    def in_flight(self) -> list[int]:
        """Tokens streamed so far by each request in flight that has stop strings (the others report only at the
        end), in submission order."""
        return [pending.streamed for pending in self._pending.values()]

    async def generate(self, prompt: Prompt, seed: int) -> Completion:
        del seed  # one sampling stream for the engine (module docstring)
        if self._closed:
            raise PolicyError(f"policy {self.name} is closed")
        ids = prompt_ids(self.tokenizer, prompt)
        loop = asyncio.get_running_loop()
        manager = self._started(loop)
        future: asyncio.Future[Completion] = loop.create_future()
        request_id = manager.add_request(list(ids), max_new_tokens=prompt.max_new_tokens, streaming=bool(prompt.stop),
                                         eos_token_id=sorted(self.eos_ids))
        self._pending[request_id] = _Pending(prompt, len(ids), time.monotonic(), future)
        try:
            return await future
        except asyncio.CancelledError:
            manager.cancel_request(request_id)
            raise
        finally:
            self._pending.pop(request_id, None)

    def _started(self, loop: asyncio.AbstractEventLoop) -> Any:
        """The manager, started on first use; a new event loop (a later asyncio.run) gets a new one."""
        if self._manager is not None and self._loop is loop:
            return self._manager
        self._stop_manager()
        from transformers import ContinuousBatchingConfig, GenerationConfig

        sampling: dict[str, Any] = {"do_sample": False}
        if self.temperature > 0:
            sampling = {"do_sample": True, "temperature": self.temperature, "top_p": self.top_p, "top_k": None}
        config = GenerationConfig(eos_token_id=sorted(self.eos_ids), pad_token_id=self.tokenizer.pad_token_id,
                                  **sampling)
        sizing: dict[str, Any] = {}
        if str(self.device).startswith("cpu"):
            page = ContinuousBatchingConfig().page_size
            sizing = {"num_blocks": -(-self.max_batch * _CPU_TOKENS_PER_REQUEST // page),
                      "max_batch_tokens": _CPU_BATCH_TOKENS}
        self._manager = self.model.init_continuous_batching(
            generation_config=config,
            continuous_batching_config=ContinuousBatchingConfig(max_requests_per_batch=self.max_batch,
                                                                max_memory_percent=_CACHE_SHARE, **sizing),
        )
        self._manager.start()
        self._loop = loop
        self._dispatcher = threading.Thread(target=self._dispatch, args=(self._manager, loop),
                                            name=f"{self.name}-results", daemon=True)
        self._dispatcher.start()
        return self._manager

    def _dispatch(self, manager: Any, loop: asyncio.AbstractEventLoop) -> None:
        """In a thread of its own: the manager's outputs to the event loop, until the manager stops; requests still
        waiting then fail (a decode loop that died must not leave callers waiting)."""
        while manager.is_running():
            output = manager.get_result(timeout=0.1)
            if output is not None:
                call_soon_safely(loop, self._on_output, output)
        call_soon_safely(loop, self._fail_waiting, "its decode loop stopped")

    def _fail_waiting(self, why: str) -> None:
        for pending in self._pending.values():
            if not pending.future.done():
                pending.future.set_exception(PolicyError(f"policy {self.name}: {why}"))

    def _on_output(self, output: Any) -> None:
        """On the event loop, for each streamed token (requests with stop strings) or the final output."""
        request_id = output.request_id
        pending = self._pending.get(request_id)
        if pending is None or pending.future.done():
            return
        if output.error:
            pending.future.set_exception(PolicyError(f"generation failed: {output.error}"))
            return
        tokens = list(output.generated_tokens)
        prompt = pending.prompt
        finished = output.is_finished()
        if not finished:  # a streamed token: go on unless a stop string has just appeared
            if len(tokens) <= pending.streamed:
                return
            pending.streamed = len(tokens)
            tail = self.tokenizer.decode(tokens[-_STOP_TAIL_TOKENS:], skip_special_tokens=True)
            if not any(stop in tail for stop in prompt.stop):
                return
        text, cut = cut_at_stop(prompt.prefill, self.tokenizer.decode(tokens, skip_special_tokens=True), prompt.stop)
        if not finished:
            if not cut:
                return
            self._manager.cancel_request(request_id)
        ended = bool(tokens) and tokens[-1] in self.eos_ids
        finish = "stop" if cut or ended or len(tokens) < prompt.max_new_tokens else "length"
        pending.future.set_result(Completion(text, pending.prompt_tokens, len(tokens),
                                             time.monotonic() - pending.submitted, finish))

    def _stop_manager(self) -> None:
        manager, self._manager, self._loop = self._manager, None, None
        if manager is not None:
            manager.stop(block=True, timeout=60)
        if self._dispatcher is not None:
            self._dispatcher.join()  # it ends once the manager has: within one get_result timeout
            self._dispatcher = None

    async def close(self) -> None:
        self._closed = True
        self._fail_waiting("it was closed")
        await asyncio.to_thread(self._stop_manager)

    def close_now(self) -> None:
        """close() for synchronous owners (the factory's context manager): the decode thread ends, so the process
        can exit; requests of an event loop that has ended are not waited for."""
        self._closed = True
        self._stop_manager()
