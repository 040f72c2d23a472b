"""What openai_api.py cannot take on trust from an OpenAI-compatible server: whether it continued the prefilled answer
or started a new turn that restates it, and whether a server that has not answered a request is there at all.

vLLM and SGLang continue a final assistant message when asked (continue_final_message); llama.cpp's Python server
(`python -m llama_cpp.server`) and most hosted APIs ignore the flag, open a new assistant turn, and the model writes
the prefilled line again ("def f(x: float) -> float:def f(x: float) -> float = ...", which no edit parses).
"""

from __future__ import annotations

import asyncio
import re

import httpx

PROBE_S = 10.0  # a liveness GET: any HTTP answer within this shows the server is up
PROMPT_ALLOWANCE_S = 30.0  # queueing and reading the prompt, before the first token
FLOOR_TOKENS_PER_S = 8.0  # the slowest rate a live server is assumed to generate one request's tokens at
_FENCE = re.compile(r"```[\w+-]*[ \t]*\n")


def stall_deadline_s(max_tokens: int) -> float:
    """Seconds a request may go unanswered before its server is checked for life: a prompt allowance plus the
    whole token budget at FLOOR_TOKENS_PER_S (384 tokens: 78 s). A server that answers the check keeps the request
    waiting up to the policy's timeout_s, so a slow live server is never cut here."""
    return PROMPT_ALLOWANCE_S + max(0, max_tokens) / FLOOR_TOKENS_PER_S


async def answers_at_all(url: str) -> bool:
    """Whether anything at `url` answers an HTTP GET within PROBE_S, with any status, on a connection of its own.

    Any status, because a busy server may hold its API routes (llama.cpp's Python server answers /models only
    between generations) while its HTTP front still answers an unknown path at once. A server that does not answer
    even that is stalled."""
    try:
        async with asyncio.timeout(PROBE_S), httpx.AsyncClient(timeout=PROBE_S) as client:
            await client.get(url)
    except (TimeoutError, httpx.HTTPError):
        return False
    return True


def restates_prefill(text: str, prefill: str) -> bool:
    """Whether a chat reply opens a new answer with the prefill's first line (after a code fence, perhaps) instead of
    continuing the prefill. A reply that repeats the whole prefill first is an echo of the continued message, which
    some servers send, and counts as a continuation.

    The reply's start must match the first half of the prefill's first line (at least 4 characters): a restarted
    model often rewrites the rest of the line ("def f(x: float) -> float = lambda ...")."""
    if not prefill or text.startswith(prefill):
        return False
    first_line = prefill.split("\n", 1)[0].strip()
    if not first_line:
        return False
    opening = first_line[: max(4, len(first_line) // 2)]
    fence = _FENCE.match(text)
    return text[fence.end() if fence else 0:].startswith(opening)


def without_echoed_prefill(text: str, prefill: str) -> str:
    """Some servers return the continued assistant message whole; the engine wants only the continuation."""
    return text[len(prefill):] if prefill and text.startswith(prefill) else text
