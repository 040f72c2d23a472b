"""What a problem's evaluate() returned, checked against the problem's declared objectives: scores that are finite
numbers under the declared names, artifacts as short text; every mistake one line (EvaluatorMistake)."""

from __future__ import annotations

import math
import numbers
from collections.abc import Callable
from typing import Any

from evolve.evaluator_api import EvaluationResult
from evolve.problems.problem import Problem
from evolve.records import Evaluation

MAX_ARTIFACT_CHARS = 2000
MAX_DETAIL_CHARS = 500


class EvaluatorMistake(Exception):
    """The problem's evaluator returned something the engine cannot use; the message says what."""


def clipped(value: Any, limit: int, show: Callable[[Any], str] = str) -> str:
    """show(value) cut to `limit` characters, never raising (str() of a huge int or of deep nesting does) and with
    any lone surrogate replaced (the store cannot encode one)."""
    try:
        text = value if isinstance(value, str) and show is str else show(value)
    except Exception:  # noqa: BLE001 - an object that cannot be shown is named by its type
        text = f"<{type(value).__name__}>"
    return text[:limit].encode("utf-8", "replace").decode("utf-8")


def check_result(problem: Problem, returned: Any) -> tuple[dict[str, float], dict[str, str]]:
    """Scores and artifacts from what evaluate() returned; EvaluatorMistake names what is wrong."""
    artifacts: Any = {}
    raw = returned
    if isinstance(returned, EvaluationResult):
        raw, artifacts = returned.scores, returned.artifacts
    if not isinstance(raw, dict):
        raise EvaluatorMistake(f"evaluate() returned {type(raw).__name__}; it must return dict[str, float] "
                               "or EvaluationResult")
    if not isinstance(artifacts, dict):
        raise EvaluatorMistake(f"EvaluationResult.artifacts is {type(artifacts).__name__}, not dict[str, str]")
    names = _returned_objectives(problem, raw)
    scores: dict[str, float] = {}
    for name in names:
        value = raw[name]
        if isinstance(value, bool) or not isinstance(value, numbers.Real):
            raise EvaluatorMistake(f"objective '{name}' is {type(value).__name__} {clipped(value, 80, repr)}, "
                                   "not a number")
        try:
            number = float(value)
        except (OverflowError, ValueError):
            raise EvaluatorMistake(f"objective '{name}' is {type(value).__name__}, too large for a float") from None
        if not math.isfinite(number):
            raise EvaluatorMistake(f"objective '{name}' is {number}, not a finite number")
        scores[name] = number
    kept = {clipped(key, 200): clipped(text, MAX_ARTIFACT_CHARS) for key, text in artifacts.items()}
    return scores, kept


def _returned_objectives(problem: Problem, raw: dict[Any, Any]) -> tuple[str, ...]:
    """The objectives evaluate() returned, in the problem's order: exactly the declared ones, or, for a pattern
    problem, at least one name and every name matching the pattern."""
    if not problem.objectives_known:
        strange = sorted(clipped(name, 200) for name in raw
                         if not isinstance(name, str) or not problem.matches_pattern(name))
        if strange or not raw:
            raise EvaluatorMistake(f"evaluate() must return objectives whose names match "
                                   f"{problem.objective_pattern!r} (problem.toml); "
                                   + (f"unexpected {strange[:10]}" if strange else "it returned none"))
        return problem.objective_names(raw)
    missing = [name for name in problem.objectives if name not in raw]
    unexpected = sorted(clipped(name, 200) for name in raw if name not in problem.objectives)
    if missing or unexpected:
        raise EvaluatorMistake(f"evaluate() must return exactly the objectives in problem.toml; "
                               f"missing {missing[:10]}, unexpected {unexpected[:10]}")
    return problem.objectives


def conform(problem: Problem, evaluation: Evaluation) -> Evaluation:
    """The engine's side of a pattern problem: once resolved, every evaluation must return the resolved names (the
    worker only checked them against the pattern); any other set is the evaluator's error."""
    if not evaluation.ok or not problem.objective_pattern or not problem.objectives_known:
        return evaluation
    if set(evaluation.scores) == set(problem.objectives):
        return evaluation
    missing = [name for name in problem.objectives if name not in evaluation.scores][:5]
    extra = sorted(set(evaluation.scores) - set(problem.objectives))[:5]
    detail = (f"evaluate() returned other objectives than the seed program's ({len(problem.objectives)} names matching "
              f"{problem.objective_pattern!r}); missing {missing}, unexpected {extra}")
    return Evaluation(ok=False, failure="evaluator_error", detail=detail[:MAX_DETAIL_CHARS],
                      artifacts=evaluation.artifacts, wall_s=evaluation.wall_s)
