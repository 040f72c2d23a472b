"""What a study file turns into: each training run's TrainConfig (an algorithm from one training seed), each policy's
settings, the sampling runs' config and the experiment of the evolution stage; all under one study folder
(checkpoints/ALGO-tSEED, the store, report/)."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pydantic import TypeAdapter, ValidationError

from evolve.config import ConfigError, RunConfig, RunSection, describe_error, read_toml
from evolve.engine.experiment_spec import PIECE_FIELD, ExperimentSpec
from evolve.policy_config import PolicySection
from evolve.study.config import BASE_POLICY, SAMPLING_ARM, StudySpec, TrainingRun
from evolve.toml_files import format_validation_error

STORE_FILE = "study.db"
STATE_FILE = "study_state.json"
REPORT_DIR = "report"
STUDY_REPORT = "study_report.json"


def checkpoint_folder(study_folder: Path, name: str) -> Path:
    """A training run's output folder, by its policy's name (ALGO-tSEED); the policy loads its final/."""
    return study_folder / "checkpoints" / name


@dataclass(frozen=True)
class StudyPaths:
    """Where a study keeps everything: its folder, checkpoints/ALGO-tSEED (one per training run), the store (a URL
    or a SQLite path), report/."""

    folder: Path
    db: str

    @classmethod
    def of(cls, spec: StudySpec, out: str | Path | None = None, db: str | None = None) -> StudyPaths:
        folder = Path(out) if out is not None else Path("studies") / spec.name
        return cls(folder, db or str(folder / STORE_FILE))

    def checkpoint(self, name: str) -> Path:
        return checkpoint_folder(self.folder, name)

    @property
    def report(self) -> Path:
        return self.folder / REPORT_DIR

    @property
    def state(self) -> Path:
        return self.folder / STATE_FILE


def train_config_data(spec: StudySpec, run: TrainingRun, folder: Path) -> dict[str, Any]:
    """The TrainConfig keys of one training run: the study's settings, then what the study fixes."""
    t = spec.training
    return {**t.settings, "algo": run.algo, "base": spec.base, "problems": list(t.problems),
            "programs_dir": spec.programs_dir, "steps": t.steps, "group_size": t.group_size(run.algo),
            "prompts_per_step": t.prompts_per_step, "answers": t.answers, "seed": run.seed,
            "out": str(checkpoint_folder(folder, run.name))}


def train_configs(spec: StudySpec, folder: Path, source: str = "study") -> dict[str, Any]:  # name -> TrainConfig
    """Each training run's TrainConfig, by its policy's name (ALGO-tSEED); a bad [training.settings] key or value
    is one ConfigError line."""
    from evolve.rl.train_config import TrainConfig

    configs = {}
    for run in spec.training_runs():
        try:
            configs[run.name] = TrainConfig.model_validate(train_config_data(spec, run, folder))
        except ValidationError as exc:
            line = format_validation_error(exc, source, TrainConfig)
            raise ConfigError(line.replace(f"{source}: ", f"{source}: training.settings ({run.algo}): ", 1)) from None
    return configs


def policy_model(spec: StudySpec, paths_folder: Path, name: str) -> str:
    return spec.base if name == BASE_POLICY else str(checkpoint_folder(paths_folder, name) / "final")


def policy_sections(spec: StudySpec, folder: Path, source: str = "study") -> list[PolicySection]:
    """The base, then one policy per training run (its checkpoint's final folder), from the [policy] table."""
    adapter: TypeAdapter[PolicySection] = TypeAdapter(PolicySection)
    sections = []
    for name, m in spec.policy_answers().items():
        data = {**spec.policy, "name": name, "model": policy_model(spec, folder, name), "answers": m}
        try:
            sections.append(adapter.validate_python(data))
        except ValidationError as exc:
            error = sorted(exc.errors(), key=lambda e: e["type"] != "extra_forbidden")[0]
            line = describe_error({**error, "loc": ("policy", *error["loc"])}, source)  # RunConfig.policy's wording
            raise ConfigError(line) from None
    return sections


def checkpoint_seeds(spec: StudySpec) -> dict[str, tuple[int, ...]]:
    """With [evolution] checkpoint_seeds = "split": each checkpoint's evolution seeds, by its policy name (the i-th
    seed to the training seed at i mod len(training.seeds)); empty with "all" (every checkpoint every seed)."""
    if spec.evolution.checkpoint_seeds == "all":
        return {}
    seeds, training = spec.evolution.seeds, spec.training.seeds
    return {run.name: tuple(seed for i, seed in enumerate(seeds) if training[i % len(training)] == run.seed)
            for run in spec.training_runs()}


def experiment_spec(spec: StudySpec, paths: StudyPaths) -> ExperimentSpec:
    """The evolution stage: policies = base + each trained checkpoint (every algorithm x training seed), and with
    sampling_arm the base's plain sampling, on the test problems x evolution seeds (a checkpoint on its share of
    them with checkpoint_seeds = "split"), in the study's store (with `pieces`, each piece's cells in its own
    store beside it)."""
    e = spec.evolution
    run = e.run.model_copy(update={"programs_dir": spec.programs_dir})
    policies = policy_sections(spec, paths.folder)
    if e.sampling_arm:  # the base's settings under another name, its selection the seed's prompt every iteration
        policies.append(policies[0].model_copy(update={"name": SAMPLING_ARM}))
    db = paths.db if e.pieces == 1 else str(paths.folder / f"evolution_{PIECE_FIELD}.db")
    return ExperimentSpec(name=spec.name, description=spec.description, db=db, problems=spec.test_problems,
                          train_problems=spec.training.problems, seeds=e.seeds, iterations=e.iterations,
                          arm_seeds=checkpoint_seeds(spec),
                          arm_selection={SAMPLING_ARM: {"strategy": "seed"}} if e.sampling_arm else {},
                          answers_per_iteration=spec.answers_per_iteration(), parallel_cells=e.parallel_cells,
                          order=e.order, run=run, selection=e.selection, policies=tuple(policies),
                          allow_unverified_checkpoint=spec.allow_unverified_checkpoint, pieces=e.pieces)


def sampling_config(spec: StudySpec, paths: StudyPaths, policy: PolicySection) -> RunConfig:
    """The base RunConfig `evolve sample` would build for one policy: the study's store, seed and run settings."""
    r = spec.evolution.run
    run = RunSection(db=paths.db, seed=spec.sampling.seed, programs_dir=spec.programs_dir, concurrency=r.concurrency,
                     eval_workers=r.eval_workers, warm_evaluators=r.warm_evaluators,
                     evaluator_recycle=r.evaluator_recycle)
    return RunConfig(run=run, policy=policy)


def load_study(path: str | Path) -> StudySpec:
    """The study file, validated (name defaults to the file's stem); ConfigError names the file and the first
    mistake. Every algorithm's training settings and every policy table are checked here too, before any work."""
    path = Path(path)
    data = read_toml(path)
    data.setdefault("name", path.stem)
    try:
        spec = StudySpec.model_validate(data)
    except ValidationError as exc:
        errors = sorted(exc.errors(), key=lambda error: error["type"] != "extra_forbidden")
        raise ConfigError(describe_error(errors[0], str(path), StudySpec)) from None
    train_configs(spec, Path("studies") / spec.name, str(path))
    policy_sections(spec, Path("studies") / spec.name, str(path))
    return spec


def sampling_plans(spec: StudySpec, paths: StudyPaths, store: Any) -> dict[str, list[Any]]:
    """Per policy, its SamplePlans on the test problems (found in the store or to be created)."""
    from evolve.engine.sampling import plan_samples

    return {policy.name: plan_samples(store, sampling_config(spec, paths, policy), spec.test_problems,
                                      spec.sampling.answers)
            for policy in policy_sections(spec, paths.folder)}
