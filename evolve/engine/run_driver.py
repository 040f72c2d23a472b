"""Drives one run from its config: loads the problem and the policies, starts or resumes the run under its lease,
drives the controller to its budget and writes the run's final status. It reports through events and returns what
happened; drawing it is the caller's (the CLI's panel, an API caller's callback)."""

from __future__ import annotations

import asyncio
import os
from collections.abc import Mapping
from contextlib import ExitStack
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

from evolve.config import RunConfig
from evolve.engine.controller import Controller
from evolve.engine.driving import RunError, resumed_config
from evolve.engine.events import Observer, RunLoading, RunStarted, ignore
from evolve.engine.run_setup import check_features, run_name
from evolve.engine.run_stats import RunStats
from evolve.policies.base import Policy, PolicyUnavailable
from evolve.policies.factory import open_policies
from evolve.problems.evaluation import resolve_objectives
from evolve.problems.problem import Problem, load_problem
from evolve.search.prompt_templates import load_template
from evolve.stop_signals import cancelled_by_signals
from evolve.store.program_store import LeaseLostError, ProgramStore, StoreError, UnknownIdError, shown_store

RunStatus = Literal["finished", "interrupted", "policy_unavailable"]


@dataclass(frozen=True)
class RunOutcome:
    """How a run ended: 'finished', or resumable ('interrupted'; 'policy_unavailable' with the reason in `error`)."""

    run_id: int
    status: RunStatus
    stats: RunStats
    db: str = ""  # the store the run is in (where --resume finds it)
    error: str = ""


def problem_for(config: RunConfig) -> Problem:
    """The run's problem; a pattern problem's objectives fixed from its seed program's evaluation."""
    problem = load_problem(config.run.problem, Path(config.run.programs_dir))
    return problem if problem.objectives_known else asyncio.run(resolve_objectives(problem))


def new_run(store: ProgramStore, config: RunConfig) -> int:
    """A new run of `config` in the store (called once its problem and policy have loaded). Its stored config names
    the problems' folder as an absolute path, so a resume finds it from any folder (see resumed_programs_dir)."""
    absolute = os.path.abspath(config.run.programs_dir)
    stored = config.model_copy(update={"run": config.run.model_copy(update={"programs_dir": absolute})})
    return store.create_run(
        name=run_name(config, {run.name for run in store.list_runs()}),
        problem=config.run.problem,
        policy="+".join(section.name for section in config.ensemble_policies()),
        seed=config.run.seed,
        config_json=stored.model_dump_json(),
        iterations_target=config.run.iterations,
    )


def resumed(store: ProgramStore, config: RunConfig, resume: int, overrides: Mapping[str, Any] | None = None,
            blame: Mapping[str, str] | None = None, config_file: str | Path | None = None) -> RunConfig:
    """The stored run's own config, found in config.run.db, with `overrides` applied (see resumed_config), its
    problems' folder found as resumed_programs_dir says (an override of run.programs_dir is taken as typed)."""
    try:
        stored = resumed_config(store, resume, config.run.db, overrides, blame)
    except UnknownIdError as exc:
        raise RunError(f"no run {resume} in {shown_store(config.run.db)}") from exc
    if (overrides or {}).get("run.programs_dir") is not None:
        return stored
    folder = resumed_programs_dir(stored.run.programs_dir, config_file)
    return stored.model_copy(update={"run": stored.run.model_copy(update={"programs_dir": folder})})


def resumed_programs_dir(stored: str, config_file: str | Path | None) -> str:
    """Where a resumed run's problems are: its stored programs_dir when absolute (as every run stores it now); a
    relative one (a run stored before) read as a config file's relative paths are, from the folder of the config
    file the resume was given (none: the working directory), unless only the working directory holds it (a run
    started with `-c ELSEWHERE/evolve.toml` stored the path it was read from there)."""
    path = Path(stored)
    if path.is_absolute() or config_file is None:
        return stored
    beside = Path(config_file).parent / path
    return str(beside) if beside.is_dir() or not path.is_dir() else stored


def stored_objectives(store: ProgramStore, run_id: int) -> tuple[str, ...] | None:
    """The objectives run `run_id` is scored on: its seed program's score vector's names (every program of a run has
    the same ones); None while the run has no program."""
    try:
        seed = store.program_by_number(run_id, 1)
    except UnknownIdError:
        return None
    return tuple(seed.scores)


def other_objectives(store: ProgramStore, run_id: int, problem: Problem) -> str:
    """Why run `run_id` cannot go on with `problem` as its folder now declares it: '' when the run's stored programs
    are scored on the same objectives (or it has none yet), else one line naming both sets."""
    stored = stored_objectives(store, run_id)
    if stored is None or set(stored) == set(problem.objectives):
        return ""
    return (f"run {run_id} was scored on {_objective_names(stored)}, but {problem.path / 'problem.toml'} now "
            f"declares {_objective_names(problem.objectives)}: going on would mix score vectors of both")


def _objective_names(names: tuple[str, ...], shown: int = 5) -> str:
    listed = ", ".join(names[:shown]) + (f", ... ({len(names) - shown} more)" if len(names) > shown else "")
    return f"{len(names)} objective{'s' if len(names) != 1 else ''} ({listed})"


def run_evolution(config: RunConfig, resume: int | None = None, overrides: Mapping[str, Any] | None = None,
                  blame: Mapping[str, str] | None = None, on_event: Observer | None = None,
                  config_file: str | Path | None = None) -> RunOutcome:
    """Start a run of `config`, or resume run `resume` with its stored config (plus `overrides`, checked against it:
    see resumed_config; `blame` names the flag behind each), and drive it to its budget. `config_file`: the file
    `config` was read from, whose folder a resumed run's relative programs_dir is read from (resumed_programs_dir).

    The process holds the run's lease while it drives it: a resume of a run another live process drives is
    refused (LeaseHeldError, one line) before the problem or the model loads, and so is a resume whose problem
    folder now declares other objectives than the run was scored on (RunError naming both). A new run is written to
    the store only once its problem and its policy have loaded, so a failed start leaves no run behind."""
    observe = on_event or ignore
    store = ProgramStore(config.run.db, mode="existing") if resume is not None else None
    with ExitStack() as held:
        if store is not None and resume is not None:
            config = resumed(store, config, resume, overrides, blame, config_file)
            held.enter_context(store.driving(resume))
        problem = problem_for(config)
        if store is not None and resume is not None and (refusal := other_objectives(store, resume, problem)):
            raise RunError(f"{refusal}; restore the problem folder (or name the one the run used with --set "
                           "run.programs_dir=DIR), or start a new run")
        check_features(config.selection.map_elites.features, problem)  # one line, before a model loads
        for section in config.ensemble_policies():  # a missing template stops us before a model loads, too
            load_template(section.template)
        if store is None:  # a new run's store, made once the problem and the settings are known to be usable
            store = ProgramStore(config.run.db, mode="create")
        observe(RunLoading(config, resume is not None))
        policies = held.enter_context(open_policies(config.ensemble_policies(), config.run.seed,
                                                    config.run.concurrency))
        run_id = resume if resume is not None else new_run(store, config)
        if resume is None:
            held.enter_context(store.driving(run_id))
        return drive_run(store, config, problem, policies, run_id, resume is not None, observe)


def drive_run(store: ProgramStore, config: RunConfig, problem: Problem, policies: Mapping[str, Policy], run_id: int,
              resuming: bool, observe: Observer) -> RunOutcome:
    """Drive a run whose lease this process holds and write its final status. A resumed run's state is read from
    the store first: a store that cannot be read (damaged) stops the resume in one line with nothing written, and a
    store error while the run goes on leaves its status as it was (`evolve runs` then reads it killed)."""
    controller = Controller(config, problem, store, policies, run_id, on_event=observe)
    if resuming:
        controller.restore()
    store.set_run_status(run_id, "running")
    try:
        observe(RunStarted(run_id, config, problem, resuming, controller.stats))  # a Ctrl-C from here on is stored
        stats = asyncio.run(_drive(controller, policies))
    except (LeaseLostError, StoreError):
        raise  # another process drives the run now, or the store cannot be written: its status is not ours to write
    except (KeyboardInterrupt, asyncio.CancelledError) as exc:
        store.set_run_status(run_id, "interrupted", interruption(exc))
        return RunOutcome(run_id, "interrupted", controller.stats, config.run.db)
    except PolicyUnavailable as exc:
        store.set_run_status(run_id, "interrupted", f"the policy became unavailable: {one_line(exc)}")
        return RunOutcome(run_id, "policy_unavailable", controller.stats, config.run.db, str(exc))
    except BaseException as exc:
        store.set_run_status(run_id, "failed", f"{type(exc).__name__}: {one_line(exc)}")
        raise
    store.set_run_status(run_id, "finished")
    return RunOutcome(run_id, "finished", stats, config.run.db)


def interruption(exc: BaseException) -> str:
    """Why a run was interrupted, for the store: the signal that cancelled it (stop_signals names it), or Ctrl-C."""
    signal_name = exc.args[0] if isinstance(exc, asyncio.CancelledError) and exc.args else ""
    if signal_name == "SIGTERM":
        return "stopped by SIGTERM (a kill, or the machine shutting down)"
    if signal_name == "SIGINT" or isinstance(exc, KeyboardInterrupt):
        return "interrupted by Ctrl-C (SIGINT)"
    return "cancelled"


def one_line(exc: BaseException) -> str:
    return " ".join(str(exc).split()) or type(exc).__name__


async def _drive(controller: Controller, policies: Mapping[str, Policy]) -> RunStats:
    try:
        with cancelled_by_signals():
            return await controller.run()
    finally:
        for policy in policies.values():
            await policy.close()
