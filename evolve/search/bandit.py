"""Picks one arm per iteration (a policy of an ensemble, an evolved instruction): by fixed weights, by UCB1 or by
Thompson sampling on what each arm's iterations brought.

An iteration's gain is how far its best child rose above its parent's reduced score (0 when no child did, or when
the iteration made no child). UCB1 ranks an arm by its mean gain, scaled by the largest gain any iteration brought
(so rewards lie in [0, 1] whatever the problem's score scale), plus `exploration * sqrt(2 ln N / n)`; Thompson
draws Beta(1 + improved, 1 + not improved) per arm, improved being the iterations that beat their parent. Arms
never tried go first. The draws come from the caller's rng (seeded from the run seed and the iteration), so a run
replays its choices; the statistics only ever grow by `record`, which a resume calls again in commit order.
"""

from __future__ import annotations

import math
import random
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Literal

Rule = Literal["weights", "ucb1", "thompson"]


@dataclass
class ArmStats:
    """What one arm's committed iterations brought."""

    pulls: int = 0
    improved: int = 0  # iterations whose best child beat its parent
    gain: float = 0.0  # summed gains

    @property
    def mean_gain(self) -> float:
        return self.gain / self.pulls if self.pulls else 0.0


class Bandit:
    """Arm statistics and the rule that picks among them. Arms are named; `choose` may be restricted to some."""

    def __init__(self, rule: Rule, weights: dict[str, float] | None = None, exploration: float = 1.0) -> None:
        self.rule = rule
        self.weights = dict(weights or {})
        self.exploration = exploration
        self.stats: dict[str, ArmStats] = {}
        self.largest_gain = 0.0

    def record(self, arm: str, gain: float) -> None:
        """One committed iteration of `arm` that brought `gain` (>= 0)."""
        stats = self.stats.setdefault(arm, ArmStats())
        stats.pulls += 1
        stats.improved += gain > 0
        stats.gain += gain
        self.largest_gain = max(self.largest_gain, gain)

    def of(self, arm: str) -> ArmStats:
        return self.stats.get(arm, ArmStats())

    def choose(self, arms: Sequence[str], rng: random.Random) -> str:
        """One of `arms` (in a fixed order: the caller's) by the rule."""
        if len(arms) == 1:
            return arms[0]
        if self.rule == "weights":
            return rng.choices(list(arms), weights=[self.weights.get(arm, 1.0) for arm in arms])[0]
        untried = [arm for arm in arms if self.of(arm).pulls == 0]
        if untried:
            return rng.choice(untried)
        if self.rule == "thompson":
            draws = [rng.betavariate(1 + self.of(arm).improved, 1 + self.of(arm).pulls - self.of(arm).improved)
                     for arm in arms]
            return arms[max(range(len(arms)), key=draws.__getitem__)]
        total = sum(self.of(arm).pulls for arm in arms)
        values = [self.ucb(arm, total) for arm in arms]
        best = max(values)
        return rng.choice([arm for arm, value in zip(arms, values, strict=True) if value >= best - 1e-12])

    def ucb(self, arm: str, total_pulls: int) -> float:
        stats = self.of(arm)
        if not stats.pulls:
            return math.inf
        scale = self.largest_gain if self.largest_gain > 0 else 1.0
        return stats.mean_gain / scale + self.exploration * math.sqrt(2 * math.log(max(total_pulls, 1)) / stats.pulls)
