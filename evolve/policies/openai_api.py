"""Policy backend for any OpenAI-compatible server (vllm serve, SGLang, llama.cpp): chat or plain completions.

Every request has a hard deadline (asyncio.timeout around the whole exchange, so a server that trickles bytes
or never answers cannot hold it), retries with doubling back-off, and its own seed. A server that still does not
answer raises PolicyUnavailable: the run stops, resumable, and later requests fail at once instead of each
waiting out its own retries. A request unanswered past a deadline fit to its size (stall_timeout_s; 0: from its
max_tokens, openai_checks.stall_deadline_s) has its server checked for life: one that answers no HTTP GET at all is
stalled, and the run stops then, without retries; a live one keeps the request waiting up to timeout_s.

A server that does not continue the prefilled answer (it ignores vLLM's continue_final_message and opens a new turn,
so the answer restates the prefill) is asked that request again as a raw completion rendered by the prompt template,
and so is every later prefilled request of the policy; a server without /completions is left on chat, said once.

With several URLs (replicas of one model, replicas.py) each request goes to the healthy replica with the fewest
requests in flight; a replica that fails is rested and the request moves on to another at once, without counting
a retry. Only when every replica is down do the retries and back-off above apply.
"""

from __future__ import annotations

import asyncio
import os
import random
import sys
import time
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any, Literal

import httpx

from evolve.policies.base import PolicyError, PolicyUnavailable, cut_at_stop
from evolve.policies.openai_checks import (
    PROBE_S,
    answers_at_all,
    restates_prefill,
    stall_deadline_s,
    without_echoed_prefill,
)
from evolve.policies.replicas import ReplicaPool
from evolve.records import Completion

if TYPE_CHECKING:
    from evolve.search.prompt_templates import PromptTemplate
    from evolve.search.prompts import Prompt

Api = Literal["chat", "completions"]

RETRY_STATUS = frozenset({408, 409, 425, 429, 500, 502, 503, 504})
# the server cannot serve this policy at all (bad key, no such model or path): asking again is pointless
FATAL_STATUS = frozenset({401, 403, 404})
_MAX_RETRY_AFTER_S = 60.0
_PATHS: dict[str, str] = {"chat": "/chat/completions", "completions": "/completions"}


class _Retryable(Exception):
    pass


class _Stalled(Exception):
    """No answer by the stall deadline, and none to a liveness GET either."""


class _Refused(Exception):
    """A request the server refused (an HTTP error that is not worth retrying), when the caller can do without."""


class OpenAIPolicy:
    """Talks to `{url}/chat/completions` (api="chat") or `{url}/completions` (api="completions"); `url` may be a
    list of replicas' URLs."""

    def __init__(self, name: str, url: str | Sequence[str], model: str = "",
                 api: Api = "chat", temperature: float = 0.8, top_p: float = 0.95,
                 timeout_s: float = 300.0, retries: int = 3, backoff_s: float = 1.0, api_key_env: str = "",
                 max_connections: int = 64, max_stops: int = 4, replica_retry_s: float = 5.0,
                 stall_timeout_s: float = 0.0, template: str = "default") -> None:
        urls = [url] if isinstance(url, str) else list(url)
        if not urls:
            raise PolicyError(f"policy {name}: no url")
        for one in urls:
            if not one.startswith(("http://", "https://")):
                raise PolicyError(f"policy {name}: url must start with http:// or https://, got {one!r}")
        headers = {}
        if api_key_env:
            key = os.environ.get(api_key_env)
            if not key:
                raise PolicyError(f"policy {name}: the environment variable {api_key_env} (api_key_env) is not set")
            headers["Authorization"] = f"Bearer {key}"
        self.name = name
        self.replicas = ReplicaPool([one.rstrip("/") for one in urls], retry_s=replica_retry_s)
        self.url = self.replicas.replicas[0].url
        self.model = model
        self.api = api
        self.temperature = temperature
        self.top_p = top_p
        self.timeout_s = timeout_s
        self.stall_timeout_s = stall_timeout_s  # 0: stall_deadline_s of each request's max_tokens
        self.retries = retries
        self.backoff_s = backoff_s
        self.max_stops = max_stops
        self.requests_sent = 0  # HTTP requests, retries included
        self._headers = headers
        self._limits = httpx.Limits(max_connections=max_connections, max_keepalive_connections=max_connections)
        self._client: httpx.AsyncClient | None = None
        self._unavailable: str | None = None
        self._closed = False
        self._model_lock = asyncio.Lock()
        self.template = template  # renders a prefilled prompt as a raw completion, for a server that will not continue
        self._template: PromptTemplate | None = None
        self.prefill_fallback = False  # prefilled chat prompts go to /completions: the server restates the prefill
        self._completions_refused: str | None = None
        self._prefill_seen = False  # a prefilled chat prompt has been answered (or failed)
        self._prefill_lock = asyncio.Lock()

    def _http(self) -> httpx.AsyncClient:
        if self._client is None:
            # httpx's own timeouts are per read; the hard deadline is asyncio.timeout in _exchange
            timeout = httpx.Timeout(self.timeout_s, connect=min(10.0, self.timeout_s))
            self._client = httpx.AsyncClient(timeout=timeout, limits=self._limits, headers=self._headers)
        return self._client

    async def generate(self, prompt: Prompt, seed: int) -> Completion:
        if self._closed:
            raise PolicyError(f"policy {self.name} is closed")
        if self.api == "chat" and prompt.prefill and not self._prefill_seen:
            # the first prefilled prompt goes alone: its answer shows whether the server continues a prefill before
            # the rest of the run's requests go out the same way
            async with self._prefill_lock:
                if not self._prefill_seen:
                    try:
                        return await self._generate(prompt, seed)
                    finally:
                        self._prefill_seen = True
        return await self._generate(prompt, seed)

    async def _generate(self, prompt: Prompt, seed: int) -> Completion:
        started = time.monotonic()
        model = await self._model_name()
        api: Api = "completions" if self.api == "completions" or (prompt.prefill and self.prefill_fallback) else "chat"
        path = _PATHS[api]
        data = await self._post(path, self._body(prompt, seed, model, api))
        try:
            text, finish, usage = _parse(data, api)
        except _NotACompletion as exc:
            raise self._protocol_error(f"{self.url}{path}", str(exc)) from None
        tokens = [int(usage.get("prompt_tokens") or 0), int(usage.get("completion_tokens") or 0)]
        if api == "chat" and restates_prefill(text, prompt.prefill) and self._completions_refused is None:
            instead = await self._completion_instead(prompt, seed, model, text)
            if instead is not None:  # the restated answer's tokens were spent too
                text, finish, usage = instead
                tokens = [tokens[0] + int(usage.get("prompt_tokens") or 0),
                          tokens[1] + int(usage.get("completion_tokens") or 0)]
        text, cut = cut_at_stop(prompt.prefill, without_echoed_prefill(text, prompt.prefill), prompt.stop)
        return Completion(text, tokens[0], tokens[1], time.monotonic() - started, "stop" if cut else finish)

    async def _completion_instead(self, prompt: Prompt, seed: int, model: str,
                                  restated: str) -> tuple[str, str, dict[str, Any]] | None:
        """The prompt asked again as a raw completion, after a chat answer that restated the prefill; from the first
        one that works on, prefilled prompts go to /completions. None when the server has no usable /completions."""
        how = f"it ignores continue_final_message and restates the prefill: {restated[:40]!r}"
        try:
            data = await self._request("POST", "/completions", self._body(prompt, seed, model, "completions"),
                                       refusals=True)
            answer = _parse(data, "completions")
        except (_Refused, _NotACompletion) as exc:
            if self._completions_refused is None:
                self._completions_refused = str(exc)
                self._say(f"{self.url} does not continue a prefilled answer ({how}), and its /completions cannot "
                          f"stand in ({exc}); set policy.prefill = false for this server")
            return None
        if not self.prefill_fallback:
            self.prefill_fallback = True
            self._say(f"{self.url} does not continue a prefilled answer ({how}); this policy now sends prefilled "
                      f"prompts to /completions, rendered by template {self.template!r}")
        return answer

    def _say(self, message: str) -> None:
        print(f"policy {self.name}: {message}", file=sys.stderr, flush=True)

    async def close(self) -> None:
        self._closed = True
        if self._client is not None:
            await self._client.aclose()
            self._client = None

    def _body(self, prompt: Prompt, seed: int, model: str, api: Api) -> dict[str, Any]:
        body: dict[str, Any] = {"model": model, "max_tokens": prompt.max_new_tokens, "temperature": self.temperature,
                                "top_p": self.top_p, "seed": seed, "n": 1}
        if prompt.stop:  # servers that follow OpenAI take at most 4; the rest are cut here after the reply
            body["stop"] = list(prompt.stop[: self.max_stops] if self.max_stops else prompt.stop)
        if api == "completions":
            if prompt.text is None and self.api == "completions":
                raise PolicyError("api = 'completions' needs a prompt rendered as text (the template's completion)")
            body["prompt"] = prompt.text if prompt.text is not None else self._completion_text(prompt)
            return body
        body["messages"] = list(prompt.messages)
        if prompt.prefill:  # vLLM and SGLang continue a final assistant message with these two flags
            body["messages"].append({"role": "assistant", "content": prompt.prefill})
            body.update(continue_final_message=True, add_generation_prompt=False)
        return body

    def _completion_text(self, prompt: Prompt) -> str:
        if self._template is None:
            from evolve.search.prompt_templates import load_template

            self._template = load_template(self.template)
        return self._template.completion_text(list(prompt.messages), prompt.prefill)

    async def _model_name(self) -> str:
        """The configured model, or the server's first model when none is configured."""
        if self.model:
            return self.model
        async with self._model_lock:
            if not self.model:
                data = await self._request("GET", "/models", None)
                try:
                    self.model = str(data["data"][0]["id"])
                except (KeyError, IndexError, TypeError):
                    raise PolicyUnavailable(f"{self.url}/models lists no model; set the policy's model") from None
        return self.model

    async def _post(self, path: str, body: dict[str, Any]) -> dict[str, Any]:
        return await self._request("POST", path, body)

    async def _request(self, method: str, path: str, body: dict[str, Any] | None,
                       refusals: bool = False) -> dict[str, Any]:
        """The JSON answer, retried and moved between replicas as the module says; with `refusals`, an HTTP error
        that is not worth retrying raises _Refused instead of failing the request or the policy."""
        last = ""
        attempt = 0
        moves = 4 * len(self.replicas.replicas)  # bounds the free moves to another replica within one request
        while True:
            if self._unavailable is not None:
                raise PolicyUnavailable(self._unavailable)
            replica = self.replicas.pick() or self.replicas.soonest()
            stalled = False
            try:
                self.requests_sent += 1
                with self.replicas.sending(replica):
                    data = self._accept(await self._exchange(replica.url, method, path, body), refusals)
                self.replicas.answered(replica)
                return data
            except TimeoutError:
                last = f"no answer within {self.timeout_s:g} s"
            except _Stalled as exc:
                last, stalled = str(exc), True
            except httpx.TimeoutException as exc:
                last = f"{type(exc).__name__} within {self.timeout_s:g} s"
            except httpx.TransportError as exc:
                last = f"{type(exc).__name__}: {exc}" if str(exc) else type(exc).__name__
            except _Retryable as exc:
                last = str(exc)
            self.replicas.failed(replica, last)
            if moves > 0 and self.replicas.pick() is not None:  # another replica answers: no retry spent
                moves -= 1
                continue
            attempt += 1
            if stalled or attempt > self.retries:
                break
            await asyncio.sleep(self._delay(attempt, last))
        where = (f"{self.url}{path}" if len(self.replicas.replicas) == 1
                 else f"{path} on all {len(self.replicas.replicas)} replicas")
        self._unavailable = (f"policy {self.name}: {where}: {last}" if stalled
                             else f"policy {self.name}: {where} failed {attempt} times; last: {last}")
        raise PolicyUnavailable(self._unavailable)

    async def _exchange(self, base: str, method: str, path: str, body: dict[str, Any] | None) -> httpx.Response:
        """The server's response within timeout_s (else TimeoutError); _Stalled when it has not answered by the
        stall deadline and answers no GET of its URL either."""
        stall_s = self.stall_timeout_s or stall_deadline_s(int((body or {}).get("max_tokens") or 0))
        sending = asyncio.ensure_future(self._http().request(method, base + path, json=body))
        try:
            async with asyncio.timeout(self.timeout_s):
                if stall_s < self.timeout_s:
                    done, _ = await asyncio.wait({sending}, timeout=stall_s)
                    if not done and not await answers_at_all(base):
                        raise _Stalled(f"no answer within {stall_s:.3g} s, and no answer to a GET of {base} within "
                                       f"{PROBE_S:g} s either: the server is stalled")
                return await sending
        finally:
            if not sending.done():
                sending.cancel()
                await asyncio.wait({sending})

    def _accept(self, response: httpx.Response, refusals: bool = False) -> dict[str, Any]:
        """The JSON body of a 200; raises _Retryable, PolicyUnavailable or PolicyError for the rest (_Refused for
        those not retried, with `refusals`)."""
        if response.status_code == 200:
            try:
                data = response.json()
            except (ValueError, RecursionError):
                raise self._protocol_error(str(response.request.url),
                                           f"a body that is not JSON: {_excerpt(response)}") from None
            if not isinstance(data, dict):
                raise self._protocol_error(str(response.request.url),
                                           f"a body that is not a JSON object: {_excerpt(response)}")
            return data
        message = f"HTTP {response.status_code}: {_error_message(response)}"
        if response.status_code in RETRY_STATUS:
            retry_after = response.headers.get("retry-after", "")
            raise _Retryable(message + (f" (retry-after {retry_after})" if retry_after else ""))
        if refusals:
            raise _Refused(message)
        if response.status_code in FATAL_STATUS:
            self._unavailable = f"policy {self.name}: {response.request.url} answered {message}"
            raise PolicyUnavailable(self._unavailable)
        raise PolicyError(message)  # e.g. 400 for a prompt past the context: this request only

    def _protocol_error(self, where: str, what: str) -> PolicyUnavailable:
        """A 200 that is no OpenAI reply (a proxy's page, another service at this URL): not transient, so the run stops
        at once, resumable, and every later request of this policy fails at once, rather than each spending an
        iteration until run.stop_after_policy_errors."""
        self._unavailable = (f"policy {self.name}: {where} answered HTTP 200 with {what}; it does not speak the OpenAI "
                             "API (check the policy's url)")
        return PolicyUnavailable(self._unavailable)

    def _delay(self, attempt: int, last: str) -> float:
        delay = self.backoff_s * 2 ** (attempt - 1)
        if "(retry-after " in last:
            try:
                delay = max(delay, float(last.rsplit("(retry-after ", 1)[1].rstrip(")")))
            except ValueError:
                pass
        return min(delay, _MAX_RETRY_AFTER_S) * random.uniform(0.8, 1.2)


def _error_message(response: httpx.Response) -> str:
    try:
        data = response.json()
        error = data.get("error", data) if isinstance(data, dict) else data
        message = error.get("message", error) if isinstance(error, dict) else error
    except ValueError:
        message = response.text
    return " ".join(str(message).split())[:300]


class _NotACompletion(PolicyError):
    """A JSON reply that holds no completion: what it is instead."""


def _excerpt(response: httpx.Response) -> str:
    return repr(" ".join(response.text[:200].split()))


def _parse(data: dict[str, Any], api: str) -> tuple[str, str, dict[str, Any]]:
    """(text, finish_reason, usage) from a chat or completions reply; _NotACompletion if it has none."""
    try:
        choice = data["choices"][0]
        text = choice["message"]["content"] if api == "chat" else choice["text"]
    except (KeyError, IndexError, TypeError):
        raise _NotACompletion(f"a JSON reply that has no {'message' if api == 'chat' else 'text'}: "
                              f"{str(data)[:200]!r}") from None
    if text is None:
        text = ""
    if not isinstance(text, str):
        raise _NotACompletion(f"a reply whose text is not a string: {str(text)[:100]!r}")
    text = text.encode("utf-8", "replace").decode("utf-8")  # a lone surrogate ("\\ud800" in JSON): no store takes it
    usage = data.get("usage") if isinstance(data.get("usage"), dict) else {}
    return text, str(choice.get("finish_reason") or ""), usage
