"""What one training step writes to train_log.jsonl about its groups: rewards, spread, diversity, and per problem the
objective of each algorithm, so that a run is judged on what it optimises (report/training_takes.py).

Per problem and step, each the mean over that step's groups of the problem (a group: one prompt's G rollouts of m
answers, rewards ``[G, m, d]``):

- ``reward_objectives`` ``[d]``: the mean reward per answer row over the G x m rows, a blank or failed answer a zero
  row and an answer repeated within its rollout counted again. GRPO's measure (m = 1: the mean of its answers'
  rewards); the key older logs have.
- ``reward_objectives_distinct`` ``[d]``: the same with the repeats left out (an answer whose ``answer_key`` equals an
  earlier answer's of the same rollout, ``Group.duplicates``); blank answers still count as zero rows.
- ``problem_set_value``: VPO's objective, the mean over the rollouts of the set value R(S) = E_w[max over the
  rollout's answers of w . r] under one fixed set of weightings: ``LOG_WEIGHT_DRAWS`` scrambled-Sobol
  Dirichlet(alpha) rows on the problem's d objectives from the fixed seed ``LOG_WEIGHTS_SEED`` (alpha the run's,
  1.0 the paper's unless set). Training redraws 100 rows per group and step; the log's rows are the same at every
  step, in every run, for every problem of d objectives, so the values compare across steps and runs.
- ``problem_best_scalar``: the mean over the rollouts of the best declared scalar among the rollout's answers
  (``Group.scalars``; 0 when none scored): the yardstick of Multi-RLVR (m answers) and Max@K (one answer: its own
  scalar).

Why more than the per-answer mean: three copies of an answer scoring (1, 1, 0, 0) have set value 0.500 and
per-answer mean 0.500; that answer with (0, 0, 1, 1) and a blank has set value 0.6875 but per-answer mean 0.333.
The per-answer mean falls when VPO does what it is meant to.

``problem_distinct`` and ``diversity`` count answers by ``answer_key`` (the child program's normalised AST: comments
and layout do not count), so a policy repeating one program under different comments reads as collapsed.
"""

from __future__ import annotations

import functools
from typing import TYPE_CHECKING, Any

import numpy as np
from numpy.typing import NDArray

from evolve.rl.advantages import answer_key, dirichlet_weights, vpo_set_values

if TYPE_CHECKING:
    from evolve.rl.rollouts import Group
    from evolve.rl.train_config import TrainConfig

LOG_WEIGHT_DRAWS = 2048  # a power of two, for the Sobol points' balance
LOG_WEIGHTS_SEED = 0  # fixed: not a stream of the run (evolve.seeds), a yardstick shared by every run


@functools.lru_cache(maxsize=64)
def fixed_weights(d: int, alpha: float) -> NDArray[np.float64]:
    """``[LOG_WEIGHT_DRAWS, d]``: the log's weight rows for d objectives, the same at every call (read-only)."""
    weights = dirichlet_weights(LOG_WEIGHT_DRAWS, d, alpha, seed=LOG_WEIGHTS_SEED, sampler="sobol")
    weights.setflags(write=False)
    return weights


def set_value(group: Group, alpha: float) -> float:
    """The mean over the group's rollouts of their set values under the fixed weights."""
    return float(vpo_set_values(group.rewards, fixed_weights(group.rewards.shape[2], float(alpha))).mean())


def distinct_answer_means(group: Group) -> NDArray[np.float64]:
    """``[d]``: the mean reward per answer row without the rows that repeat an earlier answer of their rollout."""
    return group.rewards[~group.duplicates].mean(axis=0)  # a rollout's first row is never a repeat: never empty


def answer_kind(answer: str, code: str | None) -> str:
    """What counts as one distinct answer: the child program's ``answer_key``; an answer that built no child (a blank
    or unparseable edit) by its stripped text, as before, so two different failures stay two and blanks are one."""
    return answer_key(code) if code is not None else "text:" + answer.strip()


def group_kinds(group: Group) -> tuple[set[str], int]:
    """The distinct answers of a group and how many answers it wrote."""
    pairs = [(answer, code) for r in group.rollouts for answer, code in zip(r.answers, r.codes, strict=True)]
    return {answer_kind(answer, code) for answer, code in pairs}, len(pairs)


VECTOR_MEASURES = ("reward_objectives", "reward_objectives_distinct")  # per problem: one value per objective
SCALAR_MEASURES = ("problem_set_value", "problem_best_scalar")  # per problem: one number


def group_measures(group: Group, alpha: float) -> dict[str, Any]:
    """One group's value of each measure (VECTOR_MEASURES, then SCALAR_MEASURES)."""
    return {"reward_objectives": group.rewards.mean(axis=(0, 1)),
            "reward_objectives_distinct": distinct_answer_means(group),
            "problem_set_value": set_value(group, alpha),
            "problem_best_scalar": float(group.scalars.mean())}


def problem_objectives(groups: list[Group], alpha: float) -> dict[str, Any]:
    """Per problem, the mean over its groups of each algorithm's measure (the module docstring's keys)."""
    rows: dict[str, list[dict[str, Any]]] = {}
    for group in groups:
        rows.setdefault(group.task.problem.name, []).append(group_measures(group, alpha))
    out: dict[str, Any] = {key: {} for key in (*VECTOR_MEASURES, *SCALAR_MEASURES)}
    for name, measured in rows.items():
        for key in VECTOR_MEASURES:
            out[key][name] = np.mean([m[key] for m in measured], axis=0).round(4).tolist()
        for key in SCALAR_MEASURES:
            out[key][name] = round(float(np.mean([m[key] for m in measured])), 4)
    return out


def step_stats(config: TrainConfig, groups: list[Group], advantages: list[np.ndarray]) -> dict[str, Any]:
    """Rewards, each algorithm's objective per problem, advantage spread and answer diversity of one step's groups."""
    kinds: set[str] = set()
    written = 0
    scored = sum(v is not None for g in groups for r in g.rollouts for v in r.vectors)
    per_tokens: dict[str, list[float]] = {}  # per problem, each group's generated tokens per answer
    per_distinct: dict[str, list[float]] = {}  # per problem, each group's share of distinct answers
    for group in groups:
        name = group.task.problem.name
        group_distinct, answers = group_kinds(group)
        kinds |= group_distinct
        written += answers
        tokens = sum(len(r.completion_ids) for r in group.rollouts)
        per_tokens.setdefault(name, []).append(tokens / (config.group_size * config.m))
        per_distinct.setdefault(name, []).append(len(group_distinct) / answers if answers else 0.0)
    all_adv = np.concatenate(advantages)
    return {
        "reward": float(np.mean(np.concatenate([g.scalars for g in groups]))),
        **problem_objectives(groups, config.alpha),
        "set_value_weights": {"draws": LOG_WEIGHT_DRAWS, "alpha": config.alpha, "sampler": "sobol",
                              "seed": LOG_WEIGHTS_SEED},
        "scored_answers": scored / (len(groups) * config.group_size * config.m),
        "diversity": len(kinds) / written if written else 0.0,
        "reward_std": float(np.mean([g.scalars.std() for g in groups])),  # within a group, mean over groups
        "adv_std": float(all_adv.std()),  # ~1 (0.87 for GRPO's ddof=1 at G=4) unless groups had no spread
        "zero_spread_groups": sum(bool(np.all(a == 0)) for a in advantages),
        "tokens": sum(len(r.completion_ids) for g in groups for r in g.rollouts),
        # per problem, for a collapse read problem by problem (report/training_takes.py): the policy writing
        # fewer tokens or fewer distinct answers to the same prompts
        "problem_tokens": {name: round(float(np.mean(v)), 2) for name, v in per_tokens.items()},
        "problem_distinct": {name: round(float(np.mean(v)), 4) for name, v in per_distinct.items()},
    }
