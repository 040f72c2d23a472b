"""Experiments: policies x problems x seeds, each cell a run of N iterations in one store; run or resume them all.

An experiment file (`experiments/NAME.toml`) names the problems, the seeds, the iteration budget and one
`[[policies]]` table per policy (the keys of evolve.toml's `[policy]`), and optionally one `[[ensembles]]` table per
arm that runs several of those policies in each cell, chosen per iteration by weights or a bandit (evolve.toml's
`[ensemble]` keys plus `name` and `members`). `evolve experiment FILE` runs every
cell that is not finished: a cell already in the store continues from its last committed iteration with its
stored config, so running the same command again after a kill resumes the whole experiment. Arms are taken one at
a time, in the batches `order` makes (an arm's every cell, or its cells of one seed): a policy's model is loaded
(or its server started) once a batch and shared by the batch's cells, which run `parallel_cells` at a time (those
expected to run longest first: engine/cell_order.py) and share `eval_workers` evaluation slots; an ensemble arm
loads its members' models again, together, after the policies' arms (of its seed, with order = "seeds").
"""

from __future__ import annotations

import asyncio
from collections.abc import Coroutine, Iterable, Mapping, Sequence
from functools import cached_property
from itertools import groupby
from pathlib import Path
from statistics import fmean
from typing import Any, Protocol

from evolve.config import ConfigError, RunConfig
from evolve.engine.cell_order import (
    CellSlots,
    cell_spent,
    iterations_by_problem,
    longest_first,
    spent_by_problem,
)
from evolve.engine.cells import CellProgress, ExperimentOutcome
from evolve.engine.controller import Controller
from evolve.engine.driving import end_tasks, resumed_config
from evolve.engine.events import (
    CellChanged,
    CellEnded,
    CellRunEvent,
    CellStarted,
    ExperimentEnded,
    ExperimentPlanned,
    Observer,
    RunEvent,
    ignore,
)
from evolve.engine.experiment_pieces import piece_numbers, piece_problems, piece_view, stored_designs
from evolve.engine.experiment_spec import (
    CellKey,
    ExperimentSpec,
    design_changes,
    refuse_policies_trained_on_tests,
)
from evolve.engine.offspring import SeedProgramError
from evolve.engine.run_driver import other_objectives
from evolve.engine.run_setup import check_features
from evolve.policies.base import Policy, PolicyUnavailable
from evolve.policies.factory import open_policies, open_policy
from evolve.policy_config import PolicySection
from evolve.problems.evaluation import resolve_objectives
from evolve.problems.evaluator_pool import EvaluatorPool
from evolve.problems.problem import Problem, load_problem
from evolve.search.prompt_templates import load_template
from evolve.stop_signals import cancelled_by_signals
from evolve.store.program_store import LeaseHeldError, LeaseLostError, ProgramStore, RunInfo


async def run_sharing_backend(backend: Policy | Mapping[str, Policy],
                              runs: Sequence[Coroutine[Any, Any, None]]) -> PolicyUnavailable | None:
    """Run `runs` (one per cell or sampled problem) as tasks sharing one policy backend (or an ensemble's, by
    name), until all end.

    SIGINT and SIGTERM cancel the calling task, so a Ctrl-C ends every run as an interruption. A PolicyUnavailable
    in any run stops them all and is returned. In every case the tasks are cancelled and awaited, the signal
    handlers removed and the backend closed."""
    tasks = [asyncio.create_task(run) for run in runs]
    try:
        with cancelled_by_signals():
            try:
                await asyncio.gather(*tasks)
            finally:  # a cancelled gather ends with its first cancelled task: the others are still ending
                await end_tasks(tasks)
    except PolicyUnavailable as exc:
        return exc
    finally:
        for opened in _backends(backend):
            await opened.close()
    return None


def _backends(backend: Policy | Mapping[str, Policy]) -> Iterable[Policy]:
    return backend.values() if isinstance(backend, Mapping) else (backend,)


class CellExecutor(Protocol):
    """Runs an experiment's unfinished cells somewhere other than this process (evolve/cluster/: on Ray)."""

    def run_cells(self, runner: ExperimentRunner, todo: list[CellProgress], outcome: ExperimentOutcome) -> None:
        """Run every cell of `todo` to a resting status, updating them (and `outcome`) and calling runner.on_change."""


RESTING = ("finished", "failed", "interrupted")


class ExperimentRunner:
    """Runs the unfinished cells of one experiment, reporting through `on_event` (evolve.engine.events: the cells
    planned, each cell started, its run's events, each cell ended, the experiment ended). With an `executor`, the
    cells run where it puts them (each still one run in the store, driven under its lease). An experiment of several
    pieces runs one piece at a time (`run_pieces`): `spec` a piece's view, `design` the whole experiment, which the
    piece's store keeps as the design it ran with."""

    def __init__(self, spec: ExperimentSpec, on_event: Observer | None = None,
                 executor: CellExecutor | None = None, design: ExperimentSpec | None = None) -> None:
        if spec.pieces > 1:
            raise ConfigError(f"experiment {spec.name} has {spec.pieces} pieces: run them with run_pieces (each "
                              "piece's cells go to its own store)")
        self.spec = spec
        self.design = design or spec
        self.on_event: Observer = on_event or ignore
        self.executor = executor
        self._spent: dict[str, list[int]] = {}  # per problem, the iterations its finished cells ran (cell_order)
        self.cells = {key: CellProgress(key) for key in spec.cells()}
        self._reported: dict[CellKey, str] = {}  # each cell's status as the events last told it

    def on_change(self, cell: CellProgress, cause: RunEvent | None = None) -> None:
        """Tell the observer that `cell` moved: CellStarted when it starts running, then CellRunEvent for each event
        of its run (`cause`), CellEnded when it comes to rest, CellChanged for a new note in between."""
        before = self._reported.get(cell.key, "waiting")
        self._reported[cell.key] = cell.status
        if cell.status == "running" and before != "running":
            self.on_event(CellStarted(cell))
        if cause is not None:
            self.on_event(CellRunEvent(cell, cause))
        elif cell.status in RESTING and before not in RESTING:
            self.on_event(CellEnded(cell))
        elif not (cell.status == "running" and before != "running"):
            self.on_event(CellChanged(cell))

    @cached_property
    def store(self) -> ProgramStore:
        """The experiment's store, made (or opened) on first use: inside run(), so a Ctrl-C while it is being made
        is an interruption like any other."""
        return ProgramStore(self.spec.db)

    def run(self) -> ExperimentOutcome:
        """Every unfinished cell to a resting status. A Ctrl-C at any point, before the store exists or before any
        cell started included, ends it as an interruption (outcome.interrupted, the cells left as they were), from
        which the same experiment resumes."""
        if self.executor is not None and self.spec.ensembles:
            raise ConfigError(f"experiment {self.spec.name}: [[ensembles]] arms run in this process only; run it "
                              "without --cluster, or move the ensembles to an experiment of their own")
        outcome = ExperimentOutcome(self.cells)
        try:
            self._run(outcome)
        except KeyboardInterrupt:
            outcome.interrupted = True
            self._mark_stopped(list(self.cells.values()), "interrupted")
        finally:
            self.on_event(ExperimentEnded(self.spec.name, outcome))
        return outcome

    def _run(self, outcome: ExperimentOutcome) -> None:
        check_problems(self.spec, self.spec.problems)
        refuse_policies_trained_on_tests(self.design)  # before any model loads, too
        for policy in self.spec.policies:
            load_template(policy.template)
        refusal = design_refusal(self.design, self.spec.db, self.store.experiment_spec(self.spec.name))
        if refusal:  # the store's cells ran with the design it keeps: another one would not fit them
            raise ConfigError(refusal)
        self.store.save_experiment(self.spec.name, self.design.model_dump_json())
        self.load_stored_cells()
        self._reported = {key: cell.status for key, cell in self.cells.items()}
        self.on_event(ExperimentPlanned(self.spec.name, tuple(self.cells.values()), self.spec.parallel_cells))
        if self.executor is not None:
            self.executor.run_cells(self, [cell for cell in self.cells.values() if cell.status != "finished"], outcome)
            return
        for arm, batch in groupby(self.cells.values(), key=lambda cell: cell.key[1]):  # spec.order's batches
            todo = [cell for cell in batch if cell.status != "finished"]
            if not todo:
                continue
            todo = longest_first(todo, iterations_by_problem(self.store, self.spec.name))
            if not self.run_policy_cells(self.spec.arm_policies(arm), todo, outcome):
                break

    def load_stored_cells(self) -> None:
        """Give every cell already in the store its run id and resting status."""
        runs = {cell.run_id: cell for cell in self.store.experiment_cells(self.spec.name)}
        for info in self.store.list_runs():
            if info.id in runs:
                cell = runs[info.id]
                progress = self.cells.get((cell.problem, cell.policy, cell.seed))
                if progress is not None:
                    progress.run_id, progress.status = info.id, _resting_status(info)

    def run_policy_cells(self, policy: PolicySection | Sequence[PolicySection], todo: list[CellProgress],
                         outcome: ExperimentOutcome) -> bool:
        """Run `todo` (cells of `policy`, or of an ensemble arm of those policies) in this process sharing one
        backend per policy; False when interrupted."""
        sections = (policy,) if not isinstance(policy, Sequence) else tuple(policy)
        for cell in todo:  # a sign of life while the model loads (minutes for a large one)
            cell.detail = f"loading {', '.join(section.name for section in sections)}"
            self.on_change(cell)
        concurrency = self.spec.run.concurrency * self.spec.parallel_cells
        try:
            if len(sections) == 1:
                with open_policy(sections[0], self.spec.seeds[0], concurrency) as backend:
                    asyncio.run(self._run_policy(backend, todo, outcome))
            else:
                with open_policies(sections, self.spec.seeds[0], concurrency) as backends:
                    asyncio.run(self._run_policy(backends, todo, outcome))
        except (KeyboardInterrupt, asyncio.CancelledError):
            outcome.interrupted = True
        if outcome.interrupted:
            self._mark_stopped(todo, "interrupted")
            return False
        return True

    async def _run_policy(self, backend: Policy | Mapping[str, Policy], todo: list[CellProgress],
                          outcome: ExperimentOutcome) -> None:
        spent = spent_by_problem(self.store, self.spec.name)  # grows as this batch's cells finish (_run_cell)
        cell_slots = CellSlots(self.spec.parallel_cells, lambda waiting: longest_first(
            waiting, {problem: fmean(iterations) for problem, iterations in spent.items()}))
        self._spent = spent
        eval_slots = asyncio.Semaphore(self.spec.run.eval_workers)
        async with EvaluatorPool(self.spec.run.eval_workers, self.spec.run.evaluator_recycle) as eval_pool:
            unavailable = await run_sharing_backend(
                backend, [self._run_cell(backend, cell, cell_slots, eval_slots, eval_pool) for cell in todo])
        if unavailable is not None:
            outcome.errors.append(f"policy {todo[0].key[1]}: {unavailable}")
        for cell in todo:
            if cell.status == "failed":
                outcome.errors.append(f"{'/'.join(map(str, cell.key))}: {cell.detail}")

    async def _run_cell(self, backend: Policy | Mapping[str, Policy], cell: CellProgress, cell_slots: CellSlots,
                        eval_slots: asyncio.Semaphore, eval_pool: EvaluatorPool) -> None:
        cell.detail = "waiting for a cell slot (parallel_cells)" if cell_slots.locked() else "starting"
        self.on_change(cell)
        async with cell_slots.slot(cell):
            problem_name, policy_name, seed = cell.key
            if cell.run_id is None:
                config = self.spec.cell_config(problem_name, policy_name, seed)
            else:
                config = resumed_config(self.store, cell.run_id, self.spec.db)
            stored = {section.name for section in config.ensemble_policies()}
            if isinstance(backend, Mapping) and not stored <= set(backend):  # the file's members changed since
                self._set(cell, "failed", f"its stored run uses policies {', '.join(sorted(stored))}; ensemble "
                                          f"'{policy_name}' now has {', '.join(backend)}: restore its members, or "
                                          "give the changed ensemble a new name")
                return
            problem = await resolve_objectives(load_problem(problem_name, Path(config.run.programs_dir)))
            if cell.run_id is not None and (refusal := other_objectives(self.store, cell.run_id, problem)):
                self._set(cell, "failed", f"{refusal}; restore the problem folder, or give the changed problem a "
                                          "new name (or the experiment a new db)")
                return
            if cell.run_id is None:  # written only now that its problem (and the policy) loaded
                cell.run_id = self.store.create_run(
                    name=config.run.name, problem=problem_name, policy=policy_name, seed=seed,
                    config_json=config.model_dump_json(), iterations_target=config.run.iterations,
                    experiment=self.spec.name)
            try:
                with self.store.driving(cell.run_id):
                    await self._drive_cell(backend, cell, cell.run_id, config, problem, eval_slots, eval_pool)
            except LeaseHeldError as exc:  # another live process drives this cell: its status is not ours
                cell.status, cell.detail = "failed", str(exc)
                self.on_change(cell)
            if cell.status == "finished":  # what it took tells the slot it frees which waiting cell to start
                self._spent[problem_name].append(cell_spent(self.store, cell.run_id, config.run.iterations))

    async def _drive_cell(self, backend: Policy | Mapping[str, Policy], cell: CellProgress, run_id: int,
                          config: RunConfig, problem: Problem, eval_slots: asyncio.Semaphore,
                          eval_pool: EvaluatorPool) -> None:
        """Drive a cell whose lease this process holds and write its final status."""
        self.store.set_run_status(run_id, "running")
        cell.status, cell.detail = "running", ""

        def moved(event: RunEvent) -> None:
            cell.stats = getattr(event, "stats", cell.stats)
            self.on_change(cell, event)

        controller = Controller(config, problem, self.store, backend, run_id, on_event=moved,
                                eval_slots=eval_slots, eval_pool=eval_pool)
        try:
            cell.stats = await controller.run()
        except LeaseLostError as exc:  # another process took the cell over: leave its status alone
            cell.status, cell.detail = "failed", str(exc)
            self.on_change(cell)
            return
        except SeedProgramError as exc:
            self._set(cell, "failed", str(exc))
            return
        except PolicyUnavailable as exc:
            self._set(cell, "interrupted", f"the policy became unavailable: {exc}")
            raise
        except asyncio.CancelledError:
            self._set(cell, "interrupted", "")
            raise
        self._set(cell, "finished", f"stopped early: {cell.stats.stopped}" if cell.stats.stopped else "")

    def _set(self, cell: CellProgress, status: str, detail: str) -> None:
        cell.status, cell.detail = status, detail
        if cell.run_id is not None:
            self.store.set_run_status(cell.run_id, status, detail if detail and status != "finished" else None)
        self.on_change(cell)

    def _mark_stopped(self, cells: list[CellProgress], status: str) -> None:
        for cell in cells:
            if cell.status == "running":
                self._set(cell, status, "")


def _resting_status(info: RunInfo) -> str:
    """A stored run's state as seen from a new process: 'running' there means its process was killed."""
    return "interrupted" if info.status == "running" else info.status


def check_problems(spec: ExperimentSpec, problems: Iterable[str]) -> None:
    """ProblemError (or ConfigError) for a missing or broken problem folder, or one without a feature an arm's
    MAP-Elites grid needs: before any model loads."""
    features = {feature for arm in spec.arm_names()  # an arm's own [arm_selection] grid included
                for feature in spec.selection_of(arm).map_elites.features}
    for problem in problems:
        check_features(tuple(sorted(features)), load_problem(problem, Path(spec.run.programs_dir)))


def design_refusal(spec: ExperimentSpec, db: str, stored: str | None) -> str:
    """Why store `db`, keeping design `stored` (None: none yet), cannot run design `spec`: '' when they are one
    design (design_changes compares every setting but the store, the record of the --set flags and the
    execution-only ones such as parallel_cells), else one line naming each setting that differs. An experiment runs
    with one design (the same file and --set): its stored cells keep the settings they started with, so another
    design would mix them under one name."""
    if stored is None or stored == spec.model_dump_json():
        return ""
    try:
        changes = design_changes(ExperimentSpec.model_validate_json(stored), spec)
    except ValueError as exc:
        changes = [f"a design this version cannot read ({str(exc).splitlines()[0]})"]
    if not changes:
        return ""
    every = "every piece" if spec.pieces > 1 else "it"
    return (f"experiment {spec.name}: {db} ran with another design (ran -> now: {'; '.join(changes)}); run {every} "
            "with the same file and --set, or give a new design its own name or db")


def refuse_another_design(spec: ExperimentSpec) -> None:
    """ConfigError when a begun piece's store keeps another design than `spec`: the pieces of one experiment run with
    one design (the same file and --set), or the split and the cells would not fit together. (A store of one piece
    is compared as the runner opens it: ExperimentRunner._run.)"""
    for db, stored in stored_designs(spec):
        refusal = design_refusal(spec, db, stored)
        if refusal:
            raise ConfigError(refusal)


def run_pieces(spec: ExperimentSpec, pieces: Iterable[int] | None = None, on_event: Observer | None = None,
               executor: CellExecutor | None = None) -> ExperimentOutcome:
    """Run (or resume) the experiment's pieces in order (`pieces`: those numbers only), each piece's cells into its
    own store; a piece left with failed cells does not stop the next, an interruption does. One piece: the
    experiment itself. Every piece's problems are checked, and the begun pieces' designs compared with `spec`,
    before the first piece starts."""
    numbers = list(piece_numbers(spec) if pieces is None else pieces)
    if spec.pieces > 1:
        check_problems(spec, [problem for number in numbers for problem in piece_problems(spec, number)])
        refuse_another_design(spec)
    outcome = ExperimentOutcome({})
    for number in numbers:
        view = piece_view(spec, number)
        runner = ExperimentRunner(view, on_event=on_event, executor=executor, design=spec if spec.pieces > 1 else None)
        part = runner.run()
        if "store" in runner.__dict__:  # made: check-point its SQLite file, so a finished piece is whole on disk
            runner.store.close()
        outcome.cells.update(part.cells)
        outcome.errors += part.errors
        if part.interrupted:
            outcome.interrupted = True
            break
    return outcome

