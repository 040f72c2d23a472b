"""Problem folders (problem.toml, initial.py, evaluator.py, driver.py) read into a Problem; one line per mistake."""

from __future__ import annotations

import ast
import difflib
import fnmatch
import math
import os
import sys
import textwrap
from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Literal

from pydantic import ValidationError

from evolve.errors import UserError
from evolve.problems.cascade import CascadeStage, stages_of
from evolve.problems.objectives import (
    ObjectivePattern,
    objective_order,
)
from evolve.problems.problem_file import ProblemFile
from evolve.program_format import EVOLVE_END, EVOLVE_START, block_docstring, find_blocks
from evolve.sandbox.core import SandboxLimits
from evolve.toml_files import format_validation_error, read_toml

_BUILTIN_FEATURES = ("code_length", "scalar")


class ProblemError(UserError):
    """A mistake in a problem folder, worded as one line that names the file and what to fix."""


@dataclass(frozen=True)
class ProblemPrompt:
    """The [prompt] settings of a problem (see PromptSection)."""

    docstrings: bool = False
    description: Literal["flattened", "as_written"] = "flattened"
    description_chars: int = 700
    context: Literal["none", "used", "all"] = "none"
    # the seed's docstring (a stub-seed benchmark's specification), shown in every rewrite prompt in place of the
    # parent's, which a child may have rewritten or dropped; "" for other problems
    specification: str = ""


@dataclass(frozen=True)
class Problem:
    """A loaded, checked problem folder."""

    name: str
    path: Path  # the folder, absolute
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
    prompt: ProblemPrompt = ProblemPrompt()
    # objectives = {pattern = ...}: objectives stays () until resolved() fixes it from the first evaluation's names
    objective_pattern: str = ""
    cascade: tuple[CascadeStage, ...] = ()  # [[cascade]]: stages before evaluate(); a child below a threshold stops
    stub_seed: bool = False  # problem.toml stub_seed: the seed scores 0 everywhere by design (evolve check)

    @property
    def evaluator_path(self) -> Path:
        return self.path / "evaluator.py"

    @property
    def objectives_known(self) -> bool:
        """False for a pattern problem whose names no evaluation has fixed yet."""
        return bool(self.objectives)

    def declared_objectives(self) -> str:
        """How problem.toml declares the objectives, for listings: '14' or 'pattern test_*'."""
        if self.objectives_known:
            return str(len(self.objectives))
        return f"pattern {self.objective_pattern}"

    def matches_pattern(self, name: str) -> bool:
        return fnmatch.fnmatchcase(name, self.objective_pattern)

    def objective_names(self, scores: dict[str, float]) -> tuple[str, ...]:
        """The objectives a score vector is read in: the declared (or resolved) ones, else, for a pattern problem
        not resolved yet, the scores' names that match the pattern, in natural order."""
        if self.objectives_known:
            return self.objectives
        return objective_order(name for name in scores if self.matches_pattern(name))

    def resolved(self, names: Iterable[str]) -> Problem:
        """This pattern problem with its objectives fixed to `names` (what the seed's evaluation returned); a
        problem whose objectives are known already is returned as it is."""
        if self.objectives_known:
            return self
        ordered = objective_order(names)
        unmatched = [name for name in ordered if not self.matches_pattern(name)]
        if not ordered or unmatched:
            raise ProblemError(f"{self.path / 'problem.toml'}: objectives = {{pattern = {self.objective_pattern!r}}} "
                               + (f"does not match names evaluate() returned ({', '.join(unmatched[:5])})"
                                  if unmatched else "matched no name: evaluate() returned none"))
        return replace(self, objectives=ordered)

    def _vector(self, scores: dict[str, float]) -> list[float]:
        names = self.objective_names(scores)
        missing = [name for name in names if name not in scores]
        if missing or not names:
            raise ValueError(f"{self.name}: scores lack objectives {', '.join(missing) or self.objective_pattern}")
        return [scores[name] for name in names]

    def scalar(self, scores: dict[str, float]) -> float:
        """The ranking scalar: the mean of the objectives, or their weighted mean (weights / total weight). Scores
        are finite, but their sum may not be: a mean past the largest float is computed from the scaled terms
        instead, and is then finite (at most the largest magnitude of the scores), so a candidate's huge scores are
        ranked, never an error."""
        values = self._vector(scores)
        weights = [self.weights[name] for name in self.objectives] if self.reduction == "weighted" else []
        try:
            if weights:
                scalar = math.fsum(w * v for w, v in zip(weights, values, strict=True)) / math.fsum(weights)
            else:
                scalar = math.fsum(values) / len(values)
        except (OverflowError, ValueError):  # a sum past the largest float; inf - inf of weighted terms past it
            scalar = math.nan
        return scalar if math.isfinite(scalar) else _scaled_mean(values, weights)

    def is_solved(self, scores: dict[str, float]) -> bool:
        """True when every declared [solved] condition holds; a problem with none is never solved."""
        if self.solved_all_at_least is None and self.solved_scalar_at_least is None:
            return False
        values = self._vector(scores)
        if self.solved_all_at_least is not None and min(values) < self.solved_all_at_least:
            return False
        return self.solved_scalar_at_least is None or self.scalar(scores) >= self.solved_scalar_at_least


def _scaled_mean(values: list[float], weights: list[float]) -> float:
    """The (weighted) mean of finite values whose plain sum overflows: each term scaled by its share of the total
    weight first (the weights by the largest first, so their total is finite too), so that no partial sum passes the
    largest magnitude of the values; clipped to the finite floats against a last rounding past them."""
    if weights:
        top = max(weights)
        relative = [weight / top for weight in weights]
        total = math.fsum(relative)
        shares = [weight / total for weight in relative]
    else:
        shares = [1.0 / len(values)] * len(values)
    try:
        mean = math.fsum(share * value for share, value in zip(shares, values, strict=True))
    except OverflowError:  # a sum the terms' rounding put just past the largest float: its half tells the sign
        mean = math.copysign(math.inf, math.fsum(share * (value / 2)
                                                  for share, value in zip(shares, values, strict=True)))
    return max(-sys.float_info.max, min(sys.float_info.max, mean))


def _check_consistency(spec: ProblemFile, folder: Path, source: Path) -> None:
    if spec.name != folder.name:
        raise ProblemError(f"{source}: name = {spec.name!r} must match the folder name {folder.name!r}")
    if isinstance(spec.objectives, ObjectivePattern):
        _check_pattern_consistency(spec, spec.objectives.pattern, source)
        return
    declared = set(spec.objectives)
    weights = spec.score.weights
    if spec.score.reduction == "weighted":
        unknown = sorted(set(weights) - declared)
        missing = [name for name in spec.objectives if name not in weights]
        if unknown:
            raise ProblemError(f"{source}: score.weights names undeclared objectives: {', '.join(unknown)}")
        if missing:
            raise ProblemError(f"{source}: score.weights needs a weight for every objective; missing: "
                               f"{', '.join(missing)}")
        if any(w < 0 for w in weights.values()) or not any(w > 0 for w in weights.values()):
            raise ProblemError(f"{source}: score.weights must be >= 0 with a positive total")
    elif weights:
        raise ProblemError(f"{source}: score.weights is only used with score.reduction = 'weighted'")
    unknown_features = [f for f in spec.map_elites.features if f not in _BUILTIN_FEATURES and f not in declared]
    if unknown_features:
        raise ProblemError(f"{source}: map_elites.features {unknown_features} are neither "
                           f"{' nor '.join(_BUILTIN_FEATURES)} nor declared objectives")


def _check_pattern_consistency(spec: ProblemFile, pattern: str, source: Path) -> None:
    """What a pattern allows: no weights (their names are unknown before an evaluation), features that match."""
    if spec.score.reduction == "weighted" or spec.score.weights:
        raise ProblemError(f"{source}: score.reduction = 'weighted' needs named objectives; with objectives = "
                           f"{{pattern = {pattern!r}}} the scalar is the mean (name them, or use {{count = N}})")
    unknown_features = [f for f in spec.map_elites.features
                        if f not in _BUILTIN_FEATURES and not fnmatch.fnmatchcase(f, pattern)]
    if unknown_features:
        raise ProblemError(f"{source}: map_elites.features {unknown_features} are neither "
                           f"{' nor '.join(_BUILTIN_FEATURES)} nor objectives matching {pattern!r}")


def _read_spec(source: Path) -> ProblemFile:
    try:
        return ProblemFile.model_validate(read_toml(source, ProblemError))
    except ValidationError as exc:
        raise ProblemError(format_validation_error(exc, source, ProblemFile)) from None


def _read_source(path: Path) -> str:
    """A Python file of a problem folder as text; ProblemError (one line) when it cannot be read or is not UTF-8."""
    try:
        return path.read_text(encoding="utf-8")
    except UnicodeDecodeError as exc:
        raise ProblemError(f"{path}: not UTF-8 text (byte {exc.start}: {exc.reason}); save it as UTF-8") from None
    except OSError as exc:
        raise ProblemError(f"{path}: cannot read it ({exc.strerror or exc})") from None


def _parse_source(code: str, path: Path) -> ast.Module:
    """The file's syntax tree; ProblemError naming the line and what is wrong when it is no Python."""
    if "\0" in code:  # Python refuses the whole file, naming no line
        line = code.count("\n", 0, code.index("\0")) + 1
        raise ProblemError(f"{path}: line {line}: holds a null byte (\\x00), which Python source cannot hold; "
                           "remove it (was the file saved as UTF-16, or as a binary file?)")
    try:
        return ast.parse(code, filename=str(path))
    except SyntaxError as exc:
        where = f"line {exc.lineno}: " if exc.lineno is not None else ""
        raise ProblemError(f"{path}: {where}syntax error ({exc.msg})") from None
    except (ValueError, RecursionError) as exc:  # what the compiler refuses besides syntax errors
        raise ProblemError(f"{path}: not Python that can be compiled ({type(exc).__name__}: {exc})") from None


def _read_initial(path: Path) -> str:
    code = _read_source(path)
    _parse_source(code, path)
    if not find_blocks(code):
        raise ProblemError(f"{path}: no EVOLVE block; put the code the policy may change between a "
                           f"'{EVOLVE_START}' line and a '{EVOLVE_END}' line")
    return code


def _check_evaluator(path: Path) -> ast.Module:
    tree = _parse_source(_read_source(path), path)
    if not any(isinstance(node, ast.FunctionDef) and node.name == "evaluate" for node in tree.body):
        raise ProblemError(f"{path}: defines no top-level 'def evaluate(program_path, sandbox)'")
    return tree


def _cascade(spec: ProblemFile, evaluator_path: Path, tree: ast.Module, source: Path) -> tuple[CascadeStage, ...]:
    """The [[cascade]] stages, each naming a distinct top-level function of evaluator.py (`tree`)."""
    try:
        stages = stages_of(spec.cascade)
    except ValueError as exc:
        raise ProblemError(f"{source}: {exc}") from None
    if stages:
        defined = {node.name for node in tree.body if isinstance(node, ast.FunctionDef)}
        missing = [stage.function for stage in stages if stage.function not in defined]
        if missing:
            raise ProblemError(f"{source}: [[cascade]] names {', '.join(missing)}, which {evaluator_path.name} does "
                               f"not define (def {missing[0]}(program_path, sandbox) at its top level)")
    return stages


PROBLEM_DEPTH = 3  # programs/SUITE/NAME, and one more level for a suite of suites
KNOWN_LISTED = 20  # an unknown name's error lists the problems up to this many, else counts them


def problem_key(name_or_path: str) -> str:
    """What problems are compared by (held-out checks): a name, or a folder path's last part
    ('programs/humaneval/he_001' -> 'he_001')."""
    return Path(str(name_or_path).rstrip("/")).name


def problem_folder(name_or_path: str, programs_dir: Path) -> Path:
    """The folder a problem name or a folder path refers to: programs_dir/NAME, a folder path, else the one problem
    folder named NAME in a folder under programs_dir (he_016 is programs/humaneval/he_016). A name that several
    folders hold is one ProblemError naming them; an unknown one names the close names there."""
    by_name = programs_dir / name_or_path
    if by_name.is_dir():
        return by_name.resolve()
    as_path = Path(name_or_path)
    if as_path.is_dir():
        return as_path.resolve()
    found = [folder for folder in problem_folders(programs_dir) if folder.name == name_or_path]
    if len(found) == 1:
        return found[0].resolve()
    if found:
        raise ProblemError(f"problem {name_or_path!r} is in {len(found)} folders under {programs_dir} "
                           f"({', '.join(str(folder) for folder in found)}): give the one you mean as its path")
    if not programs_dir.is_dir():
        raise ProblemError(f"{by_name}: no such problem folder ({programs_dir}: {not_a_folder(programs_dir)})")
    names = list_problems(programs_dir)
    close = difflib.get_close_matches(as_path.name, [Path(name).name for name in names], n=3)
    known = ", ".join(names) if len(names) <= KNOWN_LISTED else f"{len(names)} of them, `evolve problems` lists them"
    spelled = " or ".join([", ".join(close[:-1]), close[-1]] if len(close) > 1 else close)
    raise ProblemError(f"{by_name}: no such problem folder" + (f"; did you mean {spelled}?" if close else "")
                       + f" (problems in {programs_dir}: {known or 'none'})")


def not_a_folder(path: Path) -> str:
    """Why `path`, which is no folder, is none: 'not a folder' (a file) or 'no such folder'."""
    return "not a folder" if path.exists() else "no such folder"


def load_problem(name_or_path: str, programs_dir: Path | str = "programs") -> Problem:
    """Read and check a problem folder (a name under `programs_dir`, or a folder path); any mistake
    raises ProblemError naming the file and the fix."""
    folder = problem_folder(name_or_path, Path(programs_dir))
    needs = {"problem.toml": "the problem's settings", "initial.py": "the seed program",
             "evaluator.py": "the trusted scorer"}
    for filename, role in needs.items():
        if not (folder / filename).is_file():
            raise ProblemError(f"{folder / filename}: file not found (every problem folder needs {filename}, {role})")
    source = folder / "problem.toml"
    spec = _read_spec(source)
    _check_consistency(spec, folder, source)
    initial_code = _read_initial(folder / "initial.py")
    evaluator = _check_evaluator(folder / "evaluator.py")
    cascade = _cascade(spec, folder / "evaluator.py", evaluator, source)
    return Problem(
        name=spec.name,
        path=folder,
        description=_description(spec),
        initial_code=initial_code,
        objectives=() if isinstance(spec.objectives, ObjectivePattern) else tuple(spec.objectives),
        objective_pattern=spec.objectives.pattern if isinstance(spec.objectives, ObjectivePattern) else "",
        cascade=cascade,
        reduction=spec.score.reduction,
        weights=dict(spec.score.weights),
        solved_all_at_least=spec.solved.all_at_least,
        solved_scalar_at_least=spec.solved.scalar_at_least,
        limits=SandboxLimits(**spec.limits.model_dump()),
        features=spec.map_elites.features,
        provenance=" ".join(spec.provenance.split()),
        prompt=ProblemPrompt(**spec.prompt.model_dump(), specification=block_docstring(initial_code)
                             if spec.stub_seed and spec.prompt.docstrings else ""),
        stub_seed=spec.stub_seed,
    )


def _description(spec: ProblemFile) -> str:
    """The description flattened to one line, or as written (dedented, without blank lines at either end)."""
    if spec.prompt.description == "as_written":
        return textwrap.dedent(spec.description).strip("\n").rstrip()
    return " ".join(spec.description.split())


def list_problems(programs_dir: Path) -> list[str]:
    """The problems under programs_dir, sorted: the name of each folder that holds a problem.toml (in programs_dir
    or a folder of it, as `evolve import` writes them), or its path under programs_dir where several share a name;
    each loads with load_problem(name, programs_dir)."""
    folders = problem_folders(programs_dir)
    shared = Counter(folder.name for folder in folders)
    return sorted(folder.name if shared[folder.name] == 1 else folder.relative_to(programs_dir).as_posix()
                  for folder in folders)


def problem_folders(programs_dir: Path) -> list[Path]:
    """Every folder under programs_dir (up to PROBLEM_DEPTH deep) that holds a problem.toml; a problem folder's own
    subfolders, hidden folders and __pycache__ are not searched."""
    found: list[Path] = []
    if not programs_dir.is_dir():
        return found
    for root, folders, files in os.walk(programs_dir, followlinks=True):  # the depth bounds a link's loop
        here = Path(root)
        depth = len(here.relative_to(programs_dir).parts)
        if depth and "problem.toml" in files:
            found.append(here)
            folders.clear()
        else:
            folders[:] = [] if depth >= PROBLEM_DEPTH else sorted(
                name for name in folders if not name.startswith((".", "__")))
    return found
