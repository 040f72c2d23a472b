"""Did a training run's reward move? Per train problem, its mean reward over the last quarter of the steps that trained
on it minus over the first quarter, paired across the train problems, with an exact sign-flip permutation test.

A step trains on `prompts_per_step` of the problems in turn, so each problem has its own steps; a problem's reward at
a step is, by default, the mean of its objectives' rewards over that step's answers (train_log.jsonl's
`reward_objectives`). `reward_change(..., measure=KEY)` reads any other per-problem measure of the log the same way
(`MEASURES`, written by evolve/rl/objective_logs.py): a list per problem is averaged over its entries, a number taken
as it is; report/training_takes.py judges each algorithm on its own. The problems, not the steps, are the unit: steps
of one problem share its difficulty, and comparing one problem with itself early and late takes that out. Issue 28
asks that the training be long enough for the reward curve to move, shown: this is the showing (a curve alone, noisy
at 4 groups a step, cannot say whether it moved).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from evolve.report.permutation import permutation_test, snap_ties

PER_ANSWER = "reward_objectives"
MEASURES: dict[str, str] = {  # train_log.jsonl's per-problem measures: key -> what one step's value is
    PER_ANSWER: "mean reward per answer (its objectives' mean over the step's G x m answer rows; a blank answer a "
                "zero row, a repeated one counted again)",
    "reward_objectives_distinct": "mean reward per answer without the answers repeating an earlier one of their "
                                  "rollout (same answer_key)",
    "problem_set_value": "mean VPO set value of a rollout's answers (expected best answer under one fixed set of "
                         "Dirichlet weightings, the same at every step)",
    "problem_best_scalar": "mean over rollouts of the best declared scalar among a rollout's answers",
}

METHOD = ("per train problem: mean reward (its objectives' mean over the step's answers) over the last quarter of "
          "the steps that trained on it minus over the first quarter (at least one step each); across problems: "
          "mean of each side, problems up / down / unchanged, two-sided sign-flip permutation test of mean "
          "change 0 (exact up to 20 problems, or beyond when the changes are multiples of one unit); groups "
          "without spread: the prompts of all steps whose answers all got "
          "the same reward, so that no advantage and no gradient came from them, out of all prompts trained on")


@dataclass(frozen=True)
class RewardChange:
    """One training run's reward early against late, over the train problems seen at least twice."""

    run: str
    steps: int  # steps logged
    problems: int  # train problems with a first and a last quarter (seen at least twice)
    first: float | None  # mean over those problems of the first quarter's mean reward (None without problems)
    last: float | None
    up: int
    down: int
    unchanged: int
    p_value: float | None  # None without a problem to test: nothing was tested, which is not p = 1
    exact: bool
    groups: int = 0  # prompts trained on, over the steps that logged their groups without spread
    flat_groups: int = 0  # of them, those whose answers all got the same reward (train_log's zero_spread_groups)
    measure: str = PER_ANSWER  # the train_log key read (MEASURES)

    @property
    def change(self) -> float | None:
        return None if self.first is None or self.last is None else self.last - self.first

    def sentence(self) -> str:
        run = self.run if self.measure == PER_ANSWER else f"{self.run} ({self.measure})"
        if self.change is None:
            return f"{run}: {self.steps} steps, no train problem seen twice yet"
        return (f"{run}: {self.first:.3f} -> {self.last:.3f} ({self.change:+.3f}) over {self.problems} train "
                f"problems after {self.steps} steps, {self.up} up / {self.down} down, p = {self.p_value:.2g}; "
                f"{self.flat_groups} of {self.groups} groups without spread")


def problem_values(records: list[dict[str, Any]], measure: str = PER_ANSWER) -> dict[str, list[float]]:
    """Per train problem, its `measure` at each step that trained on it, in step order: a list (one value per
    objective) averaged over its entries, a number as it is; steps without the key or with null left out."""
    series: dict[str, list[float]] = {}
    for record in sorted(records, key=lambda r: r.get("step", 0)):
        for problem, value in (record.get(measure) or {}).items():
            entries = value if isinstance(value, list | tuple) else [value]
            values = [float(v) for v in entries if v is not None]
            if values:
                series.setdefault(problem, []).append(float(np.mean(values)))
    return series


def problem_rewards(records: list[dict[str, Any]]) -> dict[str, list[float]]:
    """Per train problem, its mean reward per answer at each step that trained on it, in step order."""
    return problem_values(records, PER_ANSWER)


def reward_change(run: str, records: list[dict[str, Any]], measure: str = PER_ANSWER) -> RewardChange:
    """The run's change in `measure` (default: the mean reward per answer) from the first to the last quarter of each
    problem's steps, paired over problems."""
    firsts, lasts = [], []
    for values in problem_values(records, measure).values():
        if len(values) < 2:
            continue
        quarter = max(1, len(values) // 4)
        firsts.append(float(np.mean(values[:quarter])))
        lasts.append(float(np.mean(values[-quarter:])))
    differences = snap_ties(np.array(lasts) - np.array(firsts))  # float noise is a tie, as the test takes it
    p_value, exact = permutation_test(differences) if len(differences) else (None, True)
    counted = [record for record in records if "zero_spread_groups" in record]  # logs before it was logged: none
    groups = sum(len(record.get("reward_objectives") or {}) for record in counted)
    flat_groups = sum(int(record["zero_spread_groups"] or 0) for record in counted)
    return RewardChange(run, len(records), len(firsts), float(np.mean(firsts)) if firsts else None,
                        float(np.mean(lasts)) if lasts else None, int(np.sum(differences > 0)),
                        int(np.sum(differences < 0)), int(np.sum(differences == 0)), p_value, exact, groups,
                        flat_groups, measure)
