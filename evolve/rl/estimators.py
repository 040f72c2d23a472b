"""The advantage estimators behind one registry and one call signature (veRL core_algos style).

Every estimator is ``estimator(group, settings, seed) -> advantages [G]`` where ``group`` is a ``GroupRewards``:

- ``rewards [G, m, d]``: one prompt's G rollouts, m answers each, d objectives (missing / failed answers: zero rows;
  a duplicate answer: a copy of its first occurrence, see advantages.reward_array);
- ``duplicates [G, m]`` (bool): which answers repeat an earlier answer of the same rollout (advantages.duplicate_mask);
- ``weights [d]``: the problem's declared objective weights (ones for a plain mean; ``objective_weights``).

Registered: ``vpo`` (reads the rewards only: duplicates cannot change a max, weights are drawn), ``grpo`` (m = 1,
the declared scalar), ``multi_rlvr`` (sum of the distinct answers' declared scalars, then GRPO) and ``max_at_k``
(m = 1, the declared scalar through the unbiased max@k transform, then GRPO). ``seed`` is
``evolve.seeds.derive(run_seed, VPO_WEIGHTS, step, group_index)``; only VPO draws from it.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np
from numpy.typing import ArrayLike, NDArray

from evolve.rl.advantages import (
    Sampler,
    declared_scalars,
    default_max_at_k,
    grpo_advantages,
    max_at_k_advantages,
    multi_rlvr_advantages,
    vpo_advantages,
)

if TYPE_CHECKING:
    from evolve.problems.problem import Problem


@dataclass(frozen=True)
class GroupRewards:
    """One prompt's group as every estimator sees it (``GroupRewards.of`` fills the defaults)."""

    rewards: NDArray[np.float64]  # [G, m, d]
    duplicates: NDArray[np.bool_]  # [G, m]
    weights: NDArray[np.float64]  # [d]

    def __post_init__(self) -> None:
        rewards = self.rewards
        if rewards.ndim != 3 or 0 in rewards.shape or not np.all(np.isfinite(rewards)):
            raise ValueError(f"rewards must be a non-empty finite [G, m, d] array, got shape {rewards.shape}")
        g, m, d = rewards.shape
        if self.duplicates.shape != (g, m):
            raise ValueError(f"duplicates must be [G, m] = [{g}, {m}], got shape {self.duplicates.shape}")
        w = self.weights
        if w.shape != (d,) or not np.all(np.isfinite(w)) or np.any(w < 0) or w.sum() <= 0:
            raise ValueError(f"weights must be {d} non-negative numbers with a positive sum, got {w.tolist()}")

    @classmethod
    def of(cls, rewards: ArrayLike, duplicates: ArrayLike | None = None,
           weights: ArrayLike | None = None) -> GroupRewards:
        """Validated: ``duplicates`` None means none, ``weights`` None means a plain mean (ones)."""
        array = np.array(rewards, dtype=np.float64)
        g, m, d = array.shape if array.ndim == 3 else (0, 0, 0)
        return cls(array, np.zeros((g, m), dtype=bool) if duplicates is None else np.array(duplicates, dtype=bool),
                   np.ones(d) if weights is None else np.array(weights, dtype=np.float64))

    @property
    def answer_scalars(self) -> NDArray[np.float64]:
        """``[G, m]``: each answer's declared scalar (``Problem.scalar`` of its vector)."""
        return declared_scalars(self.rewards, self.weights)

    def single_answer_scalars(self, name: str) -> NDArray[np.float64]:
        """``[G]``: the declared scalar of a one-answer method's rollouts; an error if m > 1."""
        if self.rewards.shape[1] != 1:
            raise ValueError(f"{name} takes one answer per rollout ([G, 1, d]), got m={self.rewards.shape[1]}")
        return self.answer_scalars[:, 0]


@dataclass(frozen=True)
class EstimatorSettings:
    """The estimators' options; each reads only its own."""

    eps: float = 1e-6  # added to the std of the group normalisation
    weight_draws: int = 100  # VPO: K Dirichlet weight rows per group
    alpha: float = 1.0  # VPO: Dirichlet concentration
    sampler: Sampler = "mc"  # VPO: "mc" or "sobol"
    max_at_k: int | None = None  # Max@K: k; None: max(2, G // 2), as the authors' default


Estimator = Callable[[GroupRewards, EstimatorSettings, int], NDArray[np.float64]]
ESTIMATORS: dict[str, Estimator] = {}


def register_estimator(name: str) -> Callable[[Estimator], Estimator]:
    """Decorator: add an estimator under ``name``; a second, different one under the same name is an error."""
    def decorator(function: Estimator) -> Estimator:
        if ESTIMATORS.get(name, function) is not function:
            raise ValueError(f"advantage estimator {name!r} is registered already")
        ESTIMATORS[name] = function
        return function
    return decorator


@register_estimator("vpo")
def vpo_estimator(group: GroupRewards, settings: EstimatorSettings, seed: int) -> NDArray[np.float64]:
    """VPO: group-normalised set values (population std) under K weight rows drawn from ``seed``."""
    return vpo_advantages(group.rewards, seed=seed, k=settings.weight_draws, alpha=settings.alpha,
                          sampler=settings.sampler, eps=settings.eps)


@register_estimator("grpo")
def grpo_estimator(group: GroupRewards, settings: EstimatorSettings, seed: int) -> NDArray[np.float64]:
    """GRPO: the declared scalar of each rollout's one answer, (r - mean) / (sample std + eps)."""
    return grpo_advantages(group.single_answer_scalars("GRPO"), eps=settings.eps)


@register_estimator("multi_rlvr")
def multi_rlvr_estimator(group: GroupRewards, settings: EstimatorSettings, seed: int) -> NDArray[np.float64]:
    """Multi-RLVR: duplicates dropped, the distinct answers' declared scalars summed, then GRPO."""
    return multi_rlvr_advantages(group.rewards, group.weights, group.duplicates, eps=settings.eps)


@register_estimator("max_at_k")
def max_at_k_estimator(group: GroupRewards, settings: EstimatorSettings, seed: int) -> NDArray[np.float64]:
    """Max@K: the declared scalar through the unbiased max@k per-sample transform, then GRPO normalisation."""
    scalars = group.single_answer_scalars("Max@K")
    k = settings.max_at_k if settings.max_at_k is not None else default_max_at_k(len(scalars))
    return max_at_k_advantages(scalars, k, eps=settings.eps)


def compute_advantages(
    name: str, group: GroupRewards, settings: EstimatorSettings | None = None, seed: int = 0
) -> NDArray[np.float64]:
    """Advantages ``[G]`` of one group with the estimator registered as ``name``."""
    if name not in ESTIMATORS:
        raise ValueError(f"unknown advantage estimator {name!r}: use one of {', '.join(sorted(ESTIMATORS))}")
    return ESTIMATORS[name](group, settings or EstimatorSettings(), seed)


def objective_weights(problem: Problem) -> NDArray[np.float64]:
    """``[d]``: the declared weights of the problem's objectives, in order (ones when its reduction is the mean)."""
    if problem.reduction == "weighted":
        return np.array([float(problem.weights[name]) for name in problem.objectives])
    return np.ones(len(problem.objectives))
