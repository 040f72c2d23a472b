"""Did a training run take without collapsing? Its reward's change (report/reward_change.py) beside the change in its
answers' length and variety, each read problem by problem from the run's train_log.jsonl.

The CPU study's GRPO "improved" its reward by collapsing onto a few short partial answers (6 % of its tokens, 4-9 %
new programs), so a recipe's pilot is judged on both: the reward up (the exact sign-flip test over the train
problems) and the answers neither much shorter nor much less varied than at the start. Each train problem is
compared with itself: its tokens per answer and its share of distinct answers over the last quarter of the steps
that trained on it, against the first quarter; the ratios are of the means over the problems seen at least twice.
The first quarter is near the base, not the base itself: only the problems of the first step are sampled before any
update (LoRA starts at zero), so a collapse under way within a problem's first visits is partly in its baseline.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from evolve.report.reward_change import RewardChange, reward_change

COLLAPSE_FLOOR = 0.5  # a ratio below this (half the start's tokens or distinct share) is a collapse
TAKES_ALPHA = 0.05

METHOD = ("takes: the train reward's change over the train problems (last quarter of each problem's steps minus its "
          f"first quarter) above 0 at two-sided p < {TAKES_ALPHA} (exact sign-flip test); no collapse: over the same "
          "problems and quarters, the mean tokens per answer and the mean share of distinct answers in a group "
          f"each at least {COLLAPSE_FLOOR:.0%} of the first quarter's; KL: the mean logged KL to the base over the "
          "run's last quarter of steps")


@dataclass(frozen=True)
class TrainingVerdict:
    """One run: its reward change, its answers' length and variety late against early, and what they say."""

    change: RewardChange
    tokens_ratio: float | None  # last quarter's mean tokens per answer over the first quarter's; None: not logged
    distinct_ratio: float | None  # the same for the share of distinct answers in a group
    kl_last: float | None  # mean KL to the base over the last quarter of steps
    tokens_first: float | None = None  # the first quarter's mean tokens per answer (for the table)

    @property
    def took(self) -> bool:
        return (self.change.p_value is not None and self.change.p_value < TAKES_ALPHA
                and (self.change.change or 0.0) > 0)

    @property
    def collapsed(self) -> bool | None:
        """True when answers got much shorter or less varied; None when the log has no per-problem figures."""
        if self.tokens_ratio is None or self.distinct_ratio is None:
            return None
        return self.tokens_ratio < COLLAPSE_FLOOR or self.distinct_ratio < COLLAPSE_FLOOR

    @property
    def verdict(self) -> str:
        if self.change.change is None:
            return "no problem seen twice yet"
        if self.collapsed is None:
            return "no per-problem log"
        if self.collapsed:
            return "collapsed"
        return "takes" if self.took else "did not take"


def quarter_ratio(records: list[dict[str, Any]], field: str) -> tuple[float | None, float | None]:
    """Per problem the mean of `field`'s values over the last quarter of its steps and over the first (problems seen
    at least twice): the ratio of their means over problems, and the first quarter's mean; None where not logged."""
    series: dict[str, list[float]] = {}
    for record in sorted(records, key=lambda r: r.get("step", 0)):
        for problem, value in (record.get(field) or {}).items():
            series.setdefault(problem, []).append(float(value))
    firsts, lasts = [], []
    for values in series.values():
        if len(values) < 2:
            continue
        quarter = max(1, len(values) // 4)
        firsts.append(float(np.mean(values[:quarter])))
        lasts.append(float(np.mean(values[-quarter:])))
    if not firsts or float(np.mean(firsts)) <= 0:
        return None, None
    return float(np.mean(lasts)) / float(np.mean(firsts)), float(np.mean(firsts))


def training_verdict(run: str, records: list[dict[str, Any]]) -> TrainingVerdict:
    tokens_ratio, tokens_first = quarter_ratio(records, "problem_tokens")
    distinct_ratio, _ = quarter_ratio(records, "problem_distinct")
    ordered = sorted(records, key=lambda r: r.get("step", 0))
    last = ordered[-max(1, len(ordered) // 4):] if ordered else []
    kls = [float(r["kl"]) for r in last if r.get("kl") is not None]
    return TrainingVerdict(reward_change(run, records), tokens_ratio, distinct_ratio,
                           float(np.mean(kls)) if kls else None, tokens_first)


def least_kl_that_takes(verdicts: list[TrainingVerdict]) -> TrainingVerdict | None:
    """The recipe's rule among pilots: of those that take without collapse, the one that moved least from the base."""
    taking = [v for v in verdicts if v.verdict == "takes" and v.kl_last is not None]
    return min(taking, key=lambda v: v.kl_last or 0.0) if taking else None
