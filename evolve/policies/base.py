"""The policy interface the controller drives: one prompt in, one completion out, asynchronously."""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any, Protocol

from evolve.errors import UserError
from evolve.records import Completion

if TYPE_CHECKING:
    from evolve.search.prompts import Prompt


class PolicyError(UserError, RuntimeError):
    """A policy could not produce a completion (model error, closed policy); the controller records it."""


class PolicyUnavailable(PolicyError):
    """The backend is gone (a dead or stalled server, past its retries): the run stops and stays resumable.

    The iteration that met it is not recorded, so a resume asks again."""


class Policy(Protocol):
    name: str

    async def generate(self, prompt: Prompt, seed: int) -> Completion:
        """One completion for the prompt; raises on backend failure (the controller records it)."""
        ...

    async def close(self) -> None:
        """Release the backend; requests still waiting fail with PolicyError."""
        ...


def cut_at_stop(prefill: str, generated: str, stops: Sequence[str]) -> tuple[str, bool]:
    """`generated` up to the first stop string (excluded), and whether one was found.

    A stop string may begin inside the prefill (the assistant text before `generated`) but must end
    in `generated`; one lying wholly inside the prefill does not count."""
    full = prefill + generated
    cut: int | None = None
    for stop in stops:
        if not stop:
            continue
        start = full.find(stop, max(0, len(prefill) - len(stop) + 1))
        if start != -1 and (cut is None or start < cut):
            cut = start
    if cut is None:
        return generated, False
    return generated[: max(0, cut - len(prefill))], True


def render_prompt(tokenizer: Any, prompt: Prompt) -> str:
    """The exact text a local model continues: the chat template with the assistant turn opened, then the prefill.

    A prompt that carries its own rendered `text` (raw-completion mode) is continued as is."""
    if prompt.text is not None:
        return prompt.text
    text = tokenizer.apply_chat_template(list(prompt.messages), add_generation_prompt=True, tokenize=False)
    return str(text) + prompt.prefill


def prompt_ids(tokenizer: Any, prompt: Prompt) -> list[int]:
    """The token ids a local model continues (render_prompt, tokenised as is); PolicyError for a prompt that cannot
    be rendered or asks for no tokens."""
    if prompt.max_new_tokens < 1:
        raise PolicyError(f"max_new_tokens must be at least 1, got {prompt.max_new_tokens}")
    try:
        return list(tokenizer(render_prompt(tokenizer, prompt), add_special_tokens=False)["input_ids"])
    except Exception as exc:
        raise PolicyError(f"cannot render the prompt: {type(exc).__name__}: {exc}") from exc


def call_soon_safely(loop: asyncio.AbstractEventLoop, callback: Callable[..., Any], *args: Any) -> None:
    """`callback(*args)` on `loop` from another thread; nothing when the loop has closed (nobody waits any more)."""
    try:
        loop.call_soon_threadsafe(callback, *args)
    except RuntimeError:
        pass
