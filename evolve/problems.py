"""Problem folders: problem.toml read into a Problem, with one clear message per mistake."""

from __future__ import annotations

import math
import tomllib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from evolve.edits import find_blocks
from evolve.sandbox import SandboxLimits


class ProblemError(Exception):
    """A problem folder is wrong; the message names the file and what to fix."""


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class ScoreSpec(_Strict):
    reduction: Literal["mean", "weighted"] = "mean"
    weights: dict[str, float] = Field(default_factory=dict)


class SolvedSpec(_Strict):
    all_at_least: float | None = None
    scalar_at_least: float | None = None


class LimitsSpec(_Strict):
    wall_time_s: float = Field(10.0, gt=0)
    cpu_time_s: float = Field(10.0, gt=0)
    memory_mb: int = Field(1024, ge=64)
    max_processes: int = Field(16, ge=1)
    max_output_bytes: int = Field(1_000_000, ge=1024)


class MapElitesSpec(_Strict):
    features: tuple[str, ...] = ()


class ProblemFile(_Strict):
    name: str
    description: str
    provenance: str = ""
    objectives: list[str] = Field(min_length=1)
    score: ScoreSpec = ScoreSpec()
    solved: SolvedSpec = SolvedSpec()
    limits: LimitsSpec = LimitsSpec()
    map_elites: MapElitesSpec = MapElitesSpec()


@dataclass(frozen=True)
class Problem:
    name: str
    path: Path
    description: str
    initial_code: str
    objectives: tuple[str, ...]
    reduction: Literal["mean", "weighted"] = "mean"
    weights: dict[str, float] = field(default_factory=dict)
    solved_all_at_least: float | None = None
    solved_scalar_at_least: float | None = None
    limits: SandboxLimits = SandboxLimits()
    features: tuple[str, ...] = ()
    provenance: str = ""

    @property
    def evaluator_path(self) -> Path:
        return self.path / "evaluator.py"

    def scalar(self, scores: dict[str, float]) -> float:
        """The ranking scalar: the declared reduction of the score vector."""
        if self.reduction == "weighted":
            total = sum(self.weights.get(name, 0.0) for name in self.objectives)
            return sum(self.weights.get(name, 0.0) * scores[name] for name in self.objectives) / (total or 1.0)
        return math.fsum(scores[name] for name in self.objectives) / len(self.objectives)

    def is_solved(self, scores: dict[str, float]) -> bool:
        if self.solved_all_at_least is not None and any(
            scores[name] < self.solved_all_at_least for name in self.objectives
        ):
            return False
        if self.solved_scalar_at_least is not None and self.scalar(scores) < self.solved_scalar_at_least:
            return False
        return self.solved_all_at_least is not None or self.solved_scalar_at_least is not None


def _problem_dir(name_or_path: str, programs_dir: Path) -> Path:
    candidate = Path(name_or_path)
    if candidate.is_dir():
        return candidate.resolve()
    folder = programs_dir / name_or_path
    if folder.is_dir():
        return folder.resolve()
    known = ", ".join(sorted(path.parent.name for path in programs_dir.glob("*/problem.toml")))
    raise ProblemError(f"{programs_dir / name_or_path}: no such problem folder (known problems: {known or 'none'})")


def load_problem(name_or_path: str, programs_dir: Path) -> Problem:
    """Read and check a problem folder: problem.toml, initial.py with EVOLVE-BLOCK markers, evaluator.py."""
    folder = _problem_dir(name_or_path, programs_dir)
    toml_path = folder / "problem.toml"
    for required in (toml_path, folder / "initial.py", folder / "evaluator.py"):
        if not required.is_file():
            raise ProblemError(f"{required}: missing (a problem folder needs problem.toml, initial.py, evaluator.py)")
    try:
        spec = ProblemFile.model_validate(tomllib.loads(toml_path.read_text()))
    except tomllib.TOMLDecodeError as exc:
        raise ProblemError(f"{toml_path}: not valid TOML ({exc})") from None
    except ValidationError as exc:
        error = exc.errors()[0]
        key = ".".join(str(part) for part in error["loc"])
        what = "unknown key" if error["type"] == "extra_forbidden" else error["msg"]
        raise ProblemError(f"{toml_path}: '{key}': {what}") from None
    if spec.score.reduction == "weighted" and not spec.score.weights:
        raise ProblemError(f"{toml_path}: 'score.weights' is needed when score.reduction = 'weighted'")
    if len(set(spec.objectives)) != len(spec.objectives):
        raise ProblemError(f"{toml_path}: 'objectives' has duplicate names")
    initial = (folder / "initial.py").read_text()
    if not find_blocks(initial):
        raise ProblemError(f"{folder / 'initial.py'}: no '# EVOLVE-BLOCK-START' ... '# EVOLVE-BLOCK-END' block to evolve")
    return Problem(
        name=spec.name,
        path=folder,
        description=spec.description.strip(),
        initial_code=initial,
        objectives=tuple(spec.objectives),
        reduction=spec.score.reduction,
        weights=dict(spec.score.weights),
        solved_all_at_least=spec.solved.all_at_least,
        solved_scalar_at_least=spec.solved.scalar_at_least,
        limits=SandboxLimits(**spec.limits.model_dump()),
        features=spec.map_elites.features,
        provenance=spec.provenance,
    )


def list_problems(programs_dir: Path) -> list[Problem]:
    return [load_problem(path.parent.name, programs_dir) for path in sorted(programs_dir.glob("*/problem.toml"))]
