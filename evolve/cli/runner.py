"""Builds a run from its config (problem, store, policy), starts or resumes it, and reports the end."""

from __future__ import annotations

import asyncio
from collections.abc import Mapping
from contextlib import ExitStack
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.syntax import Syntax

from evolve.cli.progress import ProgressView
from evolve.config import RunConfig
from evolve.engine.controller import Controller, check_features
from evolve.engine.driving import RunError, cancelled_by_signals, resumed_config
from evolve.engine.run_stats import RunStats
from evolve.policies.base import Policy, PolicyUnavailable
from evolve.policies.factory import open_policies
from evolve.problems.evaluation import resolve_objectives
from evolve.problems.problem import Problem, load_problem
from evolve.report.run_summary import RunSummary, summarize
from evolve.search.prompt_templates import load_template
from evolve.store.program_store import LeaseLostError, ProgramStore, StoreError, UnknownIdError


@dataclass(frozen=True)
class RunOutcome:
    run_id: int
    status: str
    stats: RunStats


def problem_for(config: RunConfig) -> Problem:
    """The run's problem; a pattern problem's objectives fixed from its seed program's evaluation."""
    problem = load_problem(config.run.problem, Path(config.run.programs_dir))
    return problem if problem.objectives_known else asyncio.run(resolve_objectives(problem))


def new_run(store: ProgramStore, config: RunConfig) -> int:
    """A new run of `config` in the store (called once its problem and policy have loaded)."""
    return store.create_run(
        name=config.run.name or f"{config.run.problem}-{config.policy.name}-s{config.run.seed}",
        problem=config.run.problem,
        policy="+".join(section.name for section in config.ensemble_policies()),
        seed=config.run.seed,
        config_json=config.model_dump_json(),
        iterations_target=config.run.iterations,
    )


def resumed(store: ProgramStore, config: RunConfig, resume: int, overrides: Mapping[str, Any] | None = None,
            blame: Mapping[str, str] | None = None) -> RunConfig:
    """The stored run's own config, found in config.run.db, with `overrides` applied (see resumed_config)."""
    try:
        return resumed_config(store, resume, config.run.db, overrides, blame)
    except UnknownIdError as exc:
        raise RunError(f"no run {resume} in {config.run.db}") from exc


async def _drive(controller: Controller, policies: Mapping[str, Policy]) -> RunStats:
    try:
        with cancelled_by_signals():
            return await controller.run()
    finally:
        for policy in policies.values():
            await policy.close()


def run_evolution(config: RunConfig, resume: int | None = None, console: Console | None = None,
                  live: bool | None = None, overrides: Mapping[str, Any] | None = None,
                  blame: Mapping[str, str] | None = None) -> RunOutcome:
    """Start a run of `config`, or resume run `resume` with its stored config (plus `overrides`, checked against it:
    see resumed_config; `blame` names the flag behind each), and drive it to its budget.

    The process holds the run's lease while it drives it: a resume of a run another live process drives is
    refused (LeaseHeldError, one line) before the problem or the model loads. A new run is written to the store
    only once its problem and its policy have loaded, so a failed start leaves no run behind."""
    console = console or Console()
    store = ProgramStore(config.run.db, mode="existing") if resume is not None else None
    with ExitStack() as held:
        if store is not None and resume is not None:
            config = resumed(store, config, resume, overrides, blame)
            held.enter_context(store.driving(resume))
        problem = problem_for(config)
        check_features(config.selection.map_elites.features, problem)  # one line, before a model loads
        for section in config.ensemble_policies():  # a missing template stops us before a model loads, too
            load_template(section.template)
        if store is None:  # a new run's store, made once the problem and the settings are known to be usable
            store = ProgramStore(config.run.db, mode="create")
        console.print("loading " + ", ".join(f"{section.name} ({section.backend}: {section.model or 'default'})"
                                             for section in config.ensemble_policies()) + " ...", highlight=False)
        policies = held.enter_context(open_policies(config.ensemble_policies(), config.run.seed,
                                                    config.run.concurrency))
        run_id = resume if resume is not None else new_run(store, config)
        if resume is None:
            held.enter_context(store.driving(run_id))
        return _drive_run(store, config, problem, policies, run_id, resume is not None, console, live)


def _drive_run(store: ProgramStore, config: RunConfig, problem: Problem, policies: Mapping[str, Policy], run_id: int,
               resuming: bool, console: Console, live: bool | None) -> RunOutcome:
    """Drive a run whose lease this process holds, write its final status, and report. A resumed run's state is read
    from the store first: a store that cannot be read (damaged) stops the resume in one line with nothing written,
    and a store error while the run goes on leaves its status as it was (`evolve runs` then reads it killed)."""
    controller = Controller(config, problem, store, policies, run_id)
    if resuming:
        controller.restore()
    store.set_run_status(run_id, "running")
    console.print(
        f"{'resuming' if resuming else 'starting'} run {run_id}: problem [bold]{problem.name}[/] "
        f"({len(problem.objectives)} objectives), "
        + ", ".join(f"policy [bold]{section.name}[/] ({section.backend}: {section.model})"
                    for section in config.ensemble_policies())
        + f", {config.run.iterations} iterations, "
        f"seed {config.run.seed}, store {config.run.db}",
        highlight=False,
    )
    title = f"evolve run {run_id}: {problem.name} x {config.policy.name}"
    resume_hint = f"evolve run --resume {run_id} --db {config.run.db}"
    try:
        with ProgressView(title, console, live) as view:
            controller.on_update = view.update
            stats = asyncio.run(_drive(controller, policies))
    except (LeaseLostError, StoreError):
        raise  # another process drives the run now, or the store cannot be written: its status is not ours to write
    except (KeyboardInterrupt, asyncio.CancelledError):
        store.set_run_status(run_id, "interrupted")
        console.print(f"interrupted; continue with: {resume_hint}", highlight=False)
        return RunOutcome(run_id, "interrupted", controller.stats)
    except PolicyUnavailable as exc:
        store.set_run_status(run_id, "interrupted")
        console.print(f"[red]error:[/] {exc}\nthe run is saved; once the policy is back, continue with: "
                      f"{resume_hint}", highlight=False)
        return RunOutcome(run_id, "policy_unavailable", controller.stats)
    except BaseException:
        store.set_run_status(run_id, "failed")
        raise
    store.set_run_status(run_id, "finished")
    print_summary(console, store, run_id)
    if stats.stopped:
        console.print(f"stopped early: {stats.stopped} ({stats.iterations_done} of {stats.iterations_target} "
                      "iterations used)", highlight=False)
    return RunOutcome(run_id, "finished", stats)


def summary_lines(summary: RunSummary) -> list[tuple[str, str]]:
    """The end-of-run rows, counted from the store over the whole run (a resumed run's earlier processes too)."""
    done, t = summary.iterations_done, summary.throughput
    with_child = summary.iterations_with_child
    share = f"{with_child}/{done} ({100 * with_child / done:.0f}%)" if done else "0/0"
    failures = ", ".join(f"{kind} {count}" for kind, count in sorted(summary.outcomes.items())
                         if kind != "child" and count) or "none"
    best = summary.best[0] if summary.best else None
    solved = summary.first_solved
    rate = f"{t.tokens_per_s:.1f} tokens/s" if t.tokens_per_s is not None else "- tokens/s"
    return [
        ("iterations", f"{done}/{summary.iterations_target}"),
        ("iterations with a valid child", share),
        ("children evaluated", str(summary.outcomes.get("child", 0))),
        ("other outcomes", failures),
        ("best scalar", f"{best.scalar:.4f} (program {summary.run_id}:{best.number}, iteration {best.iteration})"
         if best else "-"),
        ("solved", f"yes, at iteration {solved.iteration} (program {summary.run_id}:{solved.number})" if solved
         else "not yet"),
        ("generation", f"{t.completion_tokens} tokens, {rate} over {t.wall_s:.0f}s of the run's active wall time"),
    ]


def print_summary(console: Console, store: ProgramStore, run_id: int) -> None:
    summary = summarize(store, run_id)
    console.rule(f"run {run_id} finished")
    for key, value in summary_lines(summary):
        console.print(f"[bold cyan]{key:>30}[/]  {value}", highlight=False)
    best = store.best_programs(run_id, 1)
    if best:
        program = best[0]
        vector = ", ".join(f"{k}={v:.3g}" for k, v in program.scores.items())
        console.print(f"\nbest program {run_id}:{store.program_number(run_id, program.id)} (store id {program.id}, "
                      f"iteration {program.iteration}): {vector}", highlight=False)
        if console.is_terminal:
            console.print(Syntax(program.code, "python", line_numbers=False))
        else:  # a log or a pipe: the code as it is, not padded with spaces to the console's width
            console.print(program.code, markup=False, highlight=False, soft_wrap=True)
