"""Tests for evolve.rl.advantages and evolve.rl.estimators: hand-computed VPO / GRPO / Multi-RLVR / Max@K cases,
brute force over all k-subsets, and properties over many seeds."""

import itertools
import math
from pathlib import Path

import numpy as np
import pytest
import torch

from evolve.rl.advantages import (
    _gamma_log_ppf,
    answer_key,
    declared_scalars,
    dirichlet_weights,
    duplicate_mask,
    group_normalise,
    grpo_advantages,
    max_at_k_advantages,
    max_at_k_rewards,
    max_at_k_value,
    multi_rlvr_advantages,
    reward_array,
    vpo_advantages,
    vpo_set_values,
)
from evolve.rl.estimators import (
    ESTIMATORS,
    EstimatorSettings,
    GroupRewards,
    compute_advantages,
    objective_weights,
    register_estimator,
)
from evolve.seeds import VPO_WEIGHTS, derive

EPS = 1e-6
SEEDS = range(200)

# Three rollouts, m = 2 answers, d = 2 objectives; rollout 2's second answer is unparseable (zeros).
HAND_REWARDS = np.array([
    [[1.0, 0.0], [0.0, 1.0]],  # two specialists
    [[1.0, 1.0], [0.0, 0.0]],  # one generalist that dominates everything
    [[0.5, 0.0], [0.0, 0.0]],
])
HAND_WEIGHTS = np.array([[1.0, 0.0], [0.0, 1.0], [0.5, 0.5]])  # K = 3 fixed rows


def random_group(rng: np.random.Generator, g: int = 8, m: int = 3, d: int = 4) -> np.ndarray:
    return rng.random((g, m, d))


def test_grpo_by_hand():
    # r = [1, 2, 3, 6]: mean 3, deviations -2, -1, 0, 3, squares sum 14, sample var 14 / 3, std 2.16025
    expected = [-0.9258196712013211, -0.46290983560066057, 0.0, 1.3887295068019816]
    assert grpo_advantages([1.0, 2.0, 3.0, 6.0]) == pytest.approx(expected, rel=1e-12)
    std = math.sqrt(14 / 3)
    assert grpo_advantages([1.0, 2.0, 3.0, 6.0]) == pytest.approx([-2 / (std + EPS), -1 / (std + EPS), 0, 3 / (std + EPS)])


def test_vpo_set_values_and_advantages_by_hand():
    # rollout 0: w=(1,0): max(1, 0) = 1; w=(0,1): max(0, 1) = 1; w=(.5,.5): max(.5, .5) = .5 -> 2.5 / 3 = 5/6
    # rollout 1: 1, 1, max(1, 0) = 1 -> 1
    # rollout 2: .5, 0, max(.25, 0) = .25 -> .75 / 3 = 1/4
    values = vpo_set_values(HAND_REWARDS, HAND_WEIGHTS)
    assert values == pytest.approx([5 / 6, 1.0, 1 / 4], rel=1e-15)
    # mean 25/36; deviations 5/36, 11/36, -16/36; population var (25 + 121 + 256) / 36^2 / 3 = 402 / 3888
    std = math.sqrt(402 / 3888)  # 0.32155
    expected = [5 / 36 / (std + EPS), 11 / 36 / (std + EPS), -16 / 36 / (std + EPS)]
    assert expected == pytest.approx([0.4319328695112755, 0.9502523129248062, -1.3821851824360816], rel=1e-12)
    assert vpo_advantages(HAND_REWARDS, weights=HAND_WEIGHTS) == pytest.approx(expected, rel=1e-12)
    # through the registry VPO draws its K rows from the seed and reads nothing but the rewards
    group = GroupRewards.of(HAND_REWARDS, duplicates=[[False, True]] * 3, weights=[5.0, 1.0])
    drawn = vpo_advantages(HAND_REWARDS, seed=7, k=64, sampler="sobol")
    settings = EstimatorSettings(weight_draws=64, sampler="sobol")
    assert np.array_equal(compute_advantages("vpo", group, settings, seed=7), drawn)


def test_multi_rlvr_by_hand():
    # declared scalars (plain mean) per answer: rollout 0: .5 + .5 = 1; rollout 1: 1 + 0 = 1; rollout 2: .25 + 0 = .25
    # mean .75, deviations .25, .25, -.5, sample var (.0625 + .0625 + .25) / 2 = .1875
    std = math.sqrt(0.1875)
    expected = [0.25 / (std + EPS), 0.25 / (std + EPS), -0.5 / (std + EPS)]
    assert multi_rlvr_advantages(HAND_REWARDS) == pytest.approx(expected, rel=1e-12)
    assert compute_advantages("multi_rlvr", GroupRewards.of(HAND_REWARDS), seed=3) == pytest.approx(expected, rel=1e-12)


def test_multi_rlvr_a_duplicated_best_answer_earns_nothing_extra():
    best = "def f(x):\n    return x * 2\n"
    best_again = "def f(x):  # the same program, commented and spaced out\n\n    return x*2\n"
    other = "def f(x):\n    return x + x + 1\n"
    assert answer_key(best) == answer_key(best_again) != answer_key(other)
    codes = [[best, best_again, best], [best, other, None], [best, None, None]]  # None: no child was built
    answers = [[[1.0, 1.0], [1.0, 1.0], [1.0, 1.0]], [[1.0, 1.0], [0.5, 0.5], None], [[1.0, 1.0], None, None]]
    keys = [[answer_key(c) if c else None for c in rollout] for rollout in codes]
    rewards = reward_array(answers, m=3, d=2, keys=keys)
    duplicates = duplicate_mask(keys, m=3)
    assert duplicates.tolist() == [[False, True, True], [False, False, False], [False, False, False]]
    # distinct answers' scalars: rollout 0: 1 (its copies count 0), rollout 1: 1 + .5 = 1.5, rollout 2: 1
    # mean 7/6, deviations -1/6, 1/3, -1/6, sample var (1 + 4 + 1) / 36 / 2 = 1/12
    std = math.sqrt(1 / 12)
    expected = [-1 / 6 / (std + EPS), 1 / 3 / (std + EPS), -1 / 6 / (std + EPS)]
    assert expected == pytest.approx([-0.5773483, 1.1546966, -0.5773483], rel=1e-6)
    got = compute_advantages("multi_rlvr", GroupRewards.of(rewards, duplicates))
    assert got == pytest.approx(expected, rel=1e-12)
    assert got[0] == got[2]  # writing the best answer three times is worth exactly writing it once
    # the authors' form: drop the duplicates, pad back to m with zero rows, sum
    dropped_padded = rewards.copy()
    dropped_padded[0, 1:] = 0.0
    assert multi_rlvr_advantages(dropped_padded) == pytest.approx(got, rel=1e-12)
    # what counting every row did before: the triplicated best answer came first
    assert np.argmax(multi_rlvr_advantages(rewards)) == 0


def test_multi_rlvr_respects_the_declared_weights_where_summing_raw_entries_would_flip_the_sign():
    from evolve.problems.problem import load_problem

    problem = load_problem("circle_packing", Path(__file__).resolve().parents[1] / "programs")
    weights = objective_weights(problem)
    assert weights.tolist() == [0.8, 0.1, 0.1]  # sum_ratio, containment, separation
    # rollout 0: a big radii sum whose circles overlap; rollout 1: a valid packing with small circles
    rewards = np.array([[[0.9, 0.5, 0.5], [0.0, 0.0, 0.0]],
                        [[0.5, 1.0, 1.0], [0.0, 0.0, 0.0]]])
    # declared scalars .8 * .9 + .1 * .5 + .1 * .5 = .82 and .8 * .5 + .1 + .1 = .6; raw sums 1.9 and 2.5
    scalars = declared_scalars(rewards, weights)
    assert scalars[:, 0] == pytest.approx([0.82, 0.6], rel=1e-12)
    for vector, scalar in zip(rewards[:, 0], scalars[:, 0], strict=True):
        assert problem.scalar(dict(zip(problem.objectives, vector.tolist(), strict=True))) == pytest.approx(scalar)
    # G = 2: deviations +-.11, sample std .11 * sqrt(2): advantages +-1 / sqrt(2)
    std = 0.11 * math.sqrt(2)
    expected = [0.11 / (std + EPS), -0.11 / (std + EPS)]
    assert compute_advantages("multi_rlvr", GroupRewards.of(rewards, weights=weights)) == pytest.approx(expected)
    raw_sum = grpo_advantages(rewards.sum(axis=(1, 2)))  # the old estimator: every entry summed
    assert raw_sum[0] < 0 < raw_sum[1]  # the sign flips: the weights decide which rollout is reinforced


def test_declared_weights_reproduce_every_problems_scalar():
    from evolve.problems.problem import load_problem

    programs = Path(__file__).resolve().parents[1] / "programs"
    rng = np.random.default_rng(0)
    for folder in sorted(p for p in programs.iterdir() if (p / "problem.toml").is_file()):
        problem = load_problem(folder.name, programs)
        vectors = rng.random((5, 1, len(problem.objectives)))
        scalars = declared_scalars(vectors, objective_weights(problem))[:, 0]
        expected = [problem.scalar(dict(zip(problem.objectives, v.tolist(), strict=True))) for v in vectors[:, 0]]
        np.testing.assert_allclose(scalars, expected, rtol=1e-12, err_msg=problem.name)


def test_grpo_dispatch_uses_the_declared_scalar():
    vectors = np.array([[1.0, 0.0], [1.0, 1.0], [0.0, 0.0]])[:, None, :]  # [G=3, 1, d=2]
    assert compute_advantages("grpo", GroupRewards.of(vectors)) == pytest.approx(grpo_advantages([0.5, 1.0, 0.0]))
    # weights (3, 1): weighted means (3*1 + 0) / 4, (3 + 1) / 4, 0
    weighted = GroupRewards.of(vectors, weights=[3, 1])
    assert compute_advantages("grpo", weighted) == pytest.approx(grpo_advantages([0.75, 1.0, 0.0]))
    with pytest.raises(ValueError, match="one answer per rollout"):
        compute_advantages("grpo", GroupRewards.of(HAND_REWARDS))
    with pytest.raises(ValueError, match="one answer per rollout"):
        compute_advantages("max_at_k", GroupRewards.of(HAND_REWARDS))
    with pytest.raises(ValueError, match="unknown advantage estimator"):
        compute_advantages("ppo", GroupRewards.of(vectors))
    with pytest.raises(ValueError, match="weights must be"):
        GroupRewards.of(vectors, weights=[1.0, -1.0])
    with pytest.raises(ValueError, match="duplicates must be"):
        GroupRewards.of(vectors, duplicates=[[False, False]] * 3)
    assert set(ESTIMATORS) == {"grpo", "vpo", "multi_rlvr", "max_at_k"}
    with pytest.raises(ValueError, match="registered already"):
        register_estimator("grpo")(lambda group, settings, seed: np.zeros(1))


def brute_force_max_at_k(r: np.ndarray, k: int) -> tuple[float, np.ndarray]:
    """Mean over all k-subsets of their max, and per sample the mean over all k-subsets of max(S) * [i in S]."""
    subsets = list(itertools.combinations(range(len(r)), k))
    value = sum(max(r[list(s)]) for s in subsets) / len(subsets)
    per_sample = np.array([sum(max(r[list(s)]) for s in subsets if i in s) for i in range(len(r))]) / len(subsets)
    return value, per_sample


def test_max_at_k_matches_brute_force_over_all_k_subsets():
    rng = np.random.default_rng(0)
    for trial in range(60):
        n = int(rng.integers(2, 9))
        r = rng.random(n)
        if trial % 3 == 0:
            r = np.round(r * 3) / 3  # ties
        if trial % 5 == 0:
            r = r - 0.5  # negative rewards
        for k in range(1, n):
            value, per_sample = brute_force_max_at_k(r, k)
            assert max_at_k_value(r, k) == pytest.approx(value, rel=1e-12, abs=1e-12)
            np.testing.assert_allclose(max_at_k_rewards(r, k), per_sample, rtol=1e-12, atol=1e-12)
            expected = group_normalise(per_sample, ddof=1)
            np.testing.assert_allclose(max_at_k_advantages(r, k), expected, rtol=1e-9, atol=1e-12)
            group = GroupRewards.of(r[:, None, None])
            np.testing.assert_allclose(compute_advantages("max_at_k", group, EstimatorSettings(max_at_k=k)),
                                       expected, rtol=1e-9, atol=1e-12)
    r = np.array([0.1, 0.7, 0.4, 0.9])
    default = compute_advantages("max_at_k", GroupRewards.of(r[:, None, None]))  # k = max(2, 4 // 2) = 2
    np.testing.assert_allclose(default, max_at_k_advantages(r, 2), rtol=1e-12)
    # k = 1 is GRPO on r / G (the eps in the denominator is not scaled with it, hence the tolerance)
    np.testing.assert_allclose(max_at_k_advantages(r, 1), grpo_advantages(r), rtol=1e-4)


def test_max_at_k_by_hand():
    # r = (1, 2, 3), k = 2: subsets {1,2} max 2, {1,3} max 3, {2,3} max 3; E[max] = 8 / 3
    # sample 1 sits in {1,2}, {1,3}: (2 + 3) / 3; sample 2 in {1,2}, {2,3}: (2 + 3) / 3; sample 3: (3 + 3) / 3
    assert max_at_k_value([3.0, 1.0, 2.0], 2) == pytest.approx(8 / 3)
    assert max_at_k_rewards([3.0, 1.0, 2.0], 2) == pytest.approx([2.0, 5 / 3, 5 / 3])
    with pytest.raises(ValueError, match="k <= G - 1"):
        max_at_k_rewards([1.0, 2.0], 2)
    with pytest.raises(ValueError, match="G >= 2"):
        max_at_k_rewards([1.0], 1)


def test_max_at_k_gives_an_exactly_unbiased_gradient_of_the_expected_best_of_k():
    """A 3-outcome softmax policy, n = 4 samples, k = 2: the expectation of sum_i A_i grad log p(y_i) over all 3^4
    outcomes equals the gradient of E[max of k independent samples] (computed from its CDF by autograd)."""
    values = torch.tensor([0.0, 0.3, 1.0], dtype=torch.float64)
    logits = torch.tensor([0.2, -0.1, 0.4], dtype=torch.float64, requires_grad=True)
    n, k = 4, 2
    p = torch.softmax(logits, 0)
    cdf = torch.cumsum(p, 0)
    below = torch.cat([torch.zeros(1, dtype=torch.float64), cdf[:-1]])
    expected_best = (values * (cdf ** k - below ** k)).sum()  # outcomes sorted by value: P(max = v_c)
    (true_gradient,) = torch.autograd.grad(expected_best, logits)
    probs = p.detach().numpy()
    estimate = np.zeros(3)
    for draw in itertools.product(range(3), repeat=n):
        weight = np.prod(probs[list(draw)])
        advantages = max_at_k_rewards(values.numpy()[list(draw)], k)
        score = sum(a * (np.eye(3)[c] - probs) for a, c in zip(advantages, draw, strict=True))  # grad log softmax
        estimate += weight * score
    np.testing.assert_allclose(estimate, true_gradient.numpy(), rtol=1e-10, atol=1e-12)


def test_d1_m1_vpo_is_population_normalised_reward():
    for seed in SEEDS:
        rng = np.random.default_rng(seed)
        r = rng.normal(size=int(rng.integers(2, 12)))
        expected = (r - r.mean()) / (r.std(ddof=0) + EPS)
        for sampler in ("mc", "sobol"):
            got = vpo_advantages(r[:, None, None], seed=seed, sampler=sampler)
            np.testing.assert_allclose(got, expected, rtol=1e-12, atol=1e-12)
        grpo = grpo_advantages(r)  # same ordering; GRPO only divides by the (larger) sample std
        assert np.array_equal(np.argsort(got, kind="stable"), np.argsort(grpo, kind="stable"))
        np.testing.assert_allclose(grpo * (r.std(ddof=1) + EPS) / (r.std(ddof=0) + EPS), got, rtol=1e-10)


def test_m1_set_value_is_mean_weight_dot_reward():
    rng = np.random.default_rng(0)
    rewards = random_group(rng, m=1)
    weights = dirichlet_weights(100, 4, seed=5)
    np.testing.assert_allclose(vpo_set_values(rewards, weights), rewards[:, 0, :] @ weights.mean(axis=0), rtol=1e-12)


def test_dominated_answer_never_changes_set_value():
    for seed in SEEDS:
        rng = np.random.default_rng(seed)
        rewards = random_group(rng)
        weights = dirichlet_weights(50, 4, alpha=float(rng.choice([0.3, 1.0])), seed=seed)
        source = rewards[np.arange(8), rng.integers(0, 3, size=8)]  # one existing answer per rollout
        dominated = source - rng.uniform(1e-3, 1.0, size=source.shape)  # worse in every objective
        grown = np.concatenate([rewards, dominated[:, None, :]], axis=1)
        np.testing.assert_allclose(vpo_set_values(grown, weights), vpo_set_values(rewards, weights), rtol=0, atol=1e-13)


def test_permutations():
    for seed in SEEDS:
        rng = np.random.default_rng(seed)
        rewards = random_group(rng)
        base = vpo_advantages(rewards, seed=seed)
        shuffled_answers = np.stack([row[rng.permutation(3)] for row in rewards])
        np.testing.assert_allclose(vpo_advantages(shuffled_answers, seed=seed), base, rtol=1e-12, atol=1e-12)
        order = rng.permutation(8)  # same weights (same seed) -> advantages are permuted with the rollouts
        np.testing.assert_allclose(vpo_advantages(rewards[order], seed=seed), base[order], rtol=1e-12, atol=1e-12)
        for estimator in (multi_rlvr_advantages, lambda r: grpo_advantages(r[:, 0, 0])):
            np.testing.assert_allclose(estimator(rewards[order]), estimator(rewards)[order], rtol=1e-12)


def test_advantages_are_centred_with_unit_spread():
    for seed in range(20):
        rewards = random_group(np.random.default_rng(seed))
        advantages = vpo_advantages(rewards, seed=seed, sampler="sobol")
        assert abs(advantages.sum()) < 1e-9
        assert advantages.std() == pytest.approx(1.0, rel=1e-4)  # std / (std + 1e-6)


def test_zero_spread_groups_give_zero_advantages():
    one = np.random.default_rng(1).random((1, 3, 4))
    same = np.repeat(one, 6, axis=0)
    for rewards in (same, np.zeros((6, 3, 4)), one, same + np.arange(6)[:, None, None] * 1e-9):
        assert np.array_equal(vpo_advantages(rewards, seed=0), np.zeros(len(rewards)))
        assert np.array_equal(multi_rlvr_advantages(rewards), np.zeros(len(rewards)))
    assert np.array_equal(grpo_advantages([0.7] * 5), np.zeros(5))
    assert np.array_equal(grpo_advantages([0.7]), np.zeros(1))  # G = 1: the sample std is undefined
    # answers differ but every rollout holds the same set in another order: same set value, zero spread
    a = one[0]
    assert np.array_equal(vpo_advantages(np.stack([a, a[::-1], a[[1, 2, 0]]]), seed=0), np.zeros(3))


def test_reward_array_unparseable_missing_and_duplicates():
    rewards = reward_array([[[1, 2], None, [0.5, 0.5]], [None], []], m=3, d=2)
    expected = np.array([[[1, 2], [0, 0], [0.5, 0.5]], [[0, 0]] * 3, [[0, 0]] * 3])
    assert np.array_equal(rewards, expected)
    assert vpo_set_values(rewards, HAND_WEIGHTS)[1:] == pytest.approx([0.0, 0.0])  # nothing parsed: value 0
    with pytest.raises(ValueError, match="more than m"):
        reward_array([[[1, 2]] * 4], m=3, d=2)
    with pytest.raises(ValueError, match="2 finite numbers"):
        reward_array([[[1, 2, 3]]], m=3, d=2)
    # negative rewards: a duplicate (same key) becomes a copy of its first occurrence, which is exactly
    # dropping it for the set value; zeroing it would let 0 win the max and change the value.
    answers = [[[-1.0, -2.0], [-1.0, -2.0], [-3.0, -0.5]]]
    deduped = reward_array(answers, m=3, d=2, keys=[["a", "a", "b"]])
    dropped = np.array([[[-1.0, -2.0], [-3.0, -0.5]]])  # the same set without the duplicate, m = 2
    weights = dirichlet_weights(64, 2, seed=9)
    assert vpo_set_values(deduped, weights) == pytest.approx(vpo_set_values(dropped, weights), rel=1e-13)
    zeroed = np.array([[[-1.0, -2.0], [0.0, 0.0], [-3.0, -0.5]]])
    assert vpo_set_values(zeroed, weights)[0] == pytest.approx(0.0)  # what zeroing would have given
    # a duplicate that scored differently (a flaky evaluator) is still dropped: the first score is kept
    flaky = reward_array([[[1.0, 0.0], [0.0, 5.0]]], m=2, d=2, keys=[["x", "x"]])
    assert np.array_equal(flaky, [[[1.0, 0.0], [1.0, 0.0]]])


def test_weights_on_simplex_with_dirichlet_moments():
    for sampler in ("mc", "sobol"):
        for alpha in (1.0, 0.3, 2.5):
            for d in (2, 3, 7):
                w = dirichlet_weights(4096, d, alpha, seed=11, sampler=sampler)
                assert w.shape == (4096, d) and np.all(w >= 0)
                np.testing.assert_allclose(w.sum(axis=1), 1.0, rtol=1e-12)
                np.testing.assert_allclose(w.mean(axis=0), 1 / d, atol=0.02)
                var = (d - 1) / (d * d * (d * alpha + 1))  # Var of one Dirichlet(alpha * 1_d) coordinate
                np.testing.assert_allclose(w.var(axis=0), var, rtol=0.1)
    assert np.array_equal(dirichlet_weights(5, 1, seed=0, sampler="sobol"), np.ones((5, 1)))
    tiny = dirichlet_weights(256, 4, 0.01, seed=2, sampler="sobol")  # near the corners, no 0/0 rows
    assert np.all(np.isfinite(tiny)) and np.allclose(tiny.sum(axis=1), 1.0) and np.median(tiny.max(axis=1)) > 0.99


def test_gamma_inverse_cdf_matches_closed_forms():
    u = np.array([1e-12, 1e-5, 0.01, 0.3, 0.5, 0.9, 1 - 1e-6])
    np.testing.assert_allclose(np.exp(_gamma_log_ppf(u, 1.0)), -np.log1p(-u), rtol=1e-9)  # Exp(1)
    chi = (torch.special.erfinv(torch.from_numpy(u)) ** 2).numpy()  # Gamma(1/2, 1) = erfinv(u)^2
    np.testing.assert_allclose(np.exp(_gamma_log_ppf(u, 0.5)), chi, rtol=1e-9)


def test_weight_seeds_reproduce_and_groups_redraw():
    for sampler in ("mc", "sobol"):
        a = dirichlet_weights(100, 5, seed=derive(7, VPO_WEIGHTS, 3, 1), sampler=sampler)
        assert np.array_equal(a, dirichlet_weights(100, 5, seed=derive(7, VPO_WEIGHTS, 3, 1), sampler=sampler))
        assert not np.allclose(a, dirichlet_weights(100, 5, seed=derive(7, VPO_WEIGHTS, 3, 2), sampler=sampler))
        assert not np.allclose(a, dirichlet_weights(100, 5, seed=derive(7, VPO_WEIGHTS, 4, 1), sampler=sampler))
    with pytest.raises(ValueError, match="seed"):
        dirichlet_weights(10, 3, seed=-1)
    with pytest.raises(ValueError, match="sampler"):
        dirichlet_weights(10, 3, seed=1, sampler="halton")  # type: ignore[arg-type]


def test_sobol_is_unbiased_and_less_noisy_than_mc():
    # d = 2, alpha = 1: w = (t, 1 - t) with t ~ U(0, 1); the exact set value is an integral over t
    rewards = np.random.default_rng(3).random((6, 3, 2))
    t = (np.arange(1_000_000) + 0.5) / 1_000_000
    grid = np.stack([t, 1 - t], axis=1)
    exact = vpo_set_values(rewards, grid)
    estimates = {
        s: np.array([vpo_set_values(rewards, dirichlet_weights(100, 2, seed=i, sampler=s)) for i in range(100)])
        for s in ("mc", "sobol")
    }
    for values in estimates.values():
        stderr = values.std(axis=0) / math.sqrt(100)
        assert np.all(np.abs(values.mean(axis=0) - exact) < 5 * stderr + 1e-9)
    # measured over 10 reward draws: Sobol's variance is 30-64x (d = 2) and 13-24x (d = 5) smaller; assert 4x
    assert estimates["sobol"].var(axis=0).mean() < estimates["mc"].var(axis=0).mean() / 4
    rewards5 = np.random.default_rng(4).random((6, 3, 5))
    var5 = {
        s: np.array([vpo_set_values(rewards5, dirichlet_weights(100, 5, seed=i, sampler=s)) for i in range(100)]).var(0)
        for s in ("mc", "sobol")
    }
    assert var5["sobol"].mean() < var5["mc"].mean() / 4


def test_bad_inputs_are_refused():
    with pytest.raises(ValueError, match=r"\[G, m, d\]"):
        vpo_advantages(np.zeros((3, 2)), seed=0)
    with pytest.raises(ValueError, match="finite"):
        multi_rlvr_advantages(np.full((2, 1, 1), np.nan))
    with pytest.raises(ValueError, match="weights must be"):
        vpo_set_values(HAND_REWARDS, np.ones((3, 3)))
    with pytest.raises(ValueError, match="alpha"):
        dirichlet_weights(3, 3, alpha=0.0, seed=0)
