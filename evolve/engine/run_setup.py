"""What a run's config resolves to against its problem before its loop starts: the selection settings with the
features the problem declares (a feature it does not know is one ConfigError line, checked before a model loads),
the policy requests one iteration makes, and a new run's name."""

from __future__ import annotations

from collections.abc import Collection

from evolve.config import ConfigError, RunConfig, SelectionConfig
from evolve.problems.problem import Problem, problem_key
from evolve.search.selection import BUILTIN_FEATURES


def requests_per_iteration(config: RunConfig) -> int:
    """Policy requests per iteration: run.answers_per_iteration / policy.answers (1 when it is 0, today's default)."""
    return max(1, config.run.answers_per_iteration // config.policy.answers)


def check_features(features: tuple[str, ...], problem: Problem) -> None:
    """ConfigError, one line, for a selection.map_elites feature that is neither built in nor an objective of the
    problem (one matching its pattern, before a pattern problem's objectives are fixed): checked when the problem
    loads, before any model loads or the run is written, since only the problem knows its objectives."""
    def known(feature: str) -> bool:
        if feature in BUILTIN_FEATURES or feature in problem.objectives:
            return True
        return not problem.objectives_known and problem.matches_pattern(feature)

    unknown = [feature for feature in features if not known(feature)]
    if unknown:
        objectives = (f"its objectives ({', '.join(problem.objectives[:6])}"
                      + (f", ... {len(problem.objectives)} in all)" if len(problem.objectives) > 6 else ")")
                      if problem.objectives_known else f"an objective matching {problem.objective_pattern!r}")
        raise ConfigError(f"selection.map_elites.features: {unknown[0]!r} is no feature of problem {problem.name} "
                          f"(allowed: {', '.join(BUILTIN_FEATURES)} or {objectives})")


def selection_for(config: RunConfig, problem: Problem) -> SelectionConfig:
    """The run's selection settings, with the MAP-Elites features the problem declares, if any."""
    check_features(config.selection.map_elites.features, problem)
    if not problem.features:
        return config.selection
    grid = config.selection.map_elites.model_copy(update={"features": tuple(problem.features)})
    return config.selection.model_copy(update={"map_elites": grid})


def run_name(config: RunConfig, taken: Collection[str]) -> str:
    """A new run's name: run.name, else PROBLEM-POLICY-sSEED with the problem's name (not the path it was given
    by); '-2', '-3', ... added when a run in the store has that name already, so that every name tells one run."""
    base = config.run.name or f"{problem_key(config.run.problem)}-{config.policy.name}-s{config.run.seed}"
    name, count = base, 1
    while name in taken:
        count += 1
        name = f"{base}-{count}"
    return name
