"""`evolve study FILE`: train policies with equal budgets, sample them, evolve with them, report; resumable stage by
stage.

Stages, in order, each skipped when complete and resumed when partial, so the same command after a kill at any
instant goes on where it stopped:
1. train: each algorithm from the same base, once per training seed (rl/trainer.py, with `evolve train --resume`'s
   semantics) into STUDY/checkpoints/ALGO-tSEED; every checkpoint folder carries its training provenance (the
   held-out check reads it);
2. sample: plain sampling (engine/sampling.py) of the base and every checkpoint on the test problems;
3. evolve: an experiment (engine/experiment.py) whose policies are the base and every checkpoint, each on every
   test problem x evolution seed;
4. report (study/report_stage.py): the experiment report plus the training curves in STUDY/report/ (every chart
   also a standalone SVG in STUDY/report/figures/), and in
   study_report.json each arm's crack share pooled and per training seed, with their spread, and the paired
   differences between arms (report/study_report.arm_report).
The time spent in each stage is summed over invocations in STUDY/study_state.json (study/state.py).
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

from rich.console import Console

from evolve.engine.events import Observer
from evolve.report.cell_status import cell_statuses_in, whole_parts
from evolve.study.config import StudySpec
from evolve.study.evolution_stage import evolution_counts, evolution_seconds_left, evolution_stores
from evolve.study.plan import StudyPaths, experiment_spec, sampling_plans, train_configs
from evolve.study.state import State, StudyError, StudyState
from evolve.study.training_stage import run_training, training_seconds_left, training_status

STAGES = ("train", "sample", "evolve", "report")
Stage = Literal["train", "sample", "evolve", "report"]


@dataclass(frozen=True)
class StageStatus:
    stage: str
    state: State
    detail: str
    fraction: float | None = None  # the share of the stage's work done (steps, runs, cells), None where unknown
    seconds_left: float | None = None  # where the stage knows its own pace better than its share of the clock
    pace: str = "this pace"  # what seconds_left (or the share of the clock) is reckoned at, for --status


@dataclass
class StudyOutcome:
    statuses: list[StageStatus]
    finished: bool = False
    interrupted: bool = False
    errors: list[str] = field(default_factory=list)
    report: Path | None = None


# ---- stage 2: plain sampling ----------------------------------------------------------------------------------

def _plans_state(plans: list[Any]) -> State:
    if all(plan.finished for plan in plans):
        return "done"
    return "partial" if any(plan.run_id is not None for plan in plans) else "to do"


# ---- the whole study ------------------------------------------------------------------------------------------

def time_left(spent: float | None, fraction: float | None) -> float | None:
    """Seconds a stage still needs at the pace it has kept (spent / fraction done), None before any progress or
    once it is done: a stage's units (training steps, sampling runs, cells) take roughly equal time."""
    if not spent or fraction is None or not 0.0 < fraction < 1.0:
        return None
    return spent * (1.0 - fraction) / fraction


def format_duration(seconds: float) -> str:
    minutes = round(seconds / 60)
    return f"{minutes // 60} h {minutes % 60:02d} min" if minutes >= 60 else f"{max(1, minutes)} min"


class Study:
    """One study: its file's spec, its folder and store; `statuses()` says where each stage stands, `run()` runs
    the stages still to do, up to `until`."""

    def __init__(self, spec: StudySpec, paths: StudyPaths, console: Console | None = None,
                 source: str = "study", cluster: str | None = None, read_only: bool = False,
                 on_event: Observer | None = None) -> None:
        """`read_only` (`--status`): nothing is created or written, not the folder, its state file or its store;
        `run` then refuses."""
        from evolve.store.program_store import ProgramStore
        from evolve.store.read_view import status_view

        self.spec, self.paths, self.read_only = spec, paths, read_only
        self.cluster = cluster  # "ray": the evolve stage's cells run as Ray tasks (evolve/cluster/)
        self.on_event = on_event  # the evolve stage's experiment events (the CLI draws them)
        self.console = console or Console()
        self.state = StudyState(paths, read_only)
        self.train_configs = train_configs(spec, paths.folder, source)
        self.store = status_view(paths.db) if read_only else ProgramStore(paths.db)

    def statuses(self, pace: bool = True) -> list[StageStatus]:
        """Where each stage stands; with `pace`, how long the stages under way have left (read from the training
        logs and every evolution cell's clock: for --status, not for a caller that only needs the states)."""
        per_run = {name: training_status(config) for name, config in self.train_configs.items()}
        train_state = _combined([run.state for run in per_run.values()])
        t = self.spec.training
        train_detail = (f"{sum(run.state == 'done' for run in per_run.values())}/{len(per_run)} training runs "
                        f"({len(t.algorithms)} algorithm{'s' * (len(t.algorithms) != 1)} x {len(t.seeds)} training "
                        f"seed{'s' * (len(t.seeds) != 1)}): "
                        + ", ".join(f"{name} {run.detail}" for name, run in per_run.items()))
        train_fraction = sum(run.steps_done for run in per_run.values()) / max(1, len(per_run) * t.steps)
        plans = sampling_plans(self.spec, self.paths, self.store)
        sample_state = _combined([_plans_state(p) for p in plans.values()])
        sampled = sum(plan.finished for p in plans.values() for plan in p)
        sample_runs = sum(map(len, plans.values()))
        experiment = experiment_spec(self.spec, self.paths)
        with evolution_stores(experiment, self.store) as stores:
            cells = cell_statuses_in(stores, experiment)
            evolution = evolution_counts(experiment, cells)
            evolve_state: State = "done" if evolution.finished == evolution.planned else \
                "partial" if evolution.started else "to do"
            evolve_left = evolution_seconds_left(self.spec, experiment, stores, cells) \
                if pace and evolve_state == "partial" else None
        evolve_timing: dict[str, Any] = {} if evolve_left is None else {
            "seconds_left": evolve_left,
            "pace": "each arm's machine time per cell and problem"}
        report = self.paths.report / "study_report.json"
        answers = self.spec.sampling.answers
        stages_done = sample_state == evolve_state == train_state == "done"
        report_state: State = "done" if stages_done and _final_report(report) else "to do"
        steps = training_seconds_left(list(self.train_configs.values())) if pace and train_state != "done" else None
        timing: dict[str, Any] = {} if steps is None else \
            {"seconds_left": steps[0], "pace": f"the median of the latest {steps[1]} step{'s' * (steps[1] != 1)}"}
        return [StageStatus("train", train_state, train_detail, train_fraction, **timing),
                StageStatus("sample", sample_state, f"{sampled}/{sample_runs} (policy, problem) "
                            f"runs of {answers} answer{'s' * (answers != 1)}", sampled / max(1, sample_runs)),
                StageStatus("evolve", evolve_state, evolution.detail, evolution.finished / max(1, evolution.planned),
                            **evolve_timing),
                StageStatus("report", report_state, str(report))]

    def print_statuses(self, statuses: list[StageStatus]) -> None:
        seconds = self.state.seconds_now()
        pieces = self.spec.evolution.pieces
        stores = f"store {self.paths.db}" + (f"; evolution in {pieces} pieces, evolution_NN.db beside it"
                                             if pieces > 1 else "")
        self.console.print(f"study [bold]{self.spec.name}[/] in {self.paths.folder} ({stores})",
                           highlight=False, soft_wrap=True)
        left_in_all: list[float] = []
        for number, status in enumerate(statuses, 1):
            spent = seconds.get(status.stage)
            clock = f", {spent:.0f} s so far" if spent else ""
            left = status.seconds_left if status.seconds_left is not None else time_left(spent, status.fraction)
            if left is not None:
                left_in_all.append(left)
                clock += f", about {format_duration(left)} left at {status.pace}"
            self.console.print(f"  {number}. {status.stage:<7} {status.state:<8} {status.detail}{clock}",
                               highlight=False, soft_wrap=True)
        waiting = [status.stage for status in statuses if status.state != "done" and status.stage != "report"
                   and status.seconds_left is None and time_left(seconds.get(status.stage), status.fraction) is None]
        parts = [f"about {format_duration(sum(left_in_all))} for the stages under way"] if left_in_all else []
        parts += [f"no pace yet for {', '.join(waiting)}"] if waiting else []
        if parts:
            self.console.print(f"  left: {'; '.join(parts)}", highlight=False, soft_wrap=True)

    def write_interim_report(self) -> Path:
        """STUDY/report/ from what has run so far, the study perhaps running in another process: the (piece,
        seed) parts finished for every arm (an interim report, which the report stage replaces); the path of
        study_report.json. StudyError before training and sampling are done, before a part is whole, or after
        evolution is done (the report stage's turn)."""
        from evolve.study.report_stage import write_study_report

        train, sample, evolve, _report = self.statuses(pace=False)
        if train.state != "done" or sample.state != "done":
            raise StudyError(f"study {self.spec.name}: no interim report before its training and sampling are done "
                             f"(train: {train.detail}; sample: {sample.detail})")
        if evolve.state == "done":
            raise StudyError(f"study {self.spec.name}: its evolution is done; run `evolve study` for the final report")
        experiment = experiment_spec(self.spec, self.paths)
        with evolution_stores(experiment, self.store) as stores:
            whole = whole_parts(experiment, cell_statuses_in(stores, experiment),
                                whole_pieces=self.spec.evolution.checkpoint_seeds == "split")
        if not whole:
            unit = "seed" if experiment.pieces == 1 else "(piece, seed) part"
            raise StudyError(f"study {self.spec.name}: an interim report compares the arms on whole {unit}s, and no "
                             f"{unit} has finished for every arm yet ({evolve.fraction:.0%} of the cells have)")
        return write_study_report(self.spec, self.paths, self.store, self.train_configs, self.state.seconds_now(),
                                  self.console, interim=True)

    def refuse_a_base_trained_on_tests(self) -> None:
        """The base model, when it is itself a trained checkpoint, is held to the held-out rule before anything is
        trained from it (the checkpoints the study trains are checked by the evolve stage's experiment)."""
        from evolve.config import ConfigError
        from evolve.policies.provenance import held_out_refusal

        reason = held_out_refusal(self.spec.base, self.spec.test_problems, f"study {self.spec.name}",
                                  self.spec.allow_unverified_checkpoint)
        if reason:
            raise ConfigError(f"study {self.spec.name}: its base {self.spec.base} {reason}")

    def run(self, until: str = "report") -> StudyOutcome:
        if self.read_only:
            raise StudyError("this study was opened to read its status only")
        self.refuse_a_base_trained_on_tests()
        statuses = self.statuses()
        self.print_statuses(statuses)
        outcome = StudyOutcome(statuses)
        stages = STAGES[:STAGES.index(until) + 1]
        for status in statuses:
            if status.stage not in stages:
                break
            if status.state == "done":
                self.console.print(f"{status.stage}: done, skipped", highlight=False)
                continue
            with self.state.timed(status.stage):
                getattr(self, f"_{status.stage}")(outcome)
            if outcome.interrupted or outcome.errors:
                return outcome
        outcome.finished = until == "report"
        return outcome

    def _train(self, outcome: StudyOutcome) -> None:
        budgets = {b.algo: b for b in self.spec.budgets()}
        for run in self.spec.training_runs():
            config = self.train_configs[run.name]
            status = training_status(config)
            if status.state == "done":
                continue
            budget = budgets[run.algo]
            self.console.print(f"train {run.algo} (training seed {run.seed}) -> {run.name}: "
                               f"{'resuming at ' + status.detail if status.state == 'partial' else 'starting'}; "
                               f"{budget.group_size} completions x m = {budget.m} = {budget.answers_per_prompt} "
                               f"answers per prompt, {budget.prompts_per_step} prompts per step, {budget.steps} steps",
                               highlight=False, soft_wrap=True)
            try:
                with self.state.timed(f"train/{run.name}"):
                    run_training(config, self.console, self.spec.test_problems)
            except KeyboardInterrupt:
                outcome.interrupted = True
                return

    def _rebuild_checkpoints(self) -> None:
        """Make again the merged weights a checkpoint committed without them lacks (rl/rebuild.py), before a stage
        loads it."""
        from evolve.rl.rebuild import rebuild_all

        for path in rebuild_all([self.paths.checkpoint(run.name) / "final" for run in self.spec.training_runs()]):
            self.console.print(f"rebuilt {path} from its adapter (sha256 as training saved it)", highlight=False,
                               soft_wrap=True)

    def _sample(self, outcome: StudyOutcome) -> None:
        from evolve.engine.sampling import run_samples

        self._rebuild_checkpoints()

        for policy, plans in sampling_plans(self.spec, self.paths, self.store).items():
            if all(plan.finished for plan in plans):
                continue
            self.console.print(f"sample {policy}: {self.spec.sampling.answers} answers on each of "
                               f"{len(plans)} test problems", highlight=False)
            with self.state.timed(f"sample/{policy}"):
                result = run_samples(self.store, plans, self.spec.sampling.parallel,
                                     on_done=lambda plan, run: self.console.print(
                                         f"  {plan.problem.name}: sampled (run {run})", highlight=False))
            outcome.errors += [f"sample {policy}: {error}" for error in result.errors]
            if result.interrupted:
                outcome.interrupted = True
                return

    def _evolve(self, outcome: StudyOutcome) -> None:
        from evolve.engine.experiment import run_pieces

        self._rebuild_checkpoints()

        executor = None
        if self.cluster is not None:
            from evolve.cluster import cell_executor

            executor = cell_executor(self.cluster)
        result = run_pieces(experiment_spec(self.spec, self.paths), on_event=self.on_event, executor=executor)
        outcome.errors += [f"evolve: {error}" for error in result.errors]
        outcome.interrupted = result.interrupted

    def _report(self, outcome: StudyOutcome) -> None:
        from evolve.study.report_stage import write_study_report

        outcome.report = write_study_report(self.spec, self.paths, self.store, self.train_configs,
                                            self.state.seconds, self.console)


def _final_report(path: Path) -> bool:
    """Whether `path` is a study_report.json of a finished study, not an interim one."""
    try:
        return not json.loads(path.read_text()).get("interim")
    except (OSError, ValueError):
        return False


def _combined(states: list[State]) -> State:
    if all(state == "done" for state in states):
        return "done"
    return "to do" if all(state == "to do" for state in states) else "partial"
