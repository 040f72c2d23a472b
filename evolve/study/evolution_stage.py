"""Stage 3 of a study, as `--status` reads it: how many of the experiment's cells have finished and started, the
seeds every arm has finished, the batches under way, and how long the rest will take at each arm's own pace.

Arms differ in pace by an order of magnitude (a policy that writes long answers, or never cracks a problem, runs its
cells for their whole budget): a share of the cells done times the clock (what the other stages use) would follow
whichever arm ran last. Instead each cell still to run is reckoned at the active time the same arm's finished
cells of its problem took (any of its problems where it has none), less what it has run already, and
`parallel_cells` of them run at once.
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass
from statistics import fmean
from typing import Any

from evolve.engine.experiment_spec import ExperimentSpec
from evolve.report.results import CellKey, whole_seeds
from evolve.study.config import StudySpec


@dataclass(frozen=True)
class EvolutionCounts:
    """Where the study's experiment stands in its store."""

    finished: int
    started: int
    planned: int
    seeds: int  # evolution seeds planned
    whole_seeds: tuple[int, ...]  # those every arm has finished
    under_way: tuple[tuple[str, int, int, int], ...]  # (policy, seed, cells finished, cells planned) of each batch
    # with a cell started and one unfinished, in the experiment's order

    @property
    def detail(self) -> str:
        text = f"{self.finished}/{self.planned} cells finished ({self.started} started)"
        if self.finished == self.planned or not self.started:
            return text
        whole = self.whole_seeds
        text += (f"; every arm has finished seed{'s' * (len(whole) != 1)} {', '.join(map(str, whole))} "
                 f"({len(whole)} of {self.seeds} seeds)" if whole
                 else "; no seed finished by every arm yet")
        if self.under_way:
            text += "; under way: " + ", ".join(f"{policy} seed {seed} ({done}/{planned} cells)"
                                                for policy, seed, done, planned in self.under_way)
        return text


def evolution_counts(experiment: ExperimentSpec, statuses: dict[CellKey, str]) -> EvolutionCounts:
    """`statuses`: cell_statuses(store, experiment)."""
    batches: dict[tuple[str, int], list[str | None]] = {}
    for problem, policy, seed in experiment.cells():
        batches.setdefault((policy, seed), []).append(statuses.get((problem, policy, seed)))
    under_way = tuple((policy, seed, cells.count("finished"), len(cells)) for (policy, seed), cells in batches.items()
                      if any(status is not None for status in cells) and cells.count("finished") < len(cells))
    return EvolutionCounts(sum(status == "finished" for status in statuses.values()), len(statuses),
                           len(experiment.cells()), len(experiment.seeds), whole_seeds(experiment, statuses), under_way)


def evolution_seconds_left(spec: StudySpec, experiment: ExperimentSpec, store: Any,
                           statuses: dict[CellKey, str]) -> float | None:
    """Seconds the evolution still needs: each unfinished cell at the mean active time (runs' run_elapsed_s) of
    its arm's finished cells of its problem, or of all its arm's finished cells, less the time it has run, over
    `parallel_cells` cells at once. An arm is the base or an algorithm, its checkpoints pooled (they share its
    seeds). None while an arm with cells to run has no finished cell."""
    arm_of = {name: arm for arm, policies in spec.arms().items() for _seed, name in policies}
    runs = {(cell.problem, cell.policy, cell.seed): cell.run_id for cell in store.experiment_cells(experiment.name)}
    seconds = store.runs_elapsed_s(runs[key] for key in statuses if key in runs)
    elapsed = {key: seconds[runs[key]] for key in statuses if key in runs}
    by_problem: dict[tuple[str, str], list[float]] = defaultdict(list)
    by_arm: dict[str, list[float]] = defaultdict(list)
    for key, status in statuses.items():
        if status == "finished":
            problem, policy, _ = key
            by_problem[arm_of[policy], problem].append(elapsed[key])
            by_arm[arm_of[policy]].append(elapsed[key])
    left = 0.0
    for key in experiment.cells():
        if statuses.get(key) == "finished":
            continue
        problem, policy, _ = key
        arm = arm_of[policy]
        if not by_arm[arm]:
            return None
        expected = fmean(by_problem.get((arm, problem)) or by_arm[arm])
        left += max(0.0, expected - elapsed.get(key, 0.0))
    return left / experiment.parallel_cells
