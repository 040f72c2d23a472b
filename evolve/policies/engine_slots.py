"""LlamaEngine's sequences: what each slot of the llama.cpp context holds and generates, and prefix matching."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from evolve.policies.engine_requests import Ticket
from evolve.policies.prompt_lookup import DraftLength, PromptLookup


@dataclass
class Slot:
    """A sequence of the llama.cpp context (seq_id = index) and the request it is generating."""

    index: int
    ticket: Ticket | None = None
    sampler: Any = None
    fed: int = 0  # prompt tokens already in the cache
    tokens: list[int] = field(default_factory=list)
    cached: list[int] = field(default_factory=list)  # the tokens in this sequence's cache, positions 0, 1, ...
    leader: Slot | None = None  # prefill shared: copy this slot's cache when its prompt is in
    output_index: int = -1  # row of this step's logits to sample from, -1: none this step
    drafts: list[int] = field(default_factory=list)  # this step's draft
    draft_rows: list[int] = field(default_factory=list)  # its rows of this step's logits
    lookup: PromptLookup | None = None  # the request's tokens, for drafts (None: no drafting)
    draft_length: DraftLength | None = None


def common_prefix(cached: Sequence[int], prompt: Sequence[int]) -> int:
    length = 0
    for a, b in zip(cached, prompt, strict=False):
        if a != b:
            break
        length += 1
    return length
