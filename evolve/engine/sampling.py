"""Plain sampling (`evolve sample`): n answers per problem from a policy without evolution, kept as runs in the store.

Each (problem, policy) is a run named `sample/PROBLEM/POLICY` with selection strategy "seed": every iteration sends
the engine's mutation prompt for the problem's seed program (what evolution's first iteration sends) with its own
sampling seed, and the controller builds, evaluates and records the answers as usual. Samples are counted in answers:
an m-answer policy makes ceil(n / m) requests of m answers each. Running the same command again resumes the runs, or
reuses them (a larger n extends them; a smaller one reads their first requests).

Per answer: a child's scalar and solved flag; a duplicate of an earlier child of the run scores as that child (same
code, same deterministic evaluation); an answer that could not be built, failed its evaluation, left the seed program
unchanged, or is missing from its completion (fewer than m), and every answer of a failed request, scores 0 and does
not solve (as rollouts.py rewards them).
"""

from __future__ import annotations

import asyncio
import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from evolve.config import RunConfig, stored_config
from evolve.engine.controller import Controller, check_features
from evolve.engine.driving import RunError
from evolve.engine.experiment import run_sharing_backend
from evolve.engine.offspring import SeedProgramError
from evolve.policies.base import Policy, PolicyUnavailable
from evolve.policies.factory import open_policy
from evolve.problems.evaluator_pool import EvaluatorPool
from evolve.problems.problem import Problem, load_problem
from evolve.records import code_key
from evolve.report.passk import best_at_k, pass_at_k
from evolve.search.prompt_templates import load_template
from evolve.store.program_store import LeaseHeldError, LeaseLostError, ProgramStore, RunInfo
from evolve.store.tables import utc_now


class SampleError(RunError):
    """A sampling request that cannot go on (stored runs sampled with other settings); one line for the user."""


@dataclass(frozen=True)
class SamplePlan:
    """One problem's sampling run: its stored run (None: not created yet) and the config it runs with."""

    problem: Problem
    config: RunConfig
    run_id: int | None
    finished: bool


PlanCallback = Callable[[SamplePlan, int], None]  # (plan, run id) when it finishes, (plan, requests done) as it goes


@dataclass(frozen=True)
class ProblemSample:
    """What one problem's answers scored, in sampling order (the first n answers of its run)."""

    problem: str  # as given on the command line (a name in programs_dir or a folder)
    run_id: int
    seed_scalar: float  # the seed program's scalar, for reference (an answer that leaves it unchanged scores 0)
    requests: int
    failed_requests: int  # policy errors; their answers score 0
    scalars: tuple[float, ...]
    solved: tuple[bool, ...]

    @property
    def n(self) -> int:
        return len(self.scalars)

    @property
    def c(self) -> int:
        return sum(self.solved)

    def pass_at(self, k: int) -> float:
        return pass_at_k(self.n, self.c, k)

    def best_at(self, k: int) -> float:
        return best_at_k(self.scalars, k)


@dataclass
class SampleOutcome:
    """Which plans finished, and why the others did not."""

    finished: dict[str, int] = field(default_factory=dict)  # run name -> run id
    errors: list[str] = field(default_factory=list)
    interrupted: bool = False


def sample_run_name(problem: Problem, policy: str) -> str:
    return f"sample/{problem.name}/{policy}"


def requests_for(answers: int, answers_per_request: int) -> int:
    """Requests that give at least `answers` answers, m per request."""
    return math.ceil(answers / answers_per_request)


def sample_config(base: RunConfig, problem: str, problem_name: str, answers: int) -> RunConfig:
    """The run config of one problem's sampling run: the seed program as every parent, one request per iteration."""
    run_updates: dict[str, object] = {"problem": problem, "iterations": requests_for(answers, base.policy.answers),
                                      "name": f"sample/{problem_name}/{base.policy.name}",
                                      "answers_per_iteration": 0}  # one request per iteration, whatever m is
    selection = base.selection.model_copy(update={"strategy": "seed", "islands": 1, "inspirations": 0})
    return RunConfig(run=base.run.model_copy(update=run_updates), policy=base.policy, selection=selection)


def settings_changed(stored: RunConfig, wanted: RunConfig) -> list[str]:
    """'policy.KEY a -> b' for each sampling setting that differs between a stored run and this request."""
    before, after = stored.policy.model_dump(), wanted.policy.model_dump()  # another backend: its settings differ
    changes = [f"policy.{key} {value!r} -> {after[key]!r}" for key, value in before.items()
               if key in after and after[key] != value]
    if stored.run.seed != wanted.run.seed:
        changes.append(f"run.seed {stored.run.seed} -> {wanted.run.seed}")
    return changes


def latest_run(store: ProgramStore, name: str) -> RunInfo | None:
    runs = [run for run in store.list_runs() if run.name == name]
    return runs[-1] if runs else None


def plan_samples(store: ProgramStore, base: RunConfig, problems: Sequence[str], answers: int) -> list[SamplePlan]:
    """Load every problem (a broken one is an error before any model loads) and find or plan its run."""
    programs_dir = Path(base.run.programs_dir)
    load_template(base.policy.template)
    plans: list[SamplePlan] = []
    for spec in problems:
        problem = load_problem(spec, programs_dir)
        check_features(base.selection.map_elites.features, problem)
        twin = next((plan.config.run.problem for plan in plans if plan.problem.name == problem.name), None)
        if twin is not None:
            raise SampleError(f"{twin} and {spec} are the same problem ({problem.name}); name it once")
        wanted = sample_config(base, spec, problem.name, answers)
        info = latest_run(store, wanted.run.name)
        if info is None:
            plans.append(SamplePlan(problem, wanted, None, False))
            continue
        stored = stored_config(info.config_json)
        changed = settings_changed(stored, wanted)
        if changed:
            raise SampleError(f"run {info.id} ({info.name}) in {base.run.db} was sampled with other settings "
                              f"({'; '.join(changed)}); name this policy differently (--set policy.name=...) "
                              "or use another --db")
        needed = max(stored.run.iterations, wanted.run.iterations)
        config = stored.model_copy(update={"run": stored.run.model_copy(update={"db": base.run.db,
                                                                                "iterations": needed})})
        done = {i for i in store.completed_iterations(info.id) if i >= 1}
        holder = store.lease(info.id)
        if holder is not None and holder.live(utc_now()) and holder.holder != store.holder:
            raise SampleError(f"run {info.id} ({info.name}) is being sampled by {holder.describe(utc_now())}; "
                              "wait for it to end or stop it")
        if needed > stored.run.iterations:
            store.set_run_budget(info.id, config.run.iterations, config.model_dump_json())
        plans.append(SamplePlan(problem, config, info.id, len(done) >= needed))
    return plans


def run_samples(store: ProgramStore, plans: Sequence[SamplePlan], parallel: int = 2,
                on_done: PlanCallback | None = None,
                on_request: PlanCallback | None = None) -> SampleOutcome:
    """Sample every unfinished plan with one policy object (loaded once); plans already finished are not touched.
    `on_done(plan, run_id)` follows each finished plan, `on_request(plan, requests_done)` each committed request."""
    outcome = SampleOutcome(finished={plan.config.run.name: plan.run_id for plan in plans
                                      if plan.finished and plan.run_id is not None})
    todo = [plan for plan in plans if not plan.finished]
    if not todo:
        return outcome
    policy = todo[0].config.policy
    concurrency = todo[0].config.run.concurrency * parallel
    try:
        with open_policy(policy, todo[0].config.run.seed, concurrency) as backend:
            asyncio.run(_sample_all(store, backend, todo, parallel, outcome, on_done or (lambda plan, run: None),
                                    on_request or (lambda plan, done: None)))
    except (KeyboardInterrupt, asyncio.CancelledError):
        outcome.interrupted = True
    return outcome


async def _sample_all(store: ProgramStore, backend: Policy, todo: Sequence[SamplePlan], parallel: int,
                      outcome: SampleOutcome, on_done: PlanCallback,
                      on_request: PlanCallback) -> None:
    slots = asyncio.Semaphore(parallel)
    eval_slots = asyncio.Semaphore(todo[0].config.run.eval_workers)
    async with EvaluatorPool(todo[0].config.run.eval_workers, todo[0].config.run.evaluator_recycle) as eval_pool:
        unavailable = await run_sharing_backend(
            backend, [_sample_one(store, backend, plan, slots, eval_slots, eval_pool, outcome, on_done, on_request)
                      for plan in todo])
    if unavailable is not None:
        outcome.errors.append(f"policy {todo[0].config.policy.name}: {unavailable}")
        outcome.interrupted = True


async def _sample_one(store: ProgramStore, backend: Policy, plan: SamplePlan, slots: asyncio.Semaphore,
                      eval_slots: asyncio.Semaphore, eval_pool: EvaluatorPool, outcome: SampleOutcome,
                      on_done: PlanCallback, on_request: PlanCallback) -> None:
    async with slots:
        config = plan.config
        run_id = plan.run_id
        if run_id is None:  # the problem loaded in plan_samples, the policy before this task started
            run_id = store.create_run(name=config.run.name, problem=config.run.problem, policy=config.policy.name,
                                      seed=config.run.seed, config_json=config.model_dump_json(),
                                      iterations_target=config.run.iterations)
        try:
            with store.driving(run_id):
                await _drive_sample(store, backend, plan, run_id, eval_slots, eval_pool, outcome, on_request)
        except (LeaseHeldError, LeaseLostError) as exc:  # another process samples this problem
            outcome.errors.append(f"{plan.problem.name}: {exc}")
            return
        if config.run.name in outcome.finished:
            on_done(plan, run_id)


async def _drive_sample(store: ProgramStore, backend: Policy, plan: SamplePlan, run_id: int,
                        eval_slots: asyncio.Semaphore, eval_pool: EvaluatorPool, outcome: SampleOutcome,
                        on_request: PlanCallback) -> None:
    """Sample one problem's run, whose lease this process holds, to its budget and write its final status."""
    store.set_run_status(run_id, "running")
    controller = Controller(plan.config, plan.problem, store, backend, run_id, eval_slots=eval_slots,
                            eval_pool=eval_pool, on_update=lambda stats: on_request(plan, stats.iterations_done))
    try:
        await controller.run()
    except SeedProgramError as exc:
        store.set_run_status(run_id, "failed")
        outcome.errors.append(f"{plan.problem.name}: {exc}")
        return
    except (PolicyUnavailable, asyncio.CancelledError):
        store.set_run_status(run_id, "interrupted")
        raise
    store.set_run_status(run_id, "finished")
    outcome.finished[plan.config.run.name] = run_id


def answer_outcomes(store: ProgramStore, run_id: int, answers_per_request: int,
                    requests: int) -> tuple[list[float], list[bool], int, int]:
    """Scalars and solved flags of the answers of the run's first `requests` requests (m slots each, in order),
    with the number of requests read and of those that failed."""
    programs = store.programs(run_id)
    seed_keys = {code_key(program.code) for program in programs if program.iteration == 0}
    by_code = {code_key(program.code): program for program in programs if program.iteration > 0}
    by_id = {program.id: program for program in programs}
    slots: list[tuple[bool, list[tuple[float, bool]]]] = []  # per request: failed?, its answers' (scalar, solved)
    call_slots: dict[int, list[tuple[float, bool]]] = {}
    for attempt in sorted(store.attempts(run_id), key=lambda a: (a.iteration, a.id)):
        if attempt.iteration < 1:
            continue
        if attempt.kind == "policy_call":
            call_slots[attempt.id] = []
            slots.append((False, call_slots[attempt.id]))
        elif attempt.kind == "policy_error":
            slots.append((True, []))
        elif attempt.call_id in call_slots:
            answers = call_slots[attempt.call_id]
            if attempt.kind == "child" and attempt.program_id in by_id:
                program = by_id[attempt.program_id]
                answers.append((program.scalar, program.solved))
            elif attempt.kind == "duplicate" and attempt.child_code is not None:
                key = code_key(attempt.child_code)
                earlier = by_code.get(key) if key not in seed_keys else None
                answers.append((earlier.scalar, earlier.solved) if earlier is not None else (0.0, False))
            elif attempt.reason != "no answer in the completion":  # that one stands for all m missing answers
                answers.append((0.0, False))
    chosen = slots[:requests]
    scalars: list[float] = []
    solved: list[bool] = []
    for _, request in chosen:
        padded = (request + [(0.0, False)] * answers_per_request)[:answers_per_request]
        scalars += [scalar for scalar, _ in padded]
        solved += [flag for _, flag in padded]
    return scalars, solved, len(chosen), sum(failed for failed, _ in chosen)


def problem_sample(store: ProgramStore, plan: SamplePlan, run_id: int, answers: int) -> ProblemSample:
    """The first `answers` answers of a finished sampling run (whole requests: ceil(answers / m) of them)."""
    m = plan.config.policy.answers
    scalars, solved, requests, failed = answer_outcomes(store, run_id, m, requests_for(answers, m))
    seeds = [program.scalar for program in store.programs(run_id) if program.iteration == 0]
    return ProblemSample(plan.config.run.problem, run_id, seeds[0] if seeds else 0.0, requests, failed,
                         tuple(scalars), tuple(solved))
