"""Did a training run take without collapsing? Its reward's change (report/reward_change.py) beside the change in its
answers' length and variety, each read problem by problem from the run's train_log.jsonl.

Each algorithm is judged on the objective it optimises, as train_log.jsonl logs it per problem (OWN_OBJECTIVE; the
keys are evolve/rl/objective_logs.py's): GRPO on the mean reward per answer (`reward_objectives`, the paper's GRPO
scalar), VPO on the set value under one fixed set of weightings (`problem_set_value`), Multi-RLVR and Max@K on the
mean best declared scalar of a rollout's answers (`problem_best_scalar`; Max@K writes one answer, so its own scalar).
The per-answer mean is shown alongside whatever the measure. Why not the per-answer mean for all: an answer
(1, 1, 0, 0) written three times has set value 0.500 and per-answer mean 0.500, that answer beside (0, 0, 1, 1) and
a blank 0.6875 and 0.333, so the per-answer mean falls where VPO does what it is meant to. A log without the
algorithm's key at every step (older runs) is judged on the per-answer mean, with a note saying so.

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

from evolve.report.reward_change import PER_ANSWER, RewardChange, reward_change
from evolve.report.stats import holm

COLLAPSE_FLOOR = 0.5  # a ratio below this (half the start's tokens or distinct share) is a collapse
TAKES_ALPHA = 0.05
OWN_OBJECTIVE: dict[str, str] = {"grpo": PER_ANSWER, "vpo": "problem_set_value",
                                 "multi-rlvr": "problem_best_scalar", "max-at-k": "problem_best_scalar"}

METHOD = ("takes: the change in the algorithm's own objective over the train problems (last quarter of each problem's "
          f"steps minus its first quarter) above 0 at two-sided p < {TAKES_ALPHA} (exact sign-flip test); the "
          "objective: GRPO the mean reward per answer, VPO the set value under one fixed set of weightings, Multi-RLVR "
          "and Max@K the mean best declared scalar of a rollout's answers (a log without that measure: the mean reward "
          "per answer, noted); no collapse: over the same problems and quarters, the mean tokens per answer and the "
          "mean share of distinct answers in a group (by normalised AST) each at least "
          f"{COLLAPSE_FLOOR:.0%} of the first quarter's; KL: the mean logged KL to the base over the run's last "
          "quarter of steps, unknown where not computed (coefficient 0) and then never the least")


@dataclass(frozen=True)
class TrainingVerdict:
    """One run: its reward change, its answers' length and variety late against early, and what they say."""

    change: RewardChange
    tokens_ratio: float | None  # last quarter's mean tokens per answer over the first quarter's; None: not logged
    distinct_ratio: float | None  # the same for the share of distinct answers in a group
    kl_last: float | None  # mean KL to the base over the last quarter of steps; None: unknown (null or not logged)
    tokens_first: float | None = None  # the first quarter's mean tokens per answer (for the table)
    per_answer: RewardChange | None = None  # the mean reward per answer's change, shown beside `change`
    note: str = ""  # why `change` is not the algorithm's own objective, when it is not

    @property
    def measure(self) -> str:
        """The train_log key `change` read (reward_change.MEASURES)."""
        return self.change.measure

    def sentence(self) -> str:
        """The objective's change, the per-answer mean's beside it when that is another measure, and the note."""
        parts = [self.change.sentence()]
        answers = self.per_answer
        if answers is not None and answers.measure != self.change.measure and answers.change is not None:
            parts.append(f"mean reward per answer {answers.first:.3f} -> {answers.last:.3f} ({answers.change:+.3f}, "
                         f"p = {answers.p_value:.2g})")
        return "; ".join(parts + ([self.note] if self.note else []))

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


def judged_measure(records: list[dict[str, Any]], algo: str | None) -> tuple[str, str]:
    """The train_log key a run of `algo` is judged on, and a note when that is not its own objective's: the
    per-answer mean when the algorithm is not known or the log lacks its measure at a step that trained."""
    if algo not in OWN_OBJECTIVE:
        named = "no algorithm" if algo is None else f"an unknown algorithm ({algo})"
        return PER_ANSWER, f"judged on the mean reward per answer: the log names {named}"
    own = OWN_OBJECTIVE[algo]
    trained = [record for record in records if record.get(PER_ANSWER)]
    if own == PER_ANSWER or all(record.get(own) for record in trained):
        return own, ""
    return PER_ANSWER, (f"judged on the mean reward per answer, not {algo}'s own objective: the log predates "
                        f"`{own}` (missing at some or all steps)")


def last_quarter_kl(records: list[dict[str, Any]]) -> float | None:
    """The mean logged KL over the last quarter of steps; None (unknown) when any of them has none: a null KL is
    one not computed (coefficient 0), which is not a KL of 0."""
    ordered = sorted(records, key=lambda r: r.get("step", 0))
    last = ordered[-max(1, len(ordered) // 4):] if ordered else []
    kls = [r.get("kl") for r in last]
    if not kls or any(kl is None for kl in kls):
        return None
    return float(np.mean([float(kl) for kl in kls]))


def training_verdict(run: str, records: list[dict[str, Any]], algo: str | None = None) -> TrainingVerdict:
    """One run's verdict on its algorithm's own objective (`algo`, by default the log's `algo`)."""
    if algo is None:
        algo = next((str(r["algo"]) for r in records if r.get("algo")), None)
    measure, note = judged_measure(records, algo)
    tokens_ratio, tokens_first = quarter_ratio(records, "problem_tokens")
    distinct_ratio, _ = quarter_ratio(records, "problem_distinct")
    change = reward_change(run, records, measure)
    per_answer = change if measure == PER_ANSWER else reward_change(run, records, PER_ANSWER)
    return TrainingVerdict(change, tokens_ratio, distinct_ratio, last_quarter_kl(records), tokens_first,
                           per_answer, note)


def least_kl_that_takes(verdicts: list[TrainingVerdict]) -> TrainingVerdict | None:
    """The recipe's rule among pilots: of those that take without collapse, their p-values Holm-adjusted over every
    pilot judged (a grid of nine tested at 0.05 each would let one take by chance, and the rule then keeps the one
    that moved least), the one that moved least from the base; a pilot whose KL is unknown (null: not computed at
    coefficient 0) is never the least."""
    adjusted = holm([1.0 if v.change.p_value is None else v.change.p_value for v in verdicts])
    taking = [v for v, p in zip(verdicts, adjusted, strict=True)
              if v.verdict == "takes" and p < TAKES_ALPHA and v.kl_last is not None]
    return min(taking, key=lambda v: v.kl_last or 0.0) if taking else None
