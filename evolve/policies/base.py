"""The policy interface the controller drives: one prompt in, one completion out, asynchronously."""

from __future__ import annotations

from typing import TYPE_CHECKING, Protocol

from evolve.records import Completion

if TYPE_CHECKING:
    from evolve.prompts import Prompt


class PolicyError(RuntimeError):
    """A policy could not produce a completion (model error, closed policy); the controller records it."""


class Policy(Protocol):
    name: str

    async def generate(self, prompt: Prompt, seed: int) -> Completion:
        """One completion for the prompt; raises on backend failure (the controller records it)."""
        ...

    async def close(self) -> None:
        """Release the backend; requests still waiting fail with PolicyError."""
        ...
