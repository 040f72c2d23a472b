"""Cascade evaluation: cheap stages run before a problem's full evaluate(), and a child that falls short of a stage's
threshold is not run further (OpenEvolve's evaluate_stage1 / evaluate_stage2 with cascade thresholds).

problem.toml declares the stages in order, each a function of evaluator.py and a threshold:

    [[cascade]]
    function = "evaluate_stage1"   # def evaluate_stage1(program_path, sandbox) (or (program_path))
    threshold = 0.5                # go on only when the problem's scalar of the stage's scores reaches this

A stage returns what evaluate() returns (the declared objectives, an objective the stage does not measure at the
value a program that fails it would get), checked the same way. A child whose stage scalar is below the
threshold is stored with that stage's partial vector, and the `cascade` artifact (a JSON object, CascadeNote) says
where it stopped and how long each stage it ran took; a child that passes every stage gets the scores of the full
evaluate(), exactly as without a cascade. The stage timings are measured in the trusted evaluator process around
each call (the candidate's sandbox runs included), so the report can estimate the seconds the stopped children
did not spend (report/cascade_savings.py).
"""

from __future__ import annotations

import json
import math
from dataclasses import asdict, dataclass

from pydantic import Field, field_validator

from evolve.toml_files import StrictModel

CASCADE_ARTIFACT = "cascade"
FINAL_FUNCTION = "evaluate"


class CascadeStageSection(StrictModel):
    """One [[cascade]] table of problem.toml."""

    function: str = Field(description="a top-level function of evaluator.py, called like evaluate()")
    threshold: float = Field(description="the child goes on to the next stage only when the problem's scalar of "
                                         "this stage's scores is at least this")

    @field_validator("function")
    @classmethod
    def _function_name(cls, name: str) -> str:
        if not name.isidentifier():
            raise ValueError(f"{name!r} is not a function name")
        if name == FINAL_FUNCTION:
            raise ValueError("evaluate is the final stage, run after every [[cascade]] stage; name a cheaper one")
        return name

    @field_validator("threshold")
    @classmethod
    def _finite(cls, threshold: float) -> float:
        if not math.isfinite(threshold):
            raise ValueError("the threshold must be a finite number")
        return threshold


@dataclass(frozen=True)
class CascadeStage:
    """A stage as the engine holds it."""

    function: str
    threshold: float


def stages_of(sections: tuple[CascadeStageSection, ...]) -> tuple[CascadeStage, ...]:
    """The declared stages; ValueError (one line) when a function is named twice."""
    names = [section.function for section in sections]
    repeated = sorted({name for name in names if names.count(name) > 1})
    if repeated:
        raise ValueError(f"cascade stages must name distinct functions; repeated: {', '.join(repeated)}")
    return tuple(CascadeStage(section.function, section.threshold) for section in sections)


@dataclass(frozen=True)
class CascadeNote:
    """The `cascade` artifact of a program scored through a cascade."""

    stage: int  # 1-based number of the last stage run; len(stages) + 1 is the full evaluate()
    stages: int  # stages in all, evaluate() included
    function: str  # the last stage's function
    stopped: bool  # True when the child fell short of that stage's threshold
    scalar: float  # the problem's scalar of the last stage's scores
    threshold: float | None  # that stage's threshold (None for evaluate())
    seconds: tuple[float, ...]  # wall seconds of each stage run, in the trusted evaluator process

    def to_artifact(self) -> str:
        return json.dumps(asdict(self))

    @staticmethod
    def from_artifact(text: str) -> CascadeNote | None:
        """The note a stored artifact holds; None when it is not one (an evaluator's own 'cascade' artifact)."""
        try:
            data = json.loads(text)
            note = CascadeNote(stage=int(data["stage"]), stages=int(data["stages"]), function=str(data["function"]),
                               stopped=bool(data["stopped"]), scalar=float(data["scalar"]),
                               threshold=None if data["threshold"] is None else float(data["threshold"]),
                               seconds=tuple(float(value) for value in data["seconds"]))
        except (ValueError, TypeError, KeyError, RecursionError):
            return None
        return note if 1 <= note.stage <= note.stages and len(note.seconds) == note.stage else None
