"""problem.toml as written: its sections' pydantic models, each key with its bounds and description (the
configuration reference is generated from them); checks that need the folder are in problem.py."""

from __future__ import annotations

import importlib.util
from typing import Annotated, Literal

from pydantic import Field, StrictInt, field_validator

from evolve.problems.cascade import CascadeStageSection
from evolve.problems.objectives import ObjectiveCount, ObjectivePattern, checked_names, parse_objectives
from evolve.sandbox.core import ANSWER_PACKAGES, SandboxLimits
from evolve.toml_files import StrictModel

# the bounds of [limits]: past them a limit is no limit (a day of wall or CPU time, a TiB of memory) or overflows
# what the sandbox computes from it (time_scale multiplies every time limit)
MAX_TIME_S = 86_400.0
MAX_MEMORY_MB = 1_048_576
MAX_TIME_SCALE = 1000.0
FiniteFloat = Annotated[float, Field(allow_inf_nan=False)]


class ScoreSection(StrictModel):
    reduction: Literal["mean", "weighted"] = Field("mean", description="how the score vector becomes the scalar: "
                                                   "the mean of the objectives, or their weighted mean (`weights`)")
    weights: dict[str, FiniteFloat] = Field(default_factory=dict,
                                           description="objective -> weight (a finite number), for 'weighted'")


class SolvedSection(StrictModel):
    all_at_least: float | None = Field(None, allow_inf_nan=False,
                                       description="solved when every objective reaches this")
    scalar_at_least: float | None = Field(None, allow_inf_nan=False,
                                          description="solved when the scalar reaches this")


class LimitsSection(StrictModel):
    wall_time_s: float = Field(SandboxLimits.wall_time_s, gt=0, le=MAX_TIME_S, allow_inf_nan=False,
                               description="seconds of wall time a run of the candidate may take (at most a day); "
                               "past it the candidate is killed and fails as timeout")
    cpu_time_s: float = Field(SandboxLimits.cpu_time_s, gt=0, le=MAX_TIME_S, allow_inf_nan=False,
                              description="seconds of CPU time of each of the candidate's processes, its threads "
                              "included (at most a day); past it: timeout")
    memory_mb: StrictInt = Field(SandboxLimits.memory_mb, ge=32, le=MAX_MEMORY_MB, description="address space of "
                                 "each of the candidate's processes in MB (at most a TiB); an allocation past it "
                                 "fails as memory")
    max_processes: StrictInt = Field(SandboxLimits.max_processes, ge=1, le=1_000_000, description="processes and "
                                     "threads the candidate may have at once; a fork bomb stops there")
    max_output_bytes: StrictInt = Field(SandboxLimits.max_output_bytes, ge=1024, le=2**40, description="stdout, "
                                        "stderr and the result together; past it the run fails as bad_output")
    max_written_mb: StrictInt = Field(SandboxLimits.max_written_mb, ge=1, le=MAX_MEMORY_MB,
                                      description="all files the candidate writes")
    preload: tuple[str, ...] = Field((), description="modules the sandbox's fork server imports once, e.g. numpy")
    time_scale: float = Field(SandboxLimits.time_scale, gt=0, le=MAX_TIME_SCALE, allow_inf_nan=False, description=(
        "multiplies every time limit, the evaluator's per-call limits included: for a slow or loaded machine "
        "(at most 1000)"))

    @field_validator("preload")
    @classmethod
    def _installed_modules(cls, names: tuple[str, ...]) -> tuple[str, ...]:
        for name in names:
            top = name.split(".")[0]
            if not all(part.isidentifier() for part in name.split(".")):
                raise ValueError(f"{name!r} is not a module name")
            if top.lower() in ANSWER_PACKAGES:
                raise ValueError(f"{top} holds a benchmark's answers and cannot be preloaded")
            if importlib.util.find_spec(top) is None:
                raise ValueError(f"no module named {top!r} is installed")
        return names


class MapElitesSection(StrictModel):
    features: tuple[str, ...] = Field((), description="the MAP-Elites grid's axes for this problem (code_length, "
                                      "scalar or objective names), in place of selection.map_elites.features")


class PromptSection(StrictModel):
    """How the prompt shows this problem; the defaults suit short blocks and a small model."""

    docstrings: bool = Field(False, description="show the EVOLVE block's docstrings (else they are left out)")
    description: Literal["flattened", "as_written"] = Field(
        "flattened", description="the description on one line, or with its line breaks and indentation")
    description_chars: StrictInt = Field(700, ge=0,
                                         description="cut the description past this many characters; 0: never")
    context: Literal["none", "used", "all"] = Field(
        "none", description="show the code outside the block, as written: none; what the block uses (names it "
                            "mentions, helpers and constants, and what they use in turn); or all of it")


class ProblemFile(StrictModel):
    """problem.toml as written; checks that need several keys at once are in load_problem."""

    name: str = Field(min_length=1, description="the folder's name, which it must equal")
    description: str = Field(min_length=1, description="shown to the policy, 1-4 sentences")
    provenance: str = Field(min_length=1, description="where the problem comes from")
    objectives: tuple[str, ...] | ObjectiveCount | ObjectivePattern = Field(
        description="a list of names, {count = N, name = \"test_{i}\"} or {pattern = \"test_*\"}")
    score: ScoreSection = ScoreSection()
    solved: SolvedSection = SolvedSection()
    limits: LimitsSection = LimitsSection()
    map_elites: MapElitesSection = MapElitesSection()
    prompt: PromptSection = PromptSection()
    cascade: tuple[CascadeStageSection, ...] = Field((), description="[[cascade]] stages run before evaluate(), "
                                                     "cheapest first (problems/cascade.py)")
    stub_seed: bool = Field(False, description="initial.py is a stub meant to fail every test (a benchmark's prompt "
                            "with an empty body): `evolve check` expects it to score 0 on every objective")

    @field_validator("objectives", mode="before")
    @classmethod
    def _one_form(cls, value: object) -> object:
        return parse_objectives(value)

    @field_validator("objectives")
    @classmethod
    def _distinct_names(cls, names: tuple[str, ...] | ObjectiveCount | ObjectivePattern,
                        ) -> tuple[str, ...] | ObjectiveCount | ObjectivePattern:
        return checked_names(names)
