"""evolve: evolutionary program search driven by language-model policies, with vector scores.

The names below are the public Python API; the `evolve` command is a thin layer on them. They load on first use,
so `import evolve` is fast and imports neither torch nor transformers.

    from pathlib import Path
    import evolve

    problem = evolve.load_problem("symbolic_regression", Path("programs"))
    print(problem.objectives, problem.initial_code)
    outcome = evolve.run("evolve.toml", overrides={"run.iterations": 20, "run.seed": 1}, progress=True)
    store = evolve.ProgramStore(outcome.db, mode="read")  # the store the run wrote, wherever the config put it
    best = store.best_programs(outcome.run_id, 1)[0]
    print(outcome.status, best.scores, best.code)
    try:
        evolve.run(overrides={"run.problem": "no_such_problem"})
    except evolve.UserError as mistake:  # every error the user can fix: one line
        print(mistake)

`run_experiment` and `experiment_report` do what `evolve experiment` and `evolve report` do (`evolve.report` is
the subpackage that draws reports, hence the longer name); a problem's evaluator.py returns `EvaluationResult`
and runs the candidate in the `Sandbox` it is given.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

from evolve.errors import UserError

if TYPE_CHECKING:
    from evolve.api import Report, experiment_file, experiment_report, run, run_experiment
    from evolve.config import ConfigError, RunConfig, load_config
    from evolve.engine.experiment import ExperimentOutcome
    from evolve.engine.experiment_spec import ExperimentSpec, load_experiment
    from evolve.engine.run_driver import RunOutcome
    from evolve.evaluator_api import CandidateFailure, EvaluationResult, Sandbox
    from evolve.problems.problem import Problem, ProblemError, load_problem
    from evolve.store.program_store import ProgramStore, StoreError

# public name -> the module that defines it
_EXPORTS: dict[str, str] = {
    "load_config": "evolve.config", "RunConfig": "evolve.config", "ConfigError": "evolve.config",
    "load_problem": "evolve.problems.problem", "Problem": "evolve.problems.problem",
    "ProblemError": "evolve.problems.problem",
    "ProgramStore": "evolve.store.program_store", "StoreError": "evolve.store.program_store",
    "run": "evolve.api", "run_experiment": "evolve.api", "experiment_report": "evolve.api", "Report": "evolve.api",
    "experiment_file": "evolve.api",
    "RunOutcome": "evolve.engine.run_driver",
    "load_experiment": "evolve.engine.experiment_spec", "ExperimentSpec": "evolve.engine.experiment_spec",
    "ExperimentOutcome": "evolve.engine.experiment",
    "EvaluationResult": "evolve.evaluator_api", "CandidateFailure": "evolve.evaluator_api",
    "Sandbox": "evolve.evaluator_api",
}

__all__ = ["CandidateFailure", "ConfigError", "EvaluationResult", "ExperimentOutcome", "ExperimentSpec", "Problem",
           "ProblemError", "ProgramStore", "Report", "RunConfig", "RunOutcome", "Sandbox", "StoreError", "UserError",
           "__version__", "experiment_file", "experiment_report", "load_config", "load_experiment", "load_problem",
           "run", "run_experiment"]


def __getattr__(name: str) -> Any:
    if name == "__version__":
        from importlib.metadata import PackageNotFoundError, version

        try:
            return version("evolve")
        except PackageNotFoundError:  # run from a source tree that was never installed
            return "0+unknown"
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module 'evolve' has no attribute {name!r}")
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value  # later look-ups skip __getattr__
    return value


def __dir__() -> list[str]:
    return sorted(__all__)  # the public names only: not the helpers this module imports for itself
