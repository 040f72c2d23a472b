"""Stage 3 of a study, as `--status` reads it: how many of the experiment's cells have finished and started, the
(piece, seed) parts every arm has finished, the batches under way, and how long the rest will take at each arm's
own pace.

Arms differ in pace by an order of magnitude (a policy that writes long answers, or never cracks a problem, runs its
cells for their whole budget): a share of the cells done times the clock (what the other stages use) would follow
whichever arm ran last. Instead each cell still to run is reckoned at the machine time the same arm's finished
cells of its problem took (any of its problems where it has none), less what it has had already. A cell's machine
time is its share of the wall clock: while n cells have a request in flight each is credited 1/n of the time. A
cell's own clock would not do: it runs slower the more cells share the generator, and a batch's last cells run
nearly alone, so their clocks over `parallel_cells` undercount the wall time a batch takes (by 13 % on the CPU
study's first 204 cells: 13.3 h against 15.2 h).
"""

from __future__ import annotations

from collections import Counter, defaultdict
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from statistics import fmean
from typing import Any

from evolve.engine.experiment_pieces import piece_stores, problem_pieces
from evolve.engine.experiment_spec import CellKey, ExperimentSpec
from evolve.report.cell_status import Part, parts_text, planned_parts, whole_parts
from evolve.study.config import StudySpec


@dataclass(frozen=True)
class EvolutionCounts:
    """Where the study's experiment stands in its store."""

    finished: int
    started: int
    planned: int
    parts: int  # (piece, seed) parts planned: those some arm runs
    pieces: int
    whole_parts: tuple[Part, ...]  # those every arm has finished
    under_way: tuple[tuple[int, str, int, int, int], ...]  # (piece, policy, seed, cells finished, cells planned) of
    # each batch (a policy's cells of one seed in one piece) with a cell started and one unfinished, in the
    # experiment's order

    @property
    def detail(self) -> str:
        text = f"{self.finished}/{self.planned} cells finished ({self.started} started)"
        if self.finished == self.planned or not self.started:
            return text
        whole = self.whole_parts
        if self.pieces == 1:
            seeds = [seed for _piece, seed in whole]
            text += (f"; every arm has finished seed{'s' * (len(seeds) != 1)} {', '.join(map(str, seeds))} "
                     f"({len(seeds)} of {self.parts} seeds)" if seeds else "; no seed finished by every arm yet")
        else:
            text += (f"; every arm has finished {parts_text(whole, self.pieces)}: {len(whole)} of {self.parts} "
                     "(piece, seed) parts" if whole else "; no (piece, seed) finished by every arm yet")
        if self.under_way:
            where = (lambda piece: "") if self.pieces == 1 else (lambda piece: f"piece {piece}: ")
            text += "; under way: " + ", ".join(f"{where(piece)}{policy} seed {seed} ({done}/{planned} cells)"
                                                for piece, policy, seed, done, planned in self.under_way)
        return text


@contextmanager
def evolution_stores(experiment: ExperimentSpec, store: Any) -> Iterator[list[Any]]:
    """The stores holding the study's evolution cells: the study's own (`store`), or with pieces each begun piece's,
    opened read-only for the block."""
    if experiment.pieces == 1:
        yield [store]
        return
    stores = piece_stores(experiment)
    try:
        yield stores
    finally:
        for piece in stores:
            piece.close()


def evolution_counts(experiment: ExperimentSpec, statuses: dict[CellKey, str]) -> EvolutionCounts:
    """`statuses`: cell_statuses(store, experiment)."""
    piece_of = problem_pieces(experiment)
    batches: dict[tuple[int, str, int], list[str | None]] = {}
    for problem, policy, seed in experiment.cells():
        batches.setdefault((piece_of[problem], policy, seed), []).append(statuses.get((problem, policy, seed)))
    under_way = tuple((piece, policy, seed, cells.count("finished"), len(cells))
                      for (piece, policy, seed), cells in batches.items()
                      if any(status is not None for status in cells) and cells.count("finished") < len(cells))
    return EvolutionCounts(sum(status == "finished" for status in statuses.values()), len(statuses),
                           len(experiment.cells()), len(planned_parts(experiment)), experiment.pieces,
                           whole_parts(experiment, statuses), under_way)


def machine_shares(spans: dict[int, list[tuple[float, float]]]) -> dict[int, float]:
    """Each run's share of the wall clock, from its requests' (start, end) spans (ProgramStore.runs_call_spans):
    every stretch in which n runs have a request in flight credits each of them 1/n of it (a run's own overlapping
    requests count once). The shares sum to the time in which any run was generating."""
    events = sorted((time, step, run) for run, runs_spans in spans.items() for start, end in runs_spans
                    if end > start for time, step in ((start, 1), (end, -1)))
    shares = dict.fromkeys(spans, 0.0)
    in_flight: Counter[int] = Counter()
    active: set[int] = set()
    previous = 0.0
    for time, step, run in events:
        for each in active:
            shares[each] += (time - previous) / len(active)
        previous = time
        in_flight[run] += step
        if in_flight[run]:
            active.add(run)
        else:
            active.discard(run)
    return shares


def evolution_seconds_left(spec: StudySpec, experiment: ExperimentSpec, stores: Sequence[Any],
                           statuses: dict[CellKey, str]) -> float | None:
    """Seconds the evolution still needs: each unfinished cell at the mean machine time (machine_shares) of its
    arm's finished cells of its problem, or of all its arm's finished cells, less the machine time it has had. An
    arm is the base or an algorithm, its checkpoints pooled (they share its seeds). None while an arm with cells
    to run has no finished cell. `stores`: those holding the cells (evolution_stores; pieces run one after
    another, so each store's runs share the machine among themselves only)."""
    arm_of = {name: arm for arm, policies in spec.arms().items() for _seed, name in policies}
    machine: dict[CellKey, float] = {}
    for store in stores:
        run_of = {(cell.problem, cell.policy, cell.seed): cell.run_id
                  for cell in store.experiment_cells(experiment.name)
                  if (cell.problem, cell.policy, cell.seed) in statuses}
        shares = machine_shares(store.runs_call_spans(run_of.values()))
        for key, run_id in run_of.items():
            machine.setdefault(key, shares[run_id])
    by_problem: dict[tuple[str, str], list[float]] = defaultdict(list)
    by_arm: dict[str, list[float]] = defaultdict(list)
    for key, status in statuses.items():
        if status == "finished":
            problem, policy, _ = key
            by_problem[arm_of[policy], problem].append(machine[key])
            by_arm[arm_of[policy]].append(machine[key])
    left = 0.0
    for key in experiment.cells():
        if statuses.get(key) == "finished":
            continue
        problem, policy, _ = key
        arm = arm_of[policy]
        if not by_arm[arm]:
            return None
        expected = fmean(by_problem.get((arm, problem)) or by_arm[arm])
        left += max(0.0, expected - machine.get(key, 0.0))
    return left
