"""Whether a training pilot took without collapsing: the reward's change beside its answers' length and variety, each
train problem late against early, and the recipe's rule among pilots (the least KL of those that take)."""

from __future__ import annotations

import pytest

from evolve.report.reward_change import reward_change
from evolve.report.training_takes import least_kl_that_takes, quarter_ratio, training_verdict


def train_log(problems: int = 10, visits: int = 4, reward: tuple[float, float] = (0.1, 0.4),
              tokens: tuple[float, float] = (120.0, 110.0), distinct: tuple[float, float] = (0.9, 0.8),
              kl: float = 0.01, per_step: int = 2) -> list[dict]:
    """A log whose problems (taken in turn, `per_step` a step) go from the first value of each pair on their first
    half of visits to the second on the rest."""
    names = [f"p{i}" for i in range(problems)]
    seen = dict.fromkeys(names, 0)
    records: list[dict] = []
    turn = 0
    while any(count < visits for count in seen.values()):
        record: dict = {"step": len(records) + 1, "reward_objectives": {}, "problem_tokens": {},
                        "problem_distinct": {}, "kl": kl * len(records)}
        for _ in range(per_step):
            name = names[turn % problems]
            turn += 1
            if seen[name] == visits:
                continue
            late = seen[name] >= visits // 2
            record["reward_objectives"][name] = [reward[late]] * 3
            record["problem_tokens"][name] = tokens[late]
            record["problem_distinct"][name] = distinct[late]
            seen[name] += 1
        records.append(record)
    return records


def test_a_rising_reward_with_steady_answers_takes() -> None:
    verdict = training_verdict("grpo-lr5e-5", train_log())
    assert verdict.change.up == 10 and verdict.change.p_value == pytest.approx(2 / 2 ** 10)
    assert verdict.tokens_ratio == pytest.approx(110 / 120) and verdict.distinct_ratio == pytest.approx(0.8 / 0.9)
    assert verdict.tokens_first == pytest.approx(120.0)
    assert not verdict.collapsed and verdict.verdict == "takes"


def test_a_reward_bought_by_short_answers_is_a_collapse_not_a_take() -> None:
    shorter = training_verdict("grpo", train_log(tokens=(400.0, 30.0)))  # the CPU study's GRPO: ~6 % of its tokens
    assert shorter.took and shorter.collapsed and shorter.verdict == "collapsed"
    samey = training_verdict("grpo", train_log(distinct=(0.9, 0.2)))  # one answer over and over
    assert samey.took and samey.verdict == "collapsed"
    at_the_floor = training_verdict("grpo", train_log(tokens=(100.0, 50.0)))  # exactly half is allowed
    assert at_the_floor.verdict == "takes"


def test_a_flat_or_falling_reward_did_not_take() -> None:
    assert training_verdict("vpo", train_log(reward=(0.2, 0.2))).verdict == "did not take"
    falling = training_verdict("vpo", train_log(reward=(0.4, 0.1)))
    assert falling.change.p_value < 0.05 and not falling.took and falling.verdict == "did not take"


def test_a_log_without_per_problem_figures_says_so_rather_than_passing() -> None:
    old = [{k: v for k, v in r.items() if k not in ("problem_tokens", "problem_distinct")} for r in train_log()]
    verdict = training_verdict("vpo-first-study", old)
    assert verdict.tokens_ratio is None and verdict.collapsed is None and verdict.verdict == "no per-problem log"
    assert quarter_ratio(old, "problem_tokens") == (None, None)
    one_step = training_verdict("grpo", train_log()[:1])  # every problem seen once: nothing to compare yet
    assert one_step.verdict == "no problem seen twice yet"


def test_each_problem_is_its_own_baseline_for_length() -> None:
    # long-answer problems early, short-answer problems late would look like a collapse across steps; per problem
    # nothing changed
    records = [{"step": 1, "problem_tokens": {"long": 300.0}}, {"step": 2, "problem_tokens": {"short": 20.0}},
               {"step": 3, "problem_tokens": {"long": 300.0}}, {"step": 4, "problem_tokens": {"short": 20.0}}]
    assert quarter_ratio(records, "problem_tokens") == (pytest.approx(1.0), pytest.approx(160.0))


def test_the_recipe_takes_the_pilot_with_least_kl_among_those_that_take() -> None:
    near = training_verdict("lr1e-5", train_log(kl=0.001))
    far = training_verdict("lr5e-5", train_log(kl=0.01))
    collapsed = training_verdict("lr1e-4", train_log(kl=0.0001, tokens=(300.0, 10.0)))
    flat = training_verdict("lr1e-6", train_log(kl=0.00001, reward=(0.2, 0.2)))
    assert least_kl_that_takes([far, collapsed, near, flat]) is near
    assert least_kl_that_takes([collapsed, flat]) is None


def test_a_pilot_that_takes_only_by_the_grids_many_tests_is_not_the_recipe() -> None:
    # six problems all up: exact p = 2/64 = 0.031, which takes alone; two such pilots, Holm-adjusted, 0.062 each
    weak = training_verdict("weak", train_log(problems=6, kl=0.0001))
    other = training_verdict("other", train_log(problems=6, kl=0.001))
    assert weak.verdict == "takes" and weak.change.p_value == pytest.approx(2 / 64)
    assert least_kl_that_takes([weak]) is weak
    assert least_kl_that_takes([weak, other]) is None
    strong = training_verdict("strong", train_log(problems=12, kl=0.01))  # p = 2/4096: takes after Holm
    assert least_kl_that_takes([weak, other, strong]) is strong


def test_a_reward_change_of_float_noise_is_a_tie_not_a_loss() -> None:
    records = [{"step": 1, "reward_objectives": {"p": [0.1 + 0.2]}}, {"step": 2, "reward_objectives": {"p": [0.3]}}]
    change = reward_change("noise", records)
    assert (change.up, change.down, change.unchanged) == (0, 0, 1)
