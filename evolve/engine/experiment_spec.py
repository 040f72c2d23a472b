"""An experiment file as the engine holds it: the cells' shared settings, the policy and ensemble arms, the
validation rules (unique names, members among the policies, held-out problems, answers per iteration), and how a
file is read (`load_experiment`) and a cell's RunConfig built. evolve/engine/experiment.py runs the cells."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Annotated, Any, Literal

from pydantic import Field, StrictInt, ValidationError, field_validator, model_validator

from evolve.config import (
    MAX_SEED,
    ConfigError,
    EnsembleSection,
    RunConfig,
    RunSection,
    SelectionConfig,
    StrictModel,
    describe_error,
    kept_store,
    read_toml,
)
from evolve.policy_config import PolicySection, VLLMEngineSettings
from evolve.problems.problem import problem_key
from evolve.seeds import cell_seed

CellKey = tuple[str, str, int]  # (problem, policy, seed)
CellOrder = Literal["arms", "seeds"]
CELL_ORDER = ("the order the cells run in. 'arms': arm by arm, each arm's seeds one after another (one model load "
              "per arm); 'seeds': seed by seed, every arm's cells of that seed in turn (a model load per arm and "
              "seed), so an experiment stopped at any point has compared its arms on the same whole seeds (with "
              "pieces, seed by seed within each piece: the same whole (piece, seed) parts)")
OVERRIDES_KEY = "overrides"  # ExperimentSpec's record of the --set flags, never read from a file


class CellDefaults(StrictModel):
    """Run settings every cell shares."""

    programs_dir: str = Field("programs", description="where the problems are looked up by name (a relative path: from "
                              "the working directory)")
    concurrency: StrictInt = Field(4, ge=1, le=256, description="policy requests in flight per cell")
    eval_workers: StrictInt = Field(2, ge=1, le=256, description="evaluations in parallel, all cells together")
    warm_evaluators: bool = Field(True, description="score on long-lived evaluator processes shared by the cells")
    evaluator_recycle: StrictInt = Field(100, ge=1, le=1_000_000, description="evaluations per warm evaluator process")
    stop_when_solved: bool = Field(False, description="a cell finishes as soon as a program solves its problem")
    target_score: float | None = Field(None, allow_inf_nan=False, description="a cell finishes as soon as a "
                                       "program's scalar reaches this")


class EnsembleArm(EnsembleSection):
    """An arm whose cells each run several of the experiment's policies (`members`, by name), the policy of each
    iteration chosen by `choice` (weights: the members' `weight`; bandit: the gain their children brought)."""

    name: str = Field(pattern=r"^[A-Za-z0-9][A-Za-z0-9_.+-]*$", description="the arm's name in reports")
    members: tuple[str, ...] = Field(min_length=2, max_length=16, description="names of [[policies]] entries")


class ArmBudget(StrictModel):
    """An arm's own split of the experiment's answers per cell: fewer answers per iteration over more iterations, or
    the reverse (an ablation of answers per iteration at equal answers)."""

    answers_per_iteration: StrictInt = Field(ge=1, le=256, description="candidate answers per iteration of this arm")
    iterations: StrictInt = Field(ge=1, description="iterations per cell of this arm: answers_per_iteration x "
                                  "iterations must equal the experiment's")


PIECE_FIELD = "{piece}"  # in an experiment's db: where each piece's number goes (01, 02, ...)


class ExperimentSpec(StrictModel):
    name: str = Field(pattern=r"^[A-Za-z0-9][A-Za-z0-9_.-]*$", description="the experiment's name in the "
                      "store and reports; default: the file's stem")
    description: str = Field("", description="a line for reports: what the experiment asks")
    db: str = Field(description="SQLite file or SQLAlchemy URL holding every cell's run")
    problems: tuple[str, ...] = Field(min_length=1, description="the test problems")
    train_problems: tuple[str, ...] = Field((), description="problems a policy may be trained on (`evolve train "
                                            "--experiment`); never any of the test problems")
    seeds: tuple[Annotated[StrictInt, Field(ge=0, le=MAX_SEED)], ...] = Field(
        (0,), min_length=1, description="seed indices: one cell per problem, policy and seed; a cell's streams "
        "derive from (problem, seed), the same for every policy")
    arm_seeds: dict[str, tuple[StrictInt, ...]] = Field(
        default_factory=dict, description="the seeds of an arm that runs only some of `seeds`, by its name ({arm = "
        "[seed, ...]}); every other arm runs every seed. A study's checkpoints of one algorithm share its seeds "
        "this way ([evolution] checkpoint_seeds = \"split\")")
    arm_selection: dict[str, dict[str, Any]] = Field(
        default_factory=dict, description="[arm_selection]: keys of [selection] an arm runs with instead of the "
        "experiment's, by its name (an ablation of the search at equal answers: {lexicase = {strategy = "
        "\"lexicase\"}}); strategy = \"seed\" makes the arm plain sampling: every parent the seed program, no "
        "inspirations, nothing of the run's history in the prompt (as `evolve sample`)")
    arm_budget: dict[str, ArmBudget] = Field(
        default_factory=dict, description="[arm_budget]: an arm's own answers per iteration and iterations, by its "
        "name, their product the experiment's answers per cell ({one_answer = {answers_per_iteration = 1, "
        "iterations = 300}} beside 3 x 100); every other arm runs answers_per_iteration x iterations")
    iterations: StrictInt = Field(ge=1, description="iterations per cell")
    answers_per_iteration: StrictInt = Field(0, ge=0, le=256, description="candidate answers per iteration for every "
                                       "policy (a policy with answers = a makes answers_per_iteration / a requests); "
                                       "0: the largest answers of the policies")
    parallel_cells: StrictInt = Field(2, ge=1, le=256, description="cells of one policy running at once")
    pieces: StrictInt = Field(1, ge=1, le=999, description="the problems cut into this many consecutive groups, "
                              "each group's cells in a SQLite file of its own (db names it with {piece}: "
                              "NAME_{piece}.db by default), run one after another; a long experiment is then "
                              "committed piece by piece, a finished piece's file never changing again")
    order: CellOrder = Field("arms", description=CELL_ORDER)
    run: CellDefaults = CellDefaults()
    selection: SelectionConfig = SelectionConfig()
    policies: tuple[PolicySection, ...] = Field(min_length=1, description="[[policies]]: the arms, each a [policy] "
                                                "with its own name")
    ensembles: tuple[EnsembleArm, ...] = Field((), max_length=16, description="arms running several policies")
    allow_unverified_checkpoint: bool = Field(False, description="use a trained checkpoint whose provenance "
                                              "(evolve_training.json in its folder) is missing or does not match "
                                              "its weights; the held-out guard cannot check such a one")
    overrides: dict[str, Any] = Field(default_factory=dict, description="not a key of the file: the --set KEY=VALUE "
                                      "this design was read with, kept in the store with it (`evolve report` reads "
                                      "the design an experiment ran with, and tells a changed file from --set)")

    @field_validator("db")
    @classmethod
    def _db_is_kept(cls, db: str) -> str:
        """A store that outlives the process (as run.db): every cell's run would be lost with an in-memory one."""
        return kept_store(db, "NAME.db")

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
    def _pieces_fit_the_problems_and_the_store(self) -> ExperimentSpec:
        named = PIECE_FIELD in self.db
        if self.pieces > len(self.problems):
            raise ValueError(f"pieces = {self.pieces}: more pieces than problems ({len(self.problems)})")
        if self.pieces > 1 and (not named or "://" in self.db):
            raise ValueError(f"pieces = {self.pieces} needs db to be a SQLite file whose name holds {PIECE_FIELD} "
                             f"(each piece's store, e.g. \"{self.name}_{PIECE_FIELD}.db\"); db is {self.db!r}")
        if self.pieces == 1 and named:
            raise ValueError(f"db {self.db!r} names {PIECE_FIELD}, which only an experiment of several pieces has "
                             "(pieces = N)")
        return self

    @model_validator(mode="after")
    def _arm_seeds_are_some_of_the_seeds(self) -> ExperimentSpec:
        arms = self.arm_names()
        for arm, seeds in self.arm_seeds.items():
            if arm not in arms:
                raise ValueError(f"arm_seeds: '{arm}' is no arm of the experiment (arms: {', '.join(arms)})")
            unknown = [str(seed) for seed in seeds if seed not in self.seeds]
            if not seeds or unknown or len(set(seeds)) != len(seeds):
                raise ValueError(f"arm_seeds.{arm} = {list(seeds)} must be distinct seeds among seeds = "
                                 f"{list(self.seeds)}, at least one" + (f"; not among them: {', '.join(unknown)}"
                                                                        if unknown else ""))
        return self

    @model_validator(mode="after")
    def _arm_selection_is_valid_selection_of_an_arm(self) -> ExperimentSpec:
        arms = self.arm_names()
        for arm in self.arm_selection:
            if arm not in arms:
                raise ValueError(f"arm_selection: '{arm}' is no arm of the experiment (arms: {', '.join(arms)})")
            try:
                self.selection_of(arm)
            except ValidationError as exc:
                problems = "; ".join(f"{'.'.join(map(str, error['loc'])) or 'selection'}: {error['msg']}"
                                     for error in exc.errors())
                raise ValueError(f"arm_selection.{arm}: {problems}") from None
        return self

    @model_validator(mode="after")
    def _problem_names_are_distinct(self) -> ExperimentSpec:
        keys = [problem_key(problem) for problem in self.problems]
        repeated = sorted({problem for problem, key in zip(self.problems, keys, strict=True) if keys.count(key) > 1})
        if repeated:
            raise ValueError(f"problems must have distinct names (a cell's seed streams derive from its problem's "
                             f"name); the same name: {', '.join(repeated)}")
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
        for arm in self.arm_names():  # an ensemble's members run at the ensemble's answers per iteration
            if arm in self.arm_budget:
                continue  # checked with the budget below
            per_iteration = self.answers_per_iteration_of_cells()
            for policy in self.arm_policies(arm):
                if per_iteration % policy.answers:
                    index = next(i for i, section in enumerate(self.policies) if section.name == policy.name)
                    where = "" if arm == policy.name else f" in ensemble '{arm}'"
                    raise ValueError(f"answers_per_iteration = {per_iteration} is not a multiple of policies[{index}]."
                                     f"answers = {policy.answers} (policy '{policy.name}'{where}); every policy must "
                                     "get the same candidate answers per iteration")
        return self

    @model_validator(mode="after")
    def _an_arms_budget_spends_the_same_answers(self) -> ExperimentSpec:
        arms, answers = self.arm_names(), self.answers_per_iteration_of_cells() * self.iterations
        for arm, budget in self.arm_budget.items():
            if arm not in arms:
                raise ValueError(f"arm_budget: '{arm}' is no arm of the experiment (arms: {', '.join(arms)})")
            if budget.answers_per_iteration * budget.iterations != answers:
                raise ValueError(f"arm_budget.{arm}: {budget.answers_per_iteration} answers x {budget.iterations} "
                                 f"iterations = {budget.answers_per_iteration * budget.iterations} answers a cell; "
                                 f"the experiment's is {answers} (answers_per_iteration x iterations): an arm's "
                                 "budget splits the same answers differently")
            for policy in self.arm_policies(arm):
                if budget.answers_per_iteration % policy.answers:
                    raise ValueError(f"arm_budget.{arm}: answers_per_iteration = {budget.answers_per_iteration} "
                                     f"is not a multiple of policy '{policy.name}''s answers = {policy.answers}")
        return self

    def answers_per_iteration_of_cells(self) -> int:
        """What every cell gets: answers_per_iteration, or the largest policy's answers when it is 0."""
        return self.answers_per_iteration or max(policy.answers for policy in self.policies)

    def answers_per_iteration_of(self, arm: str) -> int:
        """What arm `arm`'s cells get: its arm_budget's, else answers_per_iteration_of_cells()."""
        budget = self.arm_budget.get(arm)
        return budget.answers_per_iteration if budget else self.answers_per_iteration_of_cells()

    def iterations_of(self, arm: str) -> int:
        """Iterations per cell of arm `arm`: its arm_budget's, else `iterations`."""
        budget = self.arm_budget.get(arm)
        return budget.iterations if budget else self.iterations

    def arm_names(self) -> tuple[str, ...]:
        """Every arm: the policies, then the ensembles."""
        return (*(policy.name for policy in self.policies), *(arm.name for arm in self.ensembles))

    def seeds_of(self, arm: str) -> tuple[int, ...]:
        """The seeds arm `arm` runs: its arm_seeds in the order of `seeds`, or every seed."""
        chosen = self.arm_seeds.get(arm)
        return self.seeds if chosen is None else tuple(seed for seed in self.seeds if seed in chosen)

    def cells(self) -> list[CellKey]:
        """Every cell in the order they run (`order`): arm by arm then seed by seed, or seed by seed then arm by
        arm; either way the problems of one (arm, seed) run together, so an interrupted experiment has whole
        seeds."""
        if self.order == "seeds":
            return [(problem, arm, seed) for seed in self.seeds for arm in self.arm_names()
                    if seed in self.seeds_of(arm) for problem in self.problems]
        return [(problem, arm, seed) for arm in self.arm_names() for seed in self.seeds_of(arm)
                for problem in self.problems]

    def policy(self, name: str) -> PolicySection:
        return next(policy for policy in self.policies if policy.name == name)

    def ensemble(self, name: str) -> EnsembleArm | None:
        """The ensemble arm `name`; None when `name` is a policy's arm."""
        return next((arm for arm in self.ensembles if arm.name == name), None)

    def arm_policies(self, name: str) -> tuple[PolicySection, ...]:
        """The policies a cell of arm `name` runs: its members, or the one policy."""
        arm = self.ensemble(name)
        return tuple(self.policy(member) for member in arm.members) if arm is not None else (self.policy(name),)

    def selection_of(self, arm: str) -> SelectionConfig:
        """The selection settings arm `arm`'s cells run with: [selection] with the arm's arm_selection keys over it
        (a table, such as map_elites, merged key by key); plain sampling (strategy "seed") on one island with no
        inspirations, as `evolve sample` runs it."""
        changed = self.arm_selection.get(arm)
        if not changed:
            return self.selection
        merged = self.selection.model_dump()
        for key, value in changed.items():
            merged[key] = {**merged[key], **value} if isinstance(value, dict) and isinstance(merged.get(key), dict) \
                else value
        if merged.get("strategy") == "seed":
            merged.update(islands=1, inspirations=0)
        return SelectionConfig.model_validate(merged)

    def cell_config(self, problem: str, policy: str, seed: int) -> RunConfig:
        """The config a new cell (problem, policy, seed) starts with; its run seed is `seeds.cell_seed(seed,
        problem's name)`: the same for every policy, another for every problem (a stored cell keeps its own)."""
        run = RunSection(problem=problem, iterations=self.iterations_of(policy),
                         seed=cell_seed(seed, problem_key(problem)),
                         db=self.db, programs_dir=self.run.programs_dir, concurrency=self.run.concurrency,
                         eval_workers=self.run.eval_workers, warm_evaluators=self.run.warm_evaluators,
                         evaluator_recycle=self.run.evaluator_recycle, name=f"{self.name}/{problem}/{policy}/s{seed}",
                         answers_per_iteration=self.answers_per_iteration_of(policy),
                         stop_when_solved=self.run.stop_when_solved, target_score=self.run.target_score)
        arm = self.ensemble(policy)
        if arm is None:
            return RunConfig(run=run, policy=self.policy(policy), selection=self.selection_of(policy))
        return RunConfig(run=run, policies=self.arm_policies(policy), selection=self.selection_of(policy),
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
    if OVERRIDES_KEY in data:
        raise ConfigError(f"{path}: {OVERRIDES_KEY} is not a key of an experiment file (the store keeps there the "
                          "--set flags an experiment ran with)")
    blame = apply_overrides(data, overrides or {}, labels)
    if OVERRIDES_KEY in data:
        raise ConfigError(f"{OVERRIDES_KEY}: not a key --set can set (it records the --set flags themselves)")
    data[OVERRIDES_KEY] = dict(overrides or {})
    data.setdefault("name", path.stem)
    several = isinstance(data.get("pieces"), int) and data["pieces"] > 1
    data.setdefault("db", str(path.with_name(f"{data['name']}{'_' + PIECE_FIELD if several else ''}.db")))
    if db is not None:
        data["db"] = db
        blame["db"] = "--db"  # a mistake in it is the flag's, not the file's
    try:
        return ExperimentSpec.model_validate(data)
    except ValidationError as exc:
        first = exc.errors()[0]
        raise ConfigError(describe_error(first, blamed_source(first, path, ExperimentSpec, blame),
                                         ExperimentSpec)) from None


def refuse_policies_trained_on_tests(spec: ExperimentSpec) -> None:
    """ConfigError naming the policy, its checkpoint and the reason when a policy's checkpoint (its model folder or
    LoRA adapter, wherever it lies) was trained on any of the experiment's test problems, or, unless
    allow_unverified_checkpoint, has no provenance of its own that matches its weights (rl/checkpoints.py)."""
    from evolve.policies.provenance import held_out_refusal

    for policy in spec.policies:
        for checkpoint in (policy.model, policy.lora if isinstance(policy, VLLMEngineSettings) else ""):
            reason = held_out_refusal(checkpoint, spec.problems, f"experiment {spec.name}",
                                      spec.allow_unverified_checkpoint) if checkpoint else ""
            if reason:
                raise ConfigError(f"policy '{policy.name}': its checkpoint {checkpoint} {reason}")


def design_changes(before: ExperimentSpec, after: ExperimentSpec, shown: int = 8) -> list[str]:
    """'KEY BEFORE -> AFTER' for each setting that differs between two designs of an experiment (its store, the
    --set record and the execution-only settings aside: is_execution_only): scalars and lists of scalars whole,
    tables and [[policies]] entries key by key (an entry by its name where it has one). At most `shown`, then 'and
    N more'."""
    old, new = _flat(before), _flat(after)
    changes = [f"{key} {_shown(old.get(key))} -> {_shown(new.get(key))}"
               for key in [*old, *(key for key in new if key not in old)]
               if old.get(key) != new.get(key) and not is_execution_only(key)]
    return changes[:shown] + ([f"and {len(changes) - shown} more"] if len(changes) > shown else [])


def is_execution_only(key: str) -> bool:
    """Whether a design's flat KEY only says how fast the cells run, not what they ask or see: the cells run at once
    (parallel_cells) and a llama.cpp policy's threads and engines. Such a key may change between sessions of one
    experiment (a bigger machine, a busy one). Slots, concurrency and eval_workers are not: they decide how many
    iterations are in flight, so which parents a cell draws from."""
    return key == "parallel_cells" or (key.startswith("policies.") and key.rsplit(".", 1)[-1] in ("threads",
                                                                                                   "engines"))


def _flat(spec: ExperimentSpec) -> dict[str, Any]:
    data = spec.model_dump(mode="json", exclude={"db", OVERRIDES_KEY})
    flat: dict[str, Any] = {}

    def walk(value: Any, key: str) -> None:
        if isinstance(value, dict):
            for name, inner in value.items():
                walk(inner, f"{key}.{name}" if key else name)
        elif isinstance(value, list) and value and all(isinstance(entry, dict) for entry in value):
            for index, entry in enumerate(value):
                walk(entry, f"{key}.{entry.get('name', index)}")
        else:
            flat[key] = value

    walk(data, "")
    return flat


def _shown(value: Any) -> str:
    return "(none)" if value is None else str(value) if not isinstance(value, str) else repr(value)
