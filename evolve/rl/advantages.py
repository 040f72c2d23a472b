"""Group advantage maths for RL post-training: VPO (vector rewards, answer sets), GRPO, Multi-RLVR and Max@K.

Shape contract (everything is one prompt's group, as numpy float64):

- ``rewards: [G, m, d]``: G rollouts, m answers per rollout, d objectives. An unparseable (or missing)
  answer is a row of zeros, as in the VPO paper; ``reward_array`` builds this array. GRPO is the m = 1 case.
- ``duplicates: [G, m]`` (bool): answer j of rollout g repeats an earlier answer of the same rollout
  (``duplicate_mask``; code answers compared by normalised AST, ``answer_key``). Its row holds a copy of the first.
- ``weights: [d]``: the problem's declared objective weights (ones for a plain mean); an answer's declared scalar
  is ``r . w / sum(w)`` (``declared_scalars``), exactly ``Problem.scalar``.
- Every estimator returns ``advantages: [G]``, one scalar per rollout, to broadcast to all its tokens.
  ``evolve.rl.estimators`` puts them behind one registry and one call signature.
- Zero spread: when the group's std is below ``ZERO_SPREAD_TOL`` (absolute; rewards are taken to be O(1),
  e.g. pass fractions) every advantage is 0, as in the authors' code (``std < 1e-6``). A group of one is 0.

Seed contract: VPO draws K Dirichlet weight rows once per group and shares them across its G rollouts
(common random numbers). The caller passes ``seed=derive(run_seed, VPO_WEIGHTS, step, group_index)``
(evolve.seeds), so every group and every step redraws, and a rerun with the same run seed reproduces the
advantages exactly.

Paper: "Vector Policy Optimization", arXiv 2605.22817 (https://arxiv.org/abs/2605.22817); the authors' code:
https://github.com/ryanboldi/vpo.
"""

from __future__ import annotations

import ast
import hashlib
import math
from collections.abc import Hashable, Sequence
from typing import Literal

import numpy as np
import torch
from numpy.typing import ArrayLike, NDArray

ZERO_SPREAD_TOL = 1e-6  # a group whose std is below this gets all-zero advantages
Sampler = Literal["mc", "sobol"]
_SOBOL_BITS = 30  # torch's SobolEngine returns multiples of 2**-30


def reward_array(
    answers: Sequence[Sequence[ArrayLike | None]],
    m: int,
    d: int,
    keys: Sequence[Sequence[Hashable | None]] | None = None,
) -> NDArray[np.float64]:
    """Build ``rewards [G, m, d]`` from each rollout's answer vectors; ``None`` (unparseable) and missing -> zeros.

    ``keys`` (same nesting as ``answers``, e.g. a normalised AST per answer) marks duplicates: a later answer
    whose key equals an earlier parsed answer's key in the same rollout gets a copy of that earlier vector.
    For VPO this is exactly dropping the duplicate, since the set value takes a max over answers and a
    copy can never change a max. Zeroing it instead would be wrong when rewards can be negative (0 could win
    the max). Multi-RLVR sums rows, so it also needs ``duplicate_mask(keys, m)`` to leave the copies out.
    """
    if m < 1 or d < 1:
        raise ValueError(f"m and d must be >= 1, got m={m}, d={d}")
    out = np.zeros((len(answers), m, d))
    for g, rollout in enumerate(answers):
        if len(rollout) > m:
            raise ValueError(f"rollout {g} has {len(rollout)} answers, more than m={m}")
        rollout_keys = keys[g] if keys is not None else [None] * len(rollout)
        if len(rollout_keys) != len(rollout):
            raise ValueError(f"rollout {g}: {len(rollout_keys)} keys for {len(rollout)} answers")
        first_of: dict[Hashable, int] = {}
        for j, (vector, key) in enumerate(zip(rollout, rollout_keys, strict=True)):
            if vector is None:
                continue
            if key is not None and key in first_of:
                out[g, j] = out[g, first_of[key]]
                continue
            row = np.asarray(vector, dtype=np.float64)
            if row.shape != (d,) or not np.all(np.isfinite(row)):
                raise ValueError(f"rollout {g} answer {j}: need {d} finite numbers, got {vector!r}")
            out[g, j] = row
            if key is not None:
                first_of[key] = j
    return out


def answer_key(code: str) -> str:
    """A key equal for two programs with the same normalised AST (comments, blank lines and layout ignored).

    As the VPO authors' ``ast_dedup`` (vpo/utils/ast_dedup.py): ``ast.dump(ast.parse(code))``, and for code that
    does not parse (or nests too deep) its whitespace-collapsed, lower-cased text.
    """
    try:
        fingerprint = "ast:" + ast.dump(ast.parse(code))
    except (SyntaxError, ValueError, RecursionError, MemoryError):
        fingerprint = "text:" + " ".join(code.split()).lower()
    return hashlib.sha1(fingerprint.encode()).hexdigest()


def duplicate_mask(keys: Sequence[Sequence[Hashable | None]], m: int) -> NDArray[np.bool_]:
    """``[G, m]``: True where an answer's key (not None) equals an earlier key of the same rollout; missing: False."""
    out = np.zeros((len(keys), m), dtype=bool)
    for g, rollout_keys in enumerate(keys):
        if len(rollout_keys) > m:
            raise ValueError(f"rollout {g} has {len(rollout_keys)} keys, more than m={m}")
        seen: set[Hashable] = set()
        for j, key in enumerate(rollout_keys):
            if key is not None:
                out[g, j] = key in seen
                seen.add(key)
    return out


def _check_rewards(rewards: ArrayLike) -> NDArray[np.float64]:
    array = np.asarray(rewards, dtype=np.float64)
    if array.ndim != 3 or 0 in array.shape:
        raise ValueError(f"rewards must be a non-empty [G, m, d] array, got shape {array.shape}")
    if not np.all(np.isfinite(array)):
        raise ValueError("rewards must be finite (score an unparseable answer as zeros)")
    return array


def group_normalise(values: ArrayLike, ddof: int, eps: float = 1e-6) -> NDArray[np.float64]:
    """(values - mean) / (std + eps) over the group with the given ddof; all 0 on zero spread or G <= ddof."""
    v = np.asarray(values, dtype=np.float64)
    if v.ndim != 1 or v.size == 0 or not np.all(np.isfinite(v)):
        raise ValueError(f"values must be a non-empty finite [G] array, got shape {v.shape}")
    if v.size <= ddof:
        return np.zeros_like(v)
    std = float(v.std(ddof=ddof))
    if std < ZERO_SPREAD_TOL:
        return np.zeros_like(v)
    return (v - v.mean()) / (std + eps)


def grpo_advantages(r: ArrayLike, eps: float = 1e-6) -> NDArray[np.float64]:
    """GRPO: scalar rewards ``r [G]`` -> (r - mean) / (sample std (ddof=1) + eps); 0 on zero spread or G = 1."""
    return group_normalise(r, ddof=1, eps=eps)


def _gamma_log_ppf(u: NDArray[np.float64], a: float) -> NDArray[np.float64]:
    """log of the Gamma(a, 1) quantile at u in (0, 1): bisection in log x on torch.special.gammainc (float64).

    Bracket: P(a, x) <= x^a / Gamma(a + 1) gives the lower end log_lo = (log u + lgamma(a + 1)) / a; the upper
    end grows by e until P >= u. After 80 halvings the error is ~1e-15 relative (~1e-8 as u -> 1, where P
    saturates). Where log_lo is
    below -700 (only for tiny a) the quantile q is taken as exp(log_lo), whose relative error is at most q / a.
    """
    log_lo = (np.log(u) + math.lgamma(a + 1.0)) / a
    a_t = torch.full(u.shape, a, dtype=torch.float64)

    def cdf(log_x: NDArray[np.float64]) -> NDArray[np.float64]:
        return torch.special.gammainc(a_t, torch.from_numpy(np.exp(log_x))).numpy()

    lo, hi = log_lo.copy(), np.maximum(log_lo, 0.0) + 1.0
    while np.any(short := cdf(hi) < u):
        hi[short] += 1.0
    for _ in range(80):
        mid = 0.5 * (lo + hi)
        below = cdf(mid) < u
        lo, hi = np.where(below, mid, lo), np.where(below, hi, mid)
    return np.where(log_lo < -700.0, log_lo, 0.5 * (lo + hi))


def dirichlet_weights(
    k: int, d: int, alpha: float = 1.0, *, seed: int, sampler: Sampler = "mc"
) -> NDArray[np.float64]:
    """K weight rows ``[k, d]`` on the simplex, w ~ Dirichlet(alpha * 1_d); d = 1 gives ones.

    ``"mc"``: i.i.d. draws from ``numpy.random.default_rng(seed).dirichlet``.
    ``"sobol"``: scrambled Sobol points u in (0, 1)^d (``torch.quasirandom.SobolEngine(d, scramble=True,
    seed=seed)``, shifted by half a grid cell so no coordinate is 0), each coordinate mapped through the
    Gamma(alpha) inverse CDF and the row normalised (Gamma-ratio construction of the Dirichlet). For alpha = 1
    that is exactly -log(u) exponentials; otherwise the inverse CDF is computed by bisection on
    ``torch.special.gammainc`` (scipy is not a dependency) and rows are normalised in log space so that tiny
    alpha cannot underflow a row to zeros. Sobol balance is best when k is a power of two.
    """
    if k < 1 or d < 1:
        raise ValueError(f"k and d must be >= 1, got k={k}, d={d}")
    if not (math.isfinite(alpha) and alpha > 0):
        raise ValueError(f"alpha must be a positive number, got {alpha}")
    if not isinstance(seed, int | np.integer) or seed < 0:
        raise ValueError(f"seed must be a non-negative int (use evolve.seeds.derive), got {seed!r}")
    if d == 1:
        return np.ones((k, 1))
    if sampler == "mc":
        return np.random.default_rng(int(seed)).dirichlet(np.full(d, alpha), size=k)
    if sampler != "sobol":
        raise ValueError(f"unknown sampler {sampler!r}: use 'mc' or 'sobol'")
    engine = torch.quasirandom.SobolEngine(d, scramble=True, seed=int(seed))
    u = engine.draw(k, dtype=torch.float64).numpy() + 2.0 ** -(_SOBOL_BITS + 1)
    log_g = np.log(-np.log(u)) if alpha == 1.0 else _gamma_log_ppf(u, alpha)
    log_g -= log_g.max(axis=1, keepdims=True)
    g = np.exp(log_g)
    return g / g.sum(axis=1, keepdims=True)


def vpo_set_values(rewards: ArrayLike, weights: ArrayLike) -> NDArray[np.float64]:
    """Set values ``[G]``: R(S_g) = mean over the K rows w of max over rollout g's own m answers of w . r."""
    r = _check_rewards(rewards)
    w = np.asarray(weights, dtype=np.float64)
    if w.ndim != 2 or w.shape[0] == 0 or w.shape[1] != r.shape[2]:
        raise ValueError(f"weights must be [K, d={r.shape[2]}], got shape {w.shape}")
    scores = np.einsum("gmd,kd->gkm", r, w)  # scores[g, k, j] = w_k . r(answer j of rollout g)
    return scores.max(axis=2).mean(axis=1)


def vpo_advantages(
    rewards: ArrayLike,
    *,
    seed: int | None = None,
    k: int = 100,
    alpha: float = 1.0,
    sampler: Sampler = "mc",
    eps: float = 1e-6,
    weights: ArrayLike | None = None,
) -> NDArray[np.float64]:
    """VPO: ``[G, m, d] -> [G]``, group-normalised set values (population std, ddof=0) under shared weights.

    The K weight rows are drawn once from ``dirichlet_weights(k, d, alpha, seed=seed, sampler=sampler)`` and
    used for every rollout of the group; pass ``seed=derive(run_seed, VPO_WEIGHTS, step, group)``. ``weights [K, d]``,
    if given, replaces the draw (then seed, k, alpha and sampler are unused).
    """
    r = _check_rewards(rewards)
    if weights is None:
        if seed is None:
            raise ValueError("vpo_advantages needs seed=derive(run_seed, VPO_WEIGHTS, step, group) or explicit weights")
        weights = dirichlet_weights(k, r.shape[2], alpha, seed=seed, sampler=sampler)
    return group_normalise(vpo_set_values(r, weights), ddof=0, eps=eps)


def declared_scalars(rewards: ArrayLike, weights: ArrayLike | None = None) -> NDArray[np.float64]:
    """``[G, m]``: each answer's declared scalar ``r . w / sum(w)`` (``weights [d]``; None: the plain mean)."""
    r = _check_rewards(rewards)
    if weights is None:
        return r.mean(axis=2)
    w = np.asarray(weights, dtype=np.float64)
    if w.shape != (r.shape[2],) or not np.all(np.isfinite(w)) or not np.all(w >= 0) or w.sum() <= 0:
        raise ValueError(f"weights must be {r.shape[2]} non-negative numbers with a positive sum, got {weights!r}")
    return r @ (w / w.sum())


def multi_rlvr_advantages(
    rewards: ArrayLike, weights: ArrayLike | None = None, duplicates: ArrayLike | None = None, eps: float = 1e-6
) -> NDArray[np.float64]:
    """Multi-RLVR as the authors' code does it: ``[G, m, d] -> [G]``.

    Each rollout's scalar is the sum of its distinct answers' declared scalars: duplicates ``[G, m]`` are dropped
    and the set padded back to m with zero rows (vpo_tasks/maze.py ``score_multi``: ``dedup_routes``,
    ``pad_matrix``, ``sum(weighted_scalar(row))``), then GRPO (sample std). ``weights [d]``: declared objective
    weights (None: plain mean). With a plain mean this ranks rollouts as the authors' LiveCodeBench ``sum_all``
    (sum of every entry of the de-duplicated matrix) does: the two differ by the factor d, which GRPO divides out.
    """
    scalars = declared_scalars(rewards, weights)
    if duplicates is not None:
        mask = np.asarray(duplicates, dtype=bool)
        if mask.shape != scalars.shape:
            raise ValueError(f"duplicates must be [G, m] = {list(scalars.shape)}, got shape {mask.shape}")
        scalars = np.where(mask, 0.0, scalars)
    return grpo_advantages(scalars.sum(axis=1), eps=eps)


def default_max_at_k(group_size: int) -> int:
    """The authors' default k for Max@K: max(2, G // 2)."""
    return max(2, group_size // 2)


def _check_k(r: NDArray[np.float64], k: int) -> None:
    if r.ndim != 1 or r.size < 2 or not np.all(np.isfinite(r)):
        raise ValueError(f"Max@K needs a finite [G] reward array with G >= 2, got shape {r.shape}")
    if not 1 <= k < r.size:
        raise ValueError(f"Max@K needs 1 <= k <= G - 1, got k={k} for G={r.size} (k = G leaves no advantage "
                         "after the group mean is subtracted)")


def max_at_k_value(rewards: ArrayLike, k: int) -> float:
    """The unbiased estimate of E[max of k samples] from G samples: the mean of max over all k-subsets,
    ``sum_i C(i - 1, k - 1) r_(i) / C(G, k)`` with r_(1) <= ... <= r_(G)."""
    r = np.sort(np.asarray(rewards, dtype=np.float64))
    _check_k(r, k)
    weights = np.array([math.comb(i, k - 1) for i in range(r.size)], dtype=np.float64)
    return float(weights @ r / math.comb(r.size, k))


def max_at_k_rewards(rewards: ArrayLike, k: int) -> NDArray[np.float64]:
    """``[G] -> [G]``: the per-sample reward whose policy gradient is an unbiased gradient of max@k.

    Sample i gets the mean over all k-subsets S of the group of ``max(S) * [i in S]``:
    ``(C(rank_i - 1, k - 1) r_i + sum_{rank_j > rank_i} C(rank_j - 2, k - 2) r_j) / C(G, k)`` with 1-based ranks
    in ascending order ("The Best of N Worlds", arXiv 2510.23393; the authors' veRL
    ``compute_max_at_k_outcome_advantage``). Tied rewards get equal values whatever order the sort gives them.
    """
    r = np.asarray(rewards, dtype=np.float64)
    _check_k(r, k)
    n = r.size
    order = np.argsort(r, kind="stable")
    ranked = r[order]
    own = np.array([math.comb(i, k - 1) for i in range(n)], dtype=np.float64) * ranked
    above = np.zeros(n)
    if k >= 2:  # sample j (0-based rank) is the max of a subset holding i < j in C(j - 1, k - 2) ways
        paid = np.array([math.comb(j - 1, k - 2) if j >= 1 else 0 for j in range(n)], dtype=np.float64) * ranked
        above[:-1] = np.cumsum(paid[::-1])[::-1][1:]
    out = np.empty(n)
    out[order] = (own + above) / math.comb(n, k)
    return out


def max_at_k_advantages(rewards: ArrayLike, k: int, eps: float = 1e-6) -> NDArray[np.float64]:
    """Max@K: ``[G] -> [G]``, ``max_at_k_rewards`` group-normalised as GRPO (sample std); 0 on zero spread."""
    return group_normalise(max_at_k_rewards(rewards, k), ddof=1, eps=eps)
