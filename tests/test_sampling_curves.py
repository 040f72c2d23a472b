"""The study report's sampling before evolution: pass@k and best@k against k with intervals over problems (the
paper's first figure), and the answers' diversity, from real ProblemSamples."""

from __future__ import annotations

import pytest

from evolve.engine.sampling import ProblemSample
from evolve.report.sampling_curves import diversity, k_curves, sampling_section_html
from evolve.stats.passk import best_at_k, pass_at_k


def sample(problem: str, scalars: tuple[float, ...], keys: tuple[str | None, ...], tokens: int = 100) -> ProblemSample:
    patterns = tuple(None if key is None else (scalar,) for scalar, key in zip(scalars, keys, strict=True))
    return ProblemSample(problem, 1, 0.0, len(scalars), 0, scalars, tuple(s >= 1.0 for s in scalars), tokens, keys,
                         patterns)


SAMPLES = {
    "base": [sample("a", (1.0, 0.0, 0.5, 0.0), ("x", None, "y", "z")), sample("b", (0.0, 0.0, 0.25, 1.0),
                                                                             ("u", "u", "v", "w"))],
    "grpo": [sample("a", (1.0, 1.0, 1.0, 1.0), ("x", "x", "x", "x"), 40), sample("b", (0.5,) * 4, ("q",) * 4, 40)],
}


def test_pass_and_best_at_k_curves_are_the_mean_of_each_problems_unbiased_estimate_with_a_band_around_it() -> None:
    curves = {(c.policy, c.metric): c for c in k_curves(SAMPLES)}
    base_pass, base_best = curves[("base", "pass")], curves[("base", "best")]
    assert base_pass.ks == (1, 2, 3, 4) and base_pass.problems == 2
    for k in base_pass.ks:
        expected = (pass_at_k(4, 1, k) + pass_at_k(4, 1, k)) / 2
        assert base_pass.mean[k - 1] == pytest.approx(expected)
        assert base_pass.low[k - 1] <= expected <= base_pass.high[k - 1]
        assert base_best.mean[k - 1] == pytest.approx((best_at_k((1.0, 0.0, 0.5, 0.0), k)
                                                       + best_at_k((0.0, 0.0, 0.25, 1.0), k)) / 2)
    assert curves[("grpo", "pass")].mean == pytest.approx((0.5, 0.5, 0.5, 0.5))  # a always, b never
    assert list(base_pass.mean) == sorted(base_pass.mean)  # pass@k never falls with k


def test_diversity_counts_distinct_programs_and_patterns_per_problem_and_tokens_per_answer() -> None:
    spread = {d.policy: d for d in diversity(SAMPLES)}
    assert spread["base"].distinct_programs == pytest.approx((3 + 3) / 2)  # a: x, y, z; b: u, v, w
    assert spread["base"].distinct_patterns == pytest.approx((3 + 3) / 2)  # a: 1, 0.5, 0; b: 0, 0.25, 1
    assert spread["base"].program_share == pytest.approx(0.75) and spread["base"].tokens_per_answer == 25
    assert (spread["grpo"].distinct_programs, spread["grpo"].distinct_patterns) == (1.0, 1.0)  # collapsed


def test_the_sampling_section_draws_both_metrics_with_a_line_per_policy_and_is_empty_without_samples() -> None:
    page = sampling_section_html(k_curves(SAMPLES), diversity(SAMPLES))
    assert page.count('class="chart"') == 2 and "pass@k against k" in page and "best@k against k" in page
    assert page.count("grpo") >= 3 and "distinct test-pass patterns" in page
    assert sampling_section_html([], []) == ""
