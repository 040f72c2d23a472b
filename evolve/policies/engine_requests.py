"""What goes into LlamaEngine and comes out of it: requests, results, the ticket of a submitted request, statistics."""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Literal

from evolve.errors import UserError

FinishReason = Literal["stop", "length", "cancelled"]


class EngineError(UserError, RuntimeError):
    """The engine cannot load its model, or cannot take a request (too long for a slot, engine closed)."""


@dataclass(frozen=True)
class GenerationRequest:
    """One completion to generate: token ids of the rendered prompt and how to sample and stop."""

    prompt_ids: tuple[int, ...]
    max_new_tokens: int
    temperature: float = 0.8
    top_p: float = 0.95
    seed: int = 0
    stop: Callable[[Sequence[int]], bool] | None = None  # True: the tokens so far end the request ("stop")


@dataclass(frozen=True)
class GenerationResult:
    tokens: tuple[int, ...]  # generated ids, the end-of-turn token included when one ended the request
    finish_reason: FinishReason
    prompt_tokens: int
    seconds: float  # from submission to the last token


@dataclass(frozen=True)
class EngineStats:
    steps: int
    generated_tokens: int
    prefill_tokens: int  # prompt tokens decoded (a prompt shared by several requests counts once)
    cached_tokens: int  # prompt tokens found in a slot's cache, not decoded again
    shared_prefills: int  # requests that copied another's prompt cache instead of decoding their own
    max_active: int  # most requests generating in one step
    drafted_tokens: int = 0  # draft tokens verified (speculative decoding)
    accepted_tokens: int = 0  # of them, those the sampler drew too
    threads: int = 0  # the threads of the last step


class Ticket:
    """A submitted request: cancel() frees its slot at the engine's next step; `done` is called exactly once."""

    def __init__(self, request: GenerationRequest, done: Callable[[GenerationResult | Exception], None]) -> None:
        self.request = request
        self._done = done
        self._finished = False
        self.cancelled = False
        self.submitted = time.monotonic()

    def cancel(self) -> None:
        self.cancelled = True

    def finish(self, outcome: GenerationResult | Exception) -> None:
        if not self._finished:
            self._finished = True
            self._done(outcome)
