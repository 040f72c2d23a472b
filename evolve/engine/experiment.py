"""Experiments: policies x problems x seeds, each cell a run of N iterations in one store; run or resume them all.

An experiment file (`experiments/NAME.toml`) names the problems, the seeds, the iteration budget and one
`[[policies]]` table per policy (the keys of evolve.toml's `[policy]`), and optionally one `[[ensembles]]` table per
arm that runs several of those policies in each cell, chosen per iteration by weights or a bandit (evolve.toml's
`[ensemble]` keys plus `name` and `members`). `evolve experiment FILE` runs every
cell that is not finished: a cell already in the store continues from its last committed iteration with its
stored config, so running the same command again after a kill resumes the whole experiment. Policies are taken
one at a time: a policy's model is loaded (or its server started) once and shared by all its cells, which run
`parallel_cells` at a time and share `eval_workers` evaluation slots; an ensemble arm loads its members' models
again, together, after the policies' arms.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Coroutine, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Annotated, Any, Protocol

from pydantic import Field, ValidationError, model_validator

from evolve.config import (
    MAX_SEED,
    ConfigError,
    EnsembleSection,
    PolicySection,
    RunConfig,
    RunSection,
    SelectionConfig,
    StrictModel,
    VLLMEngineSettings,
    describe_error,
    read_toml,
)
from evolve.engine.controller import Controller
from evolve.engine.driving import cancelled_by_signals, resumed_config
from evolve.engine.offspring import SeedProgramError
from evolve.engine.run_stats import RunStats
from evolve.policies.base import Policy, PolicyUnavailable
from evolve.policies.factory import open_policies, open_policy
from evolve.problems.evaluation import resolve_objectives
from evolve.problems.evaluator_pool import EvaluatorPool
from evolve.problems.problem import Problem, load_problem, problem_key
from evolve.search.prompt_templates import load_template
from evolve.store.program_store import LeaseHeldError, LeaseLostError, ProgramStore, RunInfo

CellKey = tuple[str, str, int]  # (problem, policy, seed)


class CellDefaults(StrictModel):
    """Run settings every cell shares."""

    programs_dir: str = "programs"
    concurrency: int = Field(4, ge=1, le=256, description="policy requests in flight per cell")
    eval_workers: int = Field(2, ge=1, le=256, description="evaluations in parallel, all cells together")
    warm_evaluators: bool = Field(True, description="score on long-lived evaluator processes shared by the cells")
    evaluator_recycle: int = Field(100, ge=1, le=1_000_000, description="evaluations per warm evaluator process")
    stop_when_solved: bool = Field(False, description="a cell finishes as soon as a program solves its problem")
    target_score: float | None = Field(None, allow_inf_nan=False, description="a cell finishes as soon as a "
                                       "program's scalar reaches this")


class EnsembleArm(EnsembleSection):
    """An arm whose cells each run several of the experiment's policies (`members`, by name), the policy of each
    iteration chosen by `choice` (weights: the members' `weight`; bandit: the gain their children brought)."""

    name: str = Field(pattern=r"^[A-Za-z0-9][A-Za-z0-9_.+-]*$")
    members: tuple[str, ...] = Field(min_length=2, max_length=16, description="names of [[policies]] entries")


class ExperimentSpec(StrictModel):
    name: str = Field(pattern=r"^[A-Za-z0-9][A-Za-z0-9_.-]*$")
    description: str = ""
    db: str = Field(description="SQLite file or SQLAlchemy URL holding every cell's run")
    problems: tuple[str, ...] = Field(min_length=1, description="the test problems")
    train_problems: tuple[str, ...] = Field((), description="problems a policy may be trained on (`evolve train "
                                            "--experiment`); never any of the test problems")
    seeds: tuple[Annotated[int, Field(ge=0, le=MAX_SEED)], ...] = Field((0,), min_length=1)
    iterations: int = Field(ge=1, description="iterations per cell")
    answers_per_iteration: int = Field(0, ge=0, le=256, description="candidate answers per iteration for every "
                                       "policy (a policy with answers = a makes answers_per_iteration / a requests); "
                                       "0: the largest answers of the policies")
    parallel_cells: int = Field(2, ge=1, le=256, description="cells of one policy running at once")
    run: CellDefaults = CellDefaults()
    selection: SelectionConfig = SelectionConfig()
    policies: tuple[PolicySection, ...] = Field(min_length=1)
    ensembles: tuple[EnsembleArm, ...] = Field((), max_length=16, description="arms running several policies")

    @model_validator(mode="after")
    def _names_are_unique(self) -> ExperimentSpec:
        names = "policies' and ensembles' names" if self.ensembles else "policies' names"
        for what, values in ((names, self.arm_names()), ("problems", self.problems),
                             ("seeds", self.seeds)):
            repeated = sorted({str(v) for v in values if list(values).count(v) > 1})
            if repeated:
                raise ValueError(f"{what} must be distinct; repeated: {', '.join(repeated)}")
        return self

    @model_validator(mode="after")
    def _members_are_policies(self) -> ExperimentSpec:
        names = [policy.name for policy in self.policies]
        for arm in self.ensembles:
            unknown = [member for member in arm.members if member not in names]
            if unknown:
                raise ValueError(f"ensemble '{arm.name}': members must name [[policies]] entries; unknown: "
                                 f"{', '.join(unknown)} (policies: {', '.join(names)})")
            if len(set(arm.members)) != len(arm.members):
                raise ValueError(f"ensemble '{arm.name}': members must be distinct: {', '.join(arm.members)}")
        return self

    @model_validator(mode="after")
    def _train_and_test_are_disjoint(self) -> ExperimentSpec:
        tests = {problem_key(name) for name in self.problems}
        shared = sorted({name for name in self.train_problems if problem_key(name) in tests})
        if shared:
            raise ValueError(f"train_problems and problems (the test problems) must not overlap; in both: "
                             f"{', '.join(shared)}")
        return self

    @model_validator(mode="after")
    def _answers_divide_the_iteration(self) -> ExperimentSpec:
        per_iteration = self.answers_per_iteration_of_cells()
        for index, policy in enumerate(self.policies):
            if per_iteration % policy.answers:
                raise ValueError(f"answers_per_iteration = {per_iteration} is not a multiple of policies[{index}]."
                                 f"answers = {policy.answers} (policy '{policy.name}'); every policy must get the "
                                 "same candidate answers per iteration")
        return self

    def answers_per_iteration_of_cells(self) -> int:
        """What every cell gets: answers_per_iteration, or the largest policy's answers when it is 0."""
        return self.answers_per_iteration or max(policy.answers for policy in self.policies)

    def arm_names(self) -> tuple[str, ...]:
        """Every arm: the policies, then the ensembles."""
        return (*(policy.name for policy in self.policies), *(arm.name for arm in self.ensembles))

    def cells(self) -> list[CellKey]:
        """Every cell, arm by arm, then seed by seed, so an interrupted experiment has whole seeds."""
        return [(problem, arm, seed) for arm in self.arm_names() for seed in self.seeds for problem in self.problems]

    def policy(self, name: str) -> PolicySection:
        return next(policy for policy in self.policies if policy.name == name)

    def ensemble(self, name: str) -> EnsembleArm | None:
        """The ensemble arm `name`; None when `name` is a policy's arm."""
        return next((arm for arm in self.ensembles if arm.name == name), None)

    def arm_policies(self, name: str) -> tuple[PolicySection, ...]:
        """The policies a cell of arm `name` runs: its members, or the one policy."""
        arm = self.ensemble(name)
        return tuple(self.policy(member) for member in arm.members) if arm is not None else (self.policy(name),)

    def cell_config(self, problem: str, policy: str, seed: int) -> RunConfig:
        run = RunSection(problem=problem, iterations=self.iterations, seed=seed, db=self.db,
                         programs_dir=self.run.programs_dir, concurrency=self.run.concurrency,
                         eval_workers=self.run.eval_workers, warm_evaluators=self.run.warm_evaluators,
                         evaluator_recycle=self.run.evaluator_recycle, name=f"{self.name}/{problem}/{policy}/s{seed}",
                         answers_per_iteration=self.answers_per_iteration_of_cells(),
                         stop_when_solved=self.run.stop_when_solved, target_score=self.run.target_score)
        arm = self.ensemble(policy)
        if arm is None:
            return RunConfig(run=run, policy=self.policy(policy), selection=self.selection)
        return RunConfig(run=run, policies=self.arm_policies(policy), selection=self.selection,
                         ensemble=EnsembleSection(choice=arm.choice, bandit=arm.bandit, exploration=arm.exploration))


def load_experiment(path: str | Path, db: str | None = None, overrides: Mapping[str, Any] | None = None,
                    labels: Mapping[str, str] | None = None) -> ExperimentSpec:
    """The experiment file, validated; name defaults to the file's stem and db to NAME.db beside the file.
    `overrides` set the file's keys first (see experiment_overrides); a mistake in one names its label (how the
    user wrote it, e.g. '--set iterations=0'), a mistake elsewhere the file."""
    from evolve.engine.experiment_overrides import apply_overrides
    from evolve.toml_files import blamed_source

    path = Path(path)
    data = read_toml(path)
    blame = apply_overrides(data, overrides or {}, labels)
    data.setdefault("name", path.stem)
    data.setdefault("db", str(path.with_name(f"{data['name']}.db")))
    if db is not None:
        data["db"] = db
    try:
        return ExperimentSpec.model_validate(data)
    except ValidationError as exc:
        first = exc.errors()[0]
        raise ConfigError(describe_error(first, blamed_source(first, path, ExperimentSpec, blame),
                                         ExperimentSpec)) from None


@dataclass
class CellProgress:
    key: CellKey
    run_id: int | None = None
    status: str = "waiting"
    stats: RunStats | None = None
    detail: str = ""


@dataclass
class ExperimentOutcome:
    cells: dict[CellKey, CellProgress]
    errors: list[str] = field(default_factory=list)
    interrupted: bool = False

    @property
    def finished(self) -> bool:
        return not self.interrupted and all(cell.status == "finished" for cell in self.cells.values())


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
            finally:
                for task in tasks:
                    task.cancel()
                await asyncio.gather(*tasks, return_exceptions=True)
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


class ExperimentRunner:
    """Runs the unfinished cells of one experiment; `on_change` is called whenever a cell's progress moves. With an
    `executor`, the cells run where it puts them (each still one run in the store, driven under its lease)."""

    def __init__(self, spec: ExperimentSpec, on_change: Callable[[CellProgress], None] | None = None,
                 executor: CellExecutor | None = None) -> None:
        self.spec = spec
        self.on_change = on_change or (lambda cell: None)
        self.executor = executor
        self.store = ProgramStore(spec.db)
        self.cells = {key: CellProgress(key) for key in spec.cells()}

    def run(self) -> ExperimentOutcome:
        if self.executor is not None and self.spec.ensembles:
            raise ConfigError(f"experiment {self.spec.name}: [[ensembles]] arms run in this process only; run it "
                              "without --cluster, or move the ensembles to an experiment of their own")
        for problem in self.spec.problems:  # a missing or broken problem folder stops us before any model loads
            load_problem(problem, Path(self.spec.run.programs_dir))
        refuse_policies_trained_on_tests(self.spec)  # before any model loads, too
        for policy in self.spec.policies:
            load_template(policy.template)
        self.store.save_experiment(self.spec.name, self.spec.model_dump_json())
        self.load_stored_cells()
        outcome = ExperimentOutcome(self.cells)
        if self.executor is not None:
            self.executor.run_cells(self, [cell for cell in self.cells.values() if cell.status != "finished"], outcome)
            return outcome
        for arm in self.spec.arm_names():
            todo = [cell for key, cell in self.cells.items() if key[1] == arm and cell.status != "finished"]
            if todo and not self.run_policy_cells(self.spec.arm_policies(arm), todo, outcome):
                break
        return outcome

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
        cell_slots = asyncio.Semaphore(self.spec.parallel_cells)
        eval_slots = asyncio.Semaphore(self.spec.run.eval_workers)
        async with EvaluatorPool(self.spec.run.eval_workers, self.spec.run.evaluator_recycle) as eval_pool:
            unavailable = await run_sharing_backend(
                backend, [self._run_cell(backend, cell, cell_slots, eval_slots, eval_pool) for cell in todo])
        if unavailable is not None:
            outcome.errors.append(f"policy {todo[0].key[1]}: {unavailable}")
        for cell in todo:
            if cell.status == "failed":
                outcome.errors.append(f"{'/'.join(map(str, cell.key))}: {cell.detail}")

    async def _run_cell(self, backend: Policy | Mapping[str, Policy], cell: CellProgress, cell_slots: asyncio.Semaphore,
                        eval_slots: asyncio.Semaphore, eval_pool: EvaluatorPool) -> None:
        cell.detail = "waiting for a cell slot (parallel_cells)" if cell_slots.locked() else "starting"
        self.on_change(cell)
        async with cell_slots:
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

    async def _drive_cell(self, backend: Policy | Mapping[str, Policy], cell: CellProgress, run_id: int,
                          config: RunConfig, problem: Problem, eval_slots: asyncio.Semaphore,
                          eval_pool: EvaluatorPool) -> None:
        """Drive a cell whose lease this process holds and write its final status."""
        self.store.set_run_status(run_id, "running")
        cell.status, cell.detail = "running", ""

        def moved(stats: RunStats) -> None:
            cell.stats = stats
            self.on_change(cell)

        controller = Controller(config, problem, self.store, backend, run_id, on_update=moved,
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
        except PolicyUnavailable:
            self._set(cell, "interrupted", "the policy became unavailable")
            raise
        except asyncio.CancelledError:
            self._set(cell, "interrupted", "")
            raise
        self._set(cell, "finished", f"stopped early: {cell.stats.stopped}" if cell.stats.stopped else "")

    def _set(self, cell: CellProgress, status: str, detail: str) -> None:
        cell.status, cell.detail = status, detail
        if cell.run_id is not None:
            self.store.set_run_status(cell.run_id, status)
        self.on_change(cell)

    def _mark_stopped(self, cells: list[CellProgress], status: str) -> None:
        for cell in cells:
            if cell.status == "running":
                self._set(cell, status, "")


def refuse_policies_trained_on_tests(spec: ExperimentSpec) -> None:
    """ConfigError naming the policy, its checkpoint and the problems when a policy's checkpoint (its model folder
    or LoRA adapter, as `evolve train` wrote it) was trained on any of the experiment's test problems."""
    from evolve.rl.checkpoints import trained_on

    for policy in spec.policies:
        for checkpoint in (policy.model, policy.lora if isinstance(policy, VLLMEngineSettings) else ""):
            found = trained_on(checkpoint, spec.problems) if checkpoint else None
            if found is not None:
                path, overlap = found
                raise ConfigError(f"policy '{policy.name}': its checkpoint {checkpoint} was trained on test problems "
                                  f"of experiment {spec.name}: {', '.join(overlap)} (see {path}); evaluate it on "
                                  "problems it was not trained on")


def _resting_status(info: RunInfo) -> str:
    """A stored run's state as seen from a new process: 'running' there means its process was killed."""
    return "interrupted" if info.status == "running" else info.status
