"""Drafts for speculative decoding taken from a request's own tokens (prompt lookup), and how long to make them.

An evolution prompt holds the parent's code (and its inspirations'); a child rewrites most of it, so the tokens
that followed the last few generated tokens where they stand in the prompt are a good guess of what comes next.
`PromptLookup` proposes them: the tokens after the latest earlier occurrence of the history's last n tokens (the
longest n from `max_ngram` down to `min_ngram` that occurs). No model runs to draft; the engine verifies a draft
in the same batch as every other sequence's next token, and the sampler decides every token (see LlamaEngine), so
drafts change only the speed, never the answers. `DraftLength` adapts a request's draft length to how many of its
drafts the model took, and turns drafting off for a while where they are rarely taken.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field


@dataclass
class PromptLookup:
    """The history (prompt, then generated tokens) indexed by its n-grams for `draft`."""

    max_ngram: int = 3
    min_ngram: int = 2
    history: list[int] = field(default_factory=list)
    # n -> n-gram -> start of its latest occurrence that has a token after it
    _starts: dict[int, dict[tuple[int, ...], int]] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if not 1 <= self.min_ngram <= self.max_ngram:
            raise ValueError("1 <= min_ngram <= max_ngram is needed")
        tokens, self.history = self.history, []
        self._starts = {n: {} for n in range(self.min_ngram, self.max_ngram + 1)}
        self.extend(tokens)

    def extend(self, tokens: Iterable[int]) -> None:
        history, starts = self.history, self._starts
        for token in tokens:
            history.append(token)
            end = len(history) - 1  # the n-grams ending just before the new token now have a follower
            for n, index in starts.items():
                if end >= n:
                    index[tuple(history[end - n:end])] = end - n

    def draft(self, length: int) -> list[int]:
        """Up to `length` tokens that followed the latest earlier occurrence of the history's last n tokens."""
        history = self.history
        if length <= 0:
            return []
        for n in range(self.max_ngram, self.min_ngram - 1, -1):
            if len(history) <= n:
                continue
            start = self._starts[n].get(tuple(history[-n:]))
            if start is not None:
                return history[start + n:start + n + length]
        return []


@dataclass
class DraftLength:
    """How many tokens to draft for one request: grows by 2 after a draft taken whole, shrinks by 1 after one cut
    short (the schedule of transformers' assisted generation); after `patience` drafts of which the model took
    under `min_acceptance` of the tokens, none for `pause` steps, then it tries again at the shortest length."""

    longest: int = 8
    shortest: int = 2
    min_acceptance: float = 0.25
    patience: int = 8
    pause: int = 16
    current: int = 4
    _drafted: int = 0
    _accepted: int = 0
    _drafts: int = 0
    _paused: int = 0

    def next(self) -> int:
        """The length of the next draft (0: none this step)."""
        if self._paused > 0:
            self._paused -= 1
            return 0
        return self.current

    def taken(self, drafted: int, accepted: int) -> None:
        """What became of a draft of `drafted` tokens: the first `accepted` were what the model sampled."""
        if drafted <= 0:
            return
        self._drafts += 1
        self._drafted += drafted
        self._accepted += accepted
        if accepted == drafted:
            self.current = min(self.longest, self.current + 2)
        else:
            self.current = max(self.shortest, self.current - 1)
        if self._drafts >= self.patience:
            if self._accepted < self.min_acceptance * self._drafted:
                self._paused, self.current = self.pause, self.shortest
            self._drafts = self._drafted = self._accepted = 0
