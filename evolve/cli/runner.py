"""Builds a run from its config (problem, store, policy), starts or resumes it, and reports the end."""

from __future__ import annotations

import asyncio
import signal
from dataclasses import dataclass
from pathlib import Path

from rich.console import Console
from rich.syntax import Syntax

from evolve.cli.progress import ProgressView, summary_rows
from evolve.config import RunConfig
from evolve.engine.controller import Controller, RunStats
from evolve.errors import UserError
from evolve.policies.base import Policy, PolicyUnavailable
from evolve.policies.factory import open_policy
from evolve.problems.problem import Problem, load_problem
from evolve.store.program_store import ProgramStore


class RunError(UserError, RuntimeError):
    """A run cannot start or resume; the message is one line for the user."""


@dataclass(frozen=True)
class RunOutcome:
    run_id: int
    status: str
    stats: RunStats


def problem_for(config: RunConfig) -> Problem:
    return load_problem(config.run.problem, Path(config.run.programs_dir))


def start_or_resume(store: ProgramStore, config: RunConfig, resume: int | None) -> tuple[int, RunConfig]:
    """The run to drive and its config: a new run, or the stored one (its own config) on resume."""
    if resume is None:
        run_id = store.create_run(
            name=config.run.name or f"{config.run.problem}-{config.policy.name}-s{config.run.seed}",
            problem=config.run.problem,
            policy=config.policy.name,
            seed=config.run.seed,
            config_json=config.model_dump_json(),
            iterations_target=config.run.iterations,
        )
        return run_id, config
    try:
        info = store.get_run(resume)
    except Exception as exc:
        raise RunError(f"no run {resume} in {config.run.db}") from exc
    stored = RunConfig.model_validate_json(info.config_json)
    # the store is where we found the run, wherever the stored config said it was
    stored = stored.model_copy(update={"run": stored.run.model_copy(update={"db": config.run.db})})
    return resume, stored


async def _drive(controller: Controller, policy: Policy) -> RunStats:
    loop = asyncio.get_running_loop()
    task = asyncio.current_task()
    for sig in (signal.SIGINT, signal.SIGTERM):
        if task is not None:
            loop.add_signal_handler(sig, task.cancel)
    try:
        return await controller.run()
    finally:
        for sig in (signal.SIGINT, signal.SIGTERM):
            loop.remove_signal_handler(sig)
        await policy.close()


def run_evolution(config: RunConfig, resume: int | None = None, console: Console | None = None,
                  live: bool | None = None) -> RunOutcome:
    console = console or Console()
    store = ProgramStore(config.run.db, mode="create" if resume is None else "existing")
    run_id, config = start_or_resume(store, config, resume)
    problem = problem_for(config)
    store.set_run_status(run_id, "running")
    verb = "resuming" if resume is not None else "starting"
    console.print(
        f"{verb} run {run_id}: problem [bold]{problem.name}[/] ({len(problem.objectives)} objectives), "
        f"policy [bold]{config.policy.name}[/] ({config.policy.backend}: {config.policy.model}), "
        f"{config.run.iterations} iterations, seed {config.run.seed}, store {config.run.db}",
        highlight=False,
    )
    title = f"evolve run {run_id}: {problem.name} x {config.policy.name}"
    resume_hint = f"evolve run --resume {run_id} --db {config.run.db}"
    controller: Controller | None = None
    try:
        with open_policy(config.policy, config.run.seed, config.run.concurrency) as policy, \
                ProgressView(title, console, live) as view:
            controller = Controller(config, problem, store, policy, run_id, on_update=view.update)
            stats = asyncio.run(_drive(controller, policy))
    except (KeyboardInterrupt, asyncio.CancelledError):
        store.set_run_status(run_id, "interrupted")
        console.print(f"interrupted; continue with: {resume_hint}", highlight=False)
        return RunOutcome(run_id, "interrupted", _stats(controller, config))
    except PolicyUnavailable as exc:
        store.set_run_status(run_id, "interrupted")
        console.print(f"[red]error:[/] {exc}\nthe run is saved; once the policy is back, continue with: "
                      f"{resume_hint}", highlight=False)
        return RunOutcome(run_id, "policy_unavailable", _stats(controller, config))
    except BaseException:
        store.set_run_status(run_id, "failed")
        raise
    store.set_run_status(run_id, "finished")
    print_summary(console, store, run_id, stats)
    return RunOutcome(run_id, "finished", stats)


def _stats(controller: Controller | None, config: RunConfig) -> RunStats:
    return controller.stats if controller else RunStats(config.run.iterations)


def print_summary(console: Console, store: ProgramStore, run_id: int, stats: RunStats) -> None:
    console.rule(f"run {run_id} finished")
    for key, value in summary_rows(stats):
        console.print(f"[bold cyan]{key:>30}[/]  {value}", highlight=False)
    best = store.best_programs(run_id, 1)
    if best:
        program = best[0]
        vector = ", ".join(f"{k}={v:.3g}" for k, v in program.scores.items())
        console.print(f"\nbest program #{program.id} (iteration {program.iteration}): {vector}", highlight=False)
        console.print(Syntax(program.code, "python", line_numbers=False))
