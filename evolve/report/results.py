"""An experiment's numbers, read from its store: per cell, per problem x policy, curves, budgets and paired differences.

Seeds are the unit of repetition (never iterations or programs) and every number carries how many seeds or problems
it rests on. Intervals are `evolve.report.stats`'s: Clopper-Pearson for cracked k of n, the betting interval for means
(at least nominal coverage at any n, never zero width), the same on paired per-problem differences between policies,
with exact sign and permutation tests whose p-values are Holm-adjusted over every comparison of the report.
First-crack times are Kaplan-Meier estimates in which a seed that never cracked is censored at its budget. "Cracked"
and the ranking scalar are derived now, from each problem's current rule and the stored score vectors; a problem
whose folder no longer loads falls back to the flags stored when its programs were written, and the report says so.
A cell whose every policy call failed is `policy_failed`, not "cracked nothing". Curves rest on complete seeds only
(see results_curves.py). Budgets count generated tokens per candidate answer beside each arm's per-answer token cap,
so an arm writing m answers per request compares with a one-answer arm. A study groups policies into arms (an
algorithm's checkpoints, one per training seed): `pooled_differences` compares arms, each pooling its policies'
cells per problem; the plain report never groups.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Literal

import numpy as np

from evolve.engine.experiment_pieces import problem_pieces
from evolve.engine.experiment_spec import CellKey, ExperimentSpec
from evolve.problems.problem import Problem, ProblemError, load_problem
from evolve.report.by_choice import instructions_by_arm
from evolve.report.cell_status import Part, parts_text
from evolve.report.result_types import (
    METRIC_LABELS,
    CellResult,
    ExperimentResults,
    ObjectiveReach,
    Pairs,
    PolicyBudget,
    ProblemPolicyRow,
    RowState,
)
from evolve.report.results_curves import AXES, AXIS_LABELS, Curve, Step, policy_curves, problem_curve
from evolve.report.stats import (
    Interval,
    PairedDifference,
    clopper_pearson,
    holm_correct,
    kaplan_meier,
    mean_interval,
    paired_difference,
)
from evolve.store.program_store import IterationCost, ProgramStore

__all__ = ["AXES", "AXIS_LABELS", "METRIC_LABELS", "CellResult", "Curve", "ExperimentResults", "ObjectiveReach",
           "Pairs", "PolicyBudget", "ProblemPolicyRow", "RowState", "collect", "every_pair", "pooled_cells",
           "pooled_differences"]

StoredScores = tuple[int, dict[str, float], float, bool]  # store.score_vectors: iteration, vector, scalar, solved

@dataclass(frozen=True)
class _Judge:
    """How a problem's programs are judged: its current rule, or (None) the flags stored with them."""

    problem: Problem | None

    def verdict(self, scores: dict[str, float], scalar: float, solved: bool) -> tuple[float, bool]:
        if self.problem is None:
            return scalar, solved
        return self.problem.scalar(scores), self.problem.is_solved(scores)


def _judges(problems: Iterable[str], programs_dir: str, runs: Mapping[CellKey, tuple[ProgramStore, int]],
            notes: list[str]) -> dict[str, _Judge]:
    """A judge per problem: the current rule when the folder loads and reads every stored vector, else the flags.
    The runs' vectors are streamed from their stores (a second pass, in cell_result, judges them)."""
    judges = {}
    for name in problems:
        try:
            problem: Problem | None = load_problem(name, Path(programs_dir))
        except ProblemError as exc:
            notes.append(f"{name}: the problem folder does not load now ({exc}); cracked and scalars are the flags "
                         f"stored when its programs were written, under the rule of that time.")
            problem = None
        if problem is not None:
            for (problem_name, _, _), (store, run_id) in runs.items():
                if problem_name != name:
                    continue
                missing = {o for _, vector, _, _ in store.score_vectors(run_id) for o in problem.objectives
                           if o not in vector}
                if missing:
                    notes.append(f"{name}: stored score vectors lack the current objectives "
                                 f"{', '.join(sorted(missing))}; cracked and scalars are the stored flags.")
                    problem = None
                    break
        judges[name] = _Judge(problem)
    return judges


def cell_result(store: ProgramStore, spec: ExperimentSpec, run_id: int | None, key: tuple[str, str, int],
                judge: _Judge | None = None, vectors: Iterable[StoredScores] | None = None) -> CellResult:
    """The cell's numbers; `vectors`: the run's `store.score_vectors` (by default streamed from the store)."""
    problem, policy, seed = key
    horizon = spec.iterations_of(policy)
    rule: Literal["current", "stored"] = "current" if judge is not None and judge.problem is not None else "stored"
    if run_id is None:
        return CellResult(problem, policy, seed, None, "not_run", horizon, 0, None, None, (None,) * (horizon + 1),
                          0, 0, 0, 0, 0, None, (), (), rule, 0)
    judge = judge or _Judge(None)
    info = store.get_run(run_id)
    costs = store.iteration_costs(run_id)
    done = sum(1 for iteration in store.completed_iterations(run_id) if iteration >= 1)
    by_iteration: dict[int, tuple[float | None, bool]] = {}
    objective_best: dict[str, float] = {}
    solved_at: list[int] = []
    top: float | None = None  # the highest scalar, as max() over them in this order would give it
    for iteration, vector, stored_scalar, stored_solved in (vectors if vectors is not None
                                                            else store.score_vectors(run_id)):
        scalar, solved = judge.verdict(vector, stored_scalar, stored_solved)
        best, cracked = by_iteration.get(iteration, (None, False))
        by_iteration[iteration] = (scalar if best is None else max(best, scalar), cracked or solved)
        for name, value in vector.items():
            objective_best[name] = max(objective_best.get(name, value), value)
        if solved:
            solved_at.append(iteration)
        if top is None or scalar > top:
            top = scalar
    best_by: list[float | None] = []
    best: float | None = None
    for t in range(horizon + 1):
        scalar_t = by_iteration.get(t, (None, False))[0]
        if scalar_t is not None:
            best = scalar_t if best is None else max(best, scalar_t)
        best_by.append(best)
    steps = [Step(0, 0, 0, 0.0, *by_iteration.get(0, (None, False)))]
    evaluations = tokens = answers = 0
    # commit order: the run's clock where it has one, else iteration order (concurrent iterations commit out of order)
    for cost in sorted(costs, key=lambda c: (c.elapsed_s is None, c.elapsed_s or 0.0, c.iteration)):
        evaluations += cost.evaluations
        tokens += cost.completion_tokens
        answers += answers_asked(spec, policy, (cost,))
        steps.append(Step(cost.iteration, evaluations, tokens, cost.elapsed_s,
                          *by_iteration.get(cost.iteration, (None, False)), answers))
    clocks = [c.elapsed_s for c in costs]
    return CellResult(
        problem, policy, seed, run_id, info.status, info.iterations_target, done, min(solved_at, default=None),
        top, tuple(best_by),
        sum(c.policy_calls for c in costs), sum(c.policy_errors for c in costs), evaluations, tokens,
        sum(c.prompt_tokens for c in costs),
        None if any(c is None for c in clocks) else max((c for c in clocks if c is not None), default=0.0),
        tuple(steps), tuple(objective_best.items()), rule, answers_asked(spec, policy, costs))


def answers_asked(spec: ExperimentSpec, arm: str, costs: Iterable[IterationCost]) -> int:
    """The candidate answers a cell's requests asked for: m per request (the arm's policy.answers), a failed
    request's included, as plain sampling counts its n. An ensemble whose members write different m asks every
    iteration for the experiment's answers per iteration (the member chosen makes answers_per_iteration / m
    requests)."""
    sizes = {policy.answers for policy in spec.arm_policies(arm)}
    if len(sizes) == 1:
        return sizes.pop() * sum(c.policy_calls + c.policy_errors for c in costs)
    return spec.answers_per_iteration_of(arm) * sum(1 for c in costs if c.policy_calls + c.policy_errors)


def collect(store: ProgramStore | Sequence[ProgramStore], spec: ExperimentSpec, samples: int = 100_000,
            confidence: float = 0.95, score_range: tuple[float, float] = (0.0, 1.0), pairs: Pairs = "all",
            parts: Sequence[Part] | None = None) -> ExperimentResults:
    """Every number of the report. `store`: the experiment's store, or for an experiment of several pieces the
    stores of the pieces begun (engine/experiment_pieces.py: piece_stores): each cell is read from the first store
    that holds it, and a cell none holds counts as not run. `samples`: Monte Carlo sign patterns for a permutation
    test that cannot be exact (more than 20 non-zero differences off any lattice: evolve/report/permutation.py);
    `pairs`: compare every pair of policies, or the first with each other; `parts`: an interim report of an experiment
    under way, in which only the cells of these (piece, seed) parts count (cell_status.whole_parts: every cell of
    theirs has finished), the other cells as not run: the cells finished first are the quick cracks, so counting
    every finished cell would flatter, and an unfinished one read as a failure would not."""
    stores = [store] if isinstance(store, ProgramStore) else list(store)
    if not stores:
        raise ValueError(f"experiment {spec.name}: a report needs at least one store")
    runs: dict[CellKey, tuple[ProgramStore, int]] = {}
    for piece_store in stores:
        held = {(c.problem, c.policy, c.seed): c.run_id
                for c in piece_store.experiment_cells(spec.name)}  # its latest run
        for key, run_id in held.items():
            runs.setdefault(key, (piece_store, run_id))
    notes: list[str] = []
    if parts is not None:
        whole = set(parts)
        piece_of = problem_pieces(spec)
        runs = {key: run for key, run in runs.items() if (piece_of[key[0]], key[2]) in whole}
        counted = sum((piece_of[key[0]], key[2]) in whole for key in spec.cells())
        notes.append(f"Interim: {parts_text(parts, spec.pieces)} finished for every arm ({counted} of "
                     f"{len(spec.cells())} cells); the other cells count as not run, so the arms are compared on the "
                     "same problems and seeds.")
    judges = _judges(spec.problems, spec.run.programs_dir, runs, notes)  # streams the vectors, as cell_result does
    found: dict[CellKey, tuple[ProgramStore, int | None]] = {key: runs.get(key, (stores[0], None))
                                                             for key in spec.cells()}
    cells = tuple(cell_result(found[key][0], spec, found[key][1], key, judges[key[0]]) for key in spec.cells())
    by_key = {(c.problem, c.policy, c.seed): c for c in cells}
    policies = spec.arm_names()  # a policy's arms, then the ensembles'

    def complete(cell: CellResult) -> bool:
        return complete_cell(cell, spec.iterations_of(cell.policy))

    table, curves, problem_curves, objectives = [], [], [], []
    for policy in policies:
        for problem in spec.problems:
            row_cells = [by_key[(problem, policy, s)] for s in spec.seeds_of(policy)]
            table.append(_row(problem, policy, row_cells, confidence, score_range))
            objectives += _objective_reach(problem, policy, row_cells, judges[problem])
            whole = [c for c in row_cells if complete(c)]
            for axis in AXES:
                curve = problem_curve(policy, problem, [c.steps for c in whole], axis, spec.iterations_of(policy),
                                      confidence, score_range, [c.stopped_early for c in whole])
                if curve is not None:
                    problem_curves.append(curve)
        seeds_rows = [[by_key[(problem, policy, seed)] for problem in spec.problems]
                      for seed in spec.seeds_of(policy)
                      if all(complete(by_key[(problem, policy, seed)]) for problem in spec.problems)]
        seeds_cells = [[cell.steps for cell in row] for row in seeds_rows]
        for axis in AXES:
            drawn = policy_curves(policy, spec.problems, seeds_cells, axis, spec.iterations_of(policy), confidence,
                                  score_range, [[cell.stopped_early for cell in row] for row in seeds_rows])
            if seeds_cells and not drawn:
                notes.append(f"{policy}: no curves against {AXIS_LABELS[axis]}: some of its runs were stored "
                             f"without that cost (an older store).")
            curves += drawn
    table_t = tuple(table)
    differences = _differences(table_t, policies, spec.problems, pairs, confidence, score_range, samples)
    outside = sum(r.mean_best_scalar.out_of_range for r in table_t if r.mean_best_scalar is not None)
    if outside:
        notes.append(f"{outside} best scalars fall outside the declared score range {score_range[0]:g}..."
                     f"{score_range[1]:g}: their intervals used the range widened to the data, which holds only if "
                     f"that bounds every score (set --score-range LOW,HIGH).")
    return ExperimentResults(
        name=spec.name, description=spec.description, db=spec.db,
        generated_at=datetime.now(UTC).isoformat(timespec="seconds"), iterations=spec.iterations,
        answers_per_iteration=spec.answers_per_iteration_of_cells(),
        problems=spec.problems, policies=policies, seeds=spec.seeds, confidence=confidence, score_range=score_range,
        axes=AXES, cells=cells, table=table_t, curves=tuple(curves), problem_curves=tuple(problem_curves),
        objectives=tuple(objectives),
        budgets=tuple(_budget(p, [c for c in cells if c.policy == p], spec) for p in policies),
        differences=differences, notes=tuple(notes),
        instructions=instructions_by_arm((found[key][0], key[1], found[key][1]) for key in spec.cells()),
        arm_seeds={arm: spec.seeds_of(arm) for arm in spec.arm_seeds},
        arm_budgets={arm: (budget.answers_per_iteration, budget.iterations) for arm, budget in spec.arm_budget.items()})


def complete_cell(cell: CellResult, iterations: int) -> bool:
    """Whether a cell counts for the curves: it ran every iteration of its budget (or stopped early), its policy
    alive."""
    return (cell.run_id is not None and (cell.iterations_done >= iterations or cell.stopped_early)
            and not cell.policy_failed)


def _row(problem: str, policy: str, cells: list[CellResult], confidence: float,
         score_range: tuple[float, float]) -> ProblemPolicyRow:
    ran = [c for c in cells if c.run_id is not None and (c.iterations_done > 0 or c.policy_errors > 0)]
    cracked = [c for c in ran if c.first_solved_iteration is not None]
    bests = [c.best_scalar for c in ran if c.best_scalar is not None]
    if not ran:
        state: RowState = "not_run"
    elif all(c.policy_failed for c in ran):
        state = "policy_failed"
    elif len(ran) < len(cells) or any(c.status != "finished" for c in ran):
        state = "partial"
    else:
        state = "ok"
    interval = survival = None
    if ran:
        low, high = clopper_pearson(len(cracked), len(ran), confidence)
        interval = Interval(len(cracked) / len(ran), low, high, len(ran))
        survival = kaplan_meier([float(c.first_solved_iteration if c.first_solved_iteration is not None
                                       else c.iterations_done) for c in ran],
                                [c.first_solved_iteration is not None for c in ran])
    return ProblemPolicyRow(
        problem=problem, policy=policy, state=state, seeds_run=len(ran), seeds_planned=len(cells),
        cracked=len(cracked), cracked_interval=interval, first_crack=survival,
        best_scalar=max(bests) if bests else None,
        mean_best_scalar=mean_interval(np.asarray(bests), confidence, score_range) if bests else None,
        policy_errors=sum(c.policy_errors for c in ran), policy_calls=sum(c.policy_calls for c in ran))


def _objective_reach(problem: str, policy: str, cells: list[CellResult], judge: _Judge) -> list[ObjectiveReach]:
    ran = [dict(c.objective_best) for c in cells if c.objective_best]
    if not ran:
        return []
    names = judge.problem.objective_names(ran[0]) if judge.problem is not None else tuple(ran[0])
    threshold = judge.problem.solved_all_at_least if judge.problem is not None else None
    reaches = []
    for name in names:
        values = [best[name] for best in ran if name in best]
        if not values:
            continue
        reached = None if threshold is None else sum(v >= threshold for v in values)
        reaches.append(ObjectiveReach(problem, policy, name, threshold, len(values), reached, max(values),
                                      float(np.mean(values))))
    return reaches


def _budget(policy: str, cells: list[CellResult], spec: ExperimentSpec) -> PolicyBudget:
    ran = [c for c in cells if c.run_id is not None]
    clocks = [c.wall_s for c in ran]
    tokens, answers = sum(c.completion_tokens for c in ran), sum(c.answers for c in ran)
    return PolicyBudget(policy, len(ran), sum(c.iterations_done for c in ran), sum(c.evaluations for c in ran),
                        tokens, sum(c.prompt_tokens for c in ran),
                        sum(c.policy_calls for c in ran), sum(c.policy_errors for c in ran),
                        None if any(c is None for c in clocks) else float(sum(c for c in clocks if c is not None)),
                        answers, tokens / answers if answers else None,
                        tuple(dict.fromkeys(p.max_new_tokens for p in spec.arm_policies(policy))))


def every_pair(names: Sequence[str]) -> list[tuple[str, str]]:
    """Every pair (a, b) of `names`, a before b in their order."""
    return [(a, b) for i, a in enumerate(names) for b in names[i + 1:]]


def _differences(table: tuple[ProblemPolicyRow, ...], policies: tuple[str, ...], problems: tuple[str, ...],
                 pairs: Pairs, confidence: float, score_range: tuple[float, float],
                 samples: int) -> tuple[PairedDifference, ...]:
    """Policy a minus policy b over the problems both ran with a live policy, for share cracked and mean best; the
    p-values Holm-adjusted over all these comparisons (every pair, both metrics: the rows a reader scans)."""
    rows = {(r.problem, r.policy): r for r in table}
    compared = [(a, b) for a, b in every_pair(policies) if pairs == "all" or a == policies[0]]
    out = []
    for a, b in compared:
        shared = tuple(p for p in problems if all(
            rows[(p, x)].state in ("ok", "partial") and rows[(p, x)].mean_best_scalar is not None for x in (a, b)))
        if not shared:
            continue
        share = {x: np.array([rows[(p, x)].cracked / rows[(p, x)].seeds_run for p in shared]) for x in (a, b)}
        best = {x: np.array([rows[(p, x)].mean_best_scalar.estimate for p in shared]) for x in (a, b)}  # type: ignore[union-attr]
        out.append(paired_difference("cracked_share", a, b, shared, share[a], share[b], confidence, (0.0, 1.0),
                                     samples))
        out.append(paired_difference("mean_best", a, b, shared, best[a], best[b], confidence, score_range, samples))
    return holm_correct(out)


def pooled_cells(table: Iterable[ProblemPolicyRow], policies: Iterable[str]) -> dict[str, tuple[int, int]]:
    """Per problem, (cells that cracked it, cells run) summed over `policies`' rows that ran with a live policy
    (state ok or partial; a row whose every call failed is no evidence of "cracked nothing"), in the table's
    problem order; a problem none of them ran is absent."""
    wanted = set(policies)
    pooled: dict[str, tuple[int, int]] = {}
    for row in table:
        if row.policy in wanted and row.state in ("ok", "partial") and row.seeds_run > 0:
            cracked, cells = pooled.get(row.problem, (0, 0))
            pooled[row.problem] = (cracked + row.cracked, cells + row.seeds_run)
    return pooled


def pooled_differences(results: ExperimentResults, arm_of: Mapping[str, str], samples: int = 100_000,
                       pairs: Sequence[tuple[str, str]] | None = None) -> tuple[PairedDifference, ...]:
    """The paired differences between groups of policies (arms; `arm_of`: policy -> arm, policies it does not name
    left out), for the study report: per problem, arm a's share of cells cracked minus arm b's, each arm's cells
    pooled over all its policies (a trained arm's checkpoints, one per training seed); the mean over the problems
    both arms ran with its betting interval, the sign and sign-flip permutation tests, Holm-adjusted together.
    `pairs`: these (a, b) as a - b, in this order (a study's registered comparisons; a pair whose arms ran no
    common problem is left out, but still counts in the Holm family, with p = 1); by default every pair of arms,
    in the order the arms first appear among the policies. The plain experiment report does not call it."""
    arms: dict[str, list[str]] = {}
    for policy in results.policies:
        if policy in arm_of:
            arms.setdefault(arm_of[policy], []).append(policy)
    shares = {arm: {problem: cracked / cells for problem, (cracked, cells) in pooled_cells(results.table,
                                                                                          policies).items()}
              for arm, policies in arms.items()}
    if pairs is None:
        pairs = every_pair(list(arms))
    out = []
    for a, b in pairs:
        if a not in shares or b not in shares:
            continue
        shared = tuple(p for p in results.problems if p in shares[a] and p in shares[b])
        if not shared:
            continue
        out.append(paired_difference("pooled_cracked_share", a, b, shared, np.array([shares[a][p] for p in shared]),
                                     np.array([shares[b][p] for p in shared]), results.confidence, (0.0, 1.0),
                                     samples))
    return holm_correct(out, family=len(pairs))
