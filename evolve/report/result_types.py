"""The records of an experiment's report: each cell, each problem x policy row, what each objective reached, each
arm's budget, and the whole (ExperimentResults); results.py computes them from the store, the views render them."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Literal

from evolve.report.by_choice import ArmInstructions
from evolve.report.results_curves import Curve, Step
from evolve.report.stats import Interval, PairedDifference, Survival

RowState = Literal["ok", "partial", "policy_failed", "not_run"]
Pairs = Literal["all", "first"]
# what a PairedDifference's metric compares, as the tables name it
METRIC_LABELS = {"cracked_share": "share of seeds cracked", "mean_best": "mean best scalar",
                 "pooled_cracked_share": "share of cells cracked, the arm's checkpoints pooled"}


@dataclass(frozen=True)
class CellResult:
    """One run: a problem evolved by a policy from a seed, judged by the problem's current rule."""

    problem: str
    policy: str
    seed: int
    run_id: int | None
    status: str  # the run's status, or "not_run"
    iterations_target: int
    iterations_done: int
    first_solved_iteration: int | None  # 0 if the seed program already solves it
    best_scalar: float | None
    best_by_iteration: tuple[float | None, ...]  # [t]: best scalar of programs from iterations <= t
    policy_calls: int  # calls that returned a completion
    policy_errors: int  # calls that failed
    evaluations: int  # children sent to the evaluator
    completion_tokens: int
    prompt_tokens: int
    wall_s: float | None  # the run's active wall clock at its last commit; None where the store has no clock
    steps: tuple[Step, ...]  # committed iterations in commit order, with cumulative costs
    objective_best: tuple[tuple[str, float], ...]  # per objective, the best value any program of the run reached
    rule: Literal["current", "stored"]  # whose verdicts these are: the problem's rule now, or the stored flags
    answers: int = 0  # candidate answers its requests asked for (`answers_asked`), failed requests' included

    @property
    def policy_failed(self) -> bool:
        return self.policy_errors > 0 and self.policy_calls == 0

    @property
    def stopped_early(self) -> bool:
        """A stop rule (run.stop_when_solved, run.target_score) finished the run before its budget: its curves hold
        their last value to the horizon, and the cell counts as whole."""
        return self.status == "finished" and self.iterations_done < self.iterations_target


@dataclass(frozen=True)
class ProblemPolicyRow:
    problem: str
    policy: str
    state: RowState
    seeds_run: int  # cells of this problem x policy with at least one iteration done
    seeds_planned: int
    cracked: int  # seeds whose run solved the problem
    cracked_interval: Interval | None  # k / n with its Clopper-Pearson interval; n = seeds_run
    first_crack: Survival | None  # Kaplan-Meier over seeds_run, seeds that never cracked censored at their budget
    best_scalar: float | None  # over all seeds
    mean_best_scalar: Interval | None  # mean over seeds of each seed's best, with its mean interval
    policy_errors: int
    policy_calls: int

    @property
    def median_first_iteration(self) -> float | None:
        return self.first_crack.median if self.first_crack is not None else None


@dataclass(frozen=True)
class ObjectiveReach:
    """One objective (test) of a problem under one policy: how many seeds reached it, and the best value seen."""

    problem: str
    policy: str
    objective: str
    threshold: float | None  # the problem's all_at_least; None: no per-objective bar, only best values
    seeds: int
    reached: int | None  # seeds whose run had a program with this objective >= threshold
    best: float  # over seeds
    mean_best: float  # mean over seeds of each seed's best


@dataclass(frozen=True)
class PolicyBudget:
    """What an arm spent, over its cells that ran.

    Tokens are compared per answer: the token cap (`policy.max_new_tokens`) is per answer, so a request for m answers
    may generate m times it, and an arm writing 3 answers per request spends about 3 times the tokens per call of a
    one-answer arm for the same answers. `tokens_per_answer` = completion_tokens / answers, the answers counted as
    plain sampling counts them (m per request, failed requests included), next to the arm's per-answer caps."""

    policy: str
    cells: int
    iterations: int
    evaluations: int
    completion_tokens: int
    prompt_tokens: int
    policy_calls: int
    policy_errors: int
    wall_s: float | None  # summed active wall clock of its cells; None when some cell has no clock
    answers: int  # candidate answers its requests asked for
    tokens_per_answer: float | None  # completion_tokens / answers; None without an answer
    max_new_tokens: tuple[int, ...]  # the per-answer token cap of its policies (several: an ensemble's members')


@dataclass(frozen=True)
class ExperimentResults:
    name: str
    description: str
    db: str
    generated_at: str
    iterations: int
    answers_per_iteration: int  # candidate answers every arm gets per iteration (the protocol)
    problems: tuple[str, ...]
    policies: tuple[str, ...]
    seeds: tuple[int, ...]
    confidence: float
    score_range: tuple[float, float]  # the declared range of scalars the mean intervals assume
    axes: tuple[str, ...]
    cells: tuple[CellResult, ...]
    table: tuple[ProblemPolicyRow, ...]
    curves: tuple[Curve, ...]  # cracked_share and best_score per policy and axis, over all problems
    problem_curves: tuple[Curve, ...]  # best_score per problem x policy x axis
    objectives: tuple[ObjectiveReach, ...]
    budgets: tuple[PolicyBudget, ...]
    differences: tuple[PairedDifference, ...]  # per pair of policies: cracked_share and mean_best
    notes: tuple[str, ...]  # what a reader must know before trusting the numbers (plain text)
    instructions: tuple[ArmInstructions, ...] = ()  # per arm with [prompt_evolution]: its instructions, pooled
    arm_seeds: dict[str, tuple[int, ...]] = field(default_factory=dict)  # arms running only some of the seeds
    arm_budgets: dict[str, tuple[int, int]] = field(default_factory=dict)  # (answers per iteration, iterations)

    def iterations_of(self, arm: str) -> int:
        """Iterations per cell of arm `arm`: its own budget's, else the experiment's."""
        return self.arm_budgets[arm][1] if arm in self.arm_budgets else self.iterations


    def row(self, problem: str, policy: str) -> ProblemPolicyRow:
        return next(row for row in self.table if row.problem == problem and row.policy == policy)

    def curve(self, policy: str, metric: str, problem: str | None = None, axis: str = "iterations") -> Curve:
        pool = self.curves if problem is None else self.problem_curves
        return next(c for c in pool if c.policy == policy and c.metric == metric and c.problem == problem
                    and c.axis == axis)

    def budget(self, policy: str) -> PolicyBudget:
        return next(b for b in self.budgets if b.policy == policy)
