"""Run configuration: evolve.toml parsed into pydantic models, with one clear line per mistake."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, Field, StrictInt, ValidationError, field_validator, model_validator

from evolve import toml_files
from evolve.errors import UserError
from evolve.policy_config import POLICY_BACKENDS, HFPolicySection, OpenAIPolicySection, PolicySection, backend_of
from evolve.toml_files import StrictModel

MAX_SEED = 2**63 - 1  # a seed is stored in a signed 64-bit column


class ConfigError(UserError):
    """A configuration mistake, worded as one line that names the file, the key and what is allowed."""


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
    stop_when_solved: bool = Field(False, description="finish the run as soon as a program solves the problem; "
                                   "the iterations still in flight are cancelled and what they made is dropped, not "
                                   "stored; a resumed solved run stays done")
    target_score: float | None = Field(None, allow_inf_nan=False, description="finish the run as soon as a "
                                       "program's scalar (the problem's reduction of its vector) reaches this")

    @field_validator("db")
    @classmethod
    def _db_is_kept(cls, db: str) -> str:
        """A store that outlives the process (`evolve run --resume` would find nothing in one that did not)."""
        return kept_store(db, "evolve.db")


def kept_store(db: str, example: str) -> str:
    """`db` when it names a store that outlives the process, else ValueError saying why (memory_store) and what to
    give instead (a file path such as `example`, or a server's URL): the check of run.db and an experiment's db."""
    why = memory_store(db)
    if why:
        raise ValueError(f"{why}: give a file path (e.g. {example}) or a database server's URL")
    return db


def memory_store(db: str) -> str:
    """Why `db` (run.db: a path, or an SQLAlchemy URL) names no store that outlives the process, or '' when it
    names one: an empty value, or SQLite in memory (':memory:', 'sqlite://', 'sqlite:///:memory:', a 'file::memory:'
    or mode=memory URI)."""
    if not db.strip():
        return "an empty value names no store"
    url = db if "://" in db else f"sqlite:///{db}"  # as the store reads a plain path (store.connection.database_url)
    scheme, _, rest = url.partition("://")
    if scheme.split("+", 1)[0].strip().lower() != "sqlite":
        return ""
    path, _, query = rest.partition("?")
    database = path[1:] if path.startswith("/") else path
    memory = not database or database == ":memory:" or database.startswith("file::memory:") or \
        any(part.strip().lower() == "mode=memory" for part in query.replace(";", "&").split("&"))
    return "an in-memory SQLite database ends with the process, and every run in it is lost" if memory else ""


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
    restart_interval: StrictInt = Field(0, ge=0, description="every N iterations the island whose best program "
                                        "ranks lowest restarts from the seed program alone, and from then on draws "
                                        "its parents and inspirations from its own members only (migrants join "
                                        "them); 0: never (an ablation: restarts from the seed)")
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
    section = POLICY_BACKENDS.get(backend_of(policy)) if isinstance(policy, dict) else None
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
