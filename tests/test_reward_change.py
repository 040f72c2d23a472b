"""Whether a training run's reward moved: each train problem early against late, paired over problems, and the
report's table and Markdown that show it."""

from __future__ import annotations

import random

import pytest

from evolve.report.reward_change import problem_rewards, reward_change


def steps(rewards_by_problem: dict[str, list[float]], per_step: int = 2) -> list[dict]:
    """A train log: problems taken in turn, `per_step` a step, each problem's rewards in order (2 objectives)."""
    names = sorted(rewards_by_problem)
    cursor = {name: 0 for name in names}
    records, turn = [], 0
    while any(cursor[n] < len(rewards_by_problem[n]) for n in names):
        objectives = {}
        for _ in range(per_step):
            name = names[turn % len(names)]
            turn += 1
            if cursor[name] < len(rewards_by_problem[name]):
                value = rewards_by_problem[name][cursor[name]]
                objectives[name] = [value - 0.1, value + 0.1]  # mean = value
                cursor[name] += 1
        records.append({"step": len(records) + 1, "reward_objectives": objectives})
    return records


def test_each_problem_is_compared_with_itself_from_its_first_to_its_last_quarter() -> None:
    rising = {f"p{i}": [0.1 * i] * 4 + [0.1 * i + 0.2] * 4 for i in range(10)}
    change = reward_change("vpo-t0", steps(rising))
    assert (change.problems, change.up, change.down) == (10, 10, 0)
    assert change.change == pytest.approx(0.2)
    assert change.first == pytest.approx(0.45) and change.last == pytest.approx(0.65)
    assert change.exact and change.p_value == pytest.approx(2 / 2 ** 10)  # all up: the two extreme sign patterns
    assert "10 up / 0 down" in change.sentence()


def test_a_reward_that_does_not_move_is_not_called_moved() -> None:
    rng = random.Random(3)
    flat = {f"p{i}": [rng.random() * 0.3 for _ in range(10)] for i in range(20)}
    change = reward_change("grpo-t1", steps(flat, per_step=4))
    assert change.problems == 20 and change.up + change.down + change.unchanged == 20
    assert change.p_value > 0.05


def test_a_problem_seen_once_is_left_out_and_a_run_without_steps_says_so() -> None:
    records = steps({"a": [0.0, 1.0], "b": [0.5]})
    assert problem_rewards(records) == {"a": [0.0, 1.0], "b": [0.5]}
    change = reward_change("vpo-t1", records)
    assert change.problems == 1 and change.up == 1
    empty = reward_change("vpo-t1", [])
    assert empty.change is None and empty.p_value is None and "no train problem seen twice" in empty.sentence()


def test_a_run_with_no_problem_seen_twice_shows_no_p_value_rather_than_p_one() -> None:
    from dataclasses import asdict

    from evolve.report.study_markdown import _reward_change
    from evolve.report.study_report import training_section_html

    one_step = reward_change("vpo-t0", [{"step": 1, "reward_objectives": {"he_007": [0.0, 0.0]},
                                         "zero_spread_groups": 1}])  # the GPU lease's 1-step runs
    assert one_step.problems == 0 and one_step.p_value is None
    html = training_section_html([], [], [one_step])
    assert "<td class='num'>0 / 0</td><td class='num'>–</td><td class='num'>1 / 1</td>" in html
    markdown = _reward_change({"training_reward_change": [asdict(one_step) | {"change": None}],
                               "training_reward_change_method": "per train problem"})
    assert "| vpo-t0 | 1 | 0 | – → – | – | 0 / 0 | – | 1 / 1 |" in markdown


def test_the_report_and_its_markdown_show_whether_each_run_moved() -> None:
    from dataclasses import asdict

    from evolve.report.study_markdown import _reward_change
    from evolve.report.study_report import training_section_html

    change = reward_change("vpo-t0", steps({f"p{i}": [0.0, 0.0, 0.5, 0.5] for i in range(6)}))
    html = training_section_html([], [], [change])
    assert "Did the training reward move?" in html and "vpo-t0" in html and "+0.500" in html and "6 / 0" in html
    assert "<td class='num'>–</td>" in html  # a log without spread counts: none shown, not "0 / 0"
    markdown = _reward_change({"training_reward_change": [asdict(change) | {"change": change.change}],
                               "training_reward_change_method": "per train problem"})
    assert "| vpo-t0 | 12 | 6 | 0.000 → 0.500 | +0.500 | 6 / 0 | 0.031 | – |" in markdown  # no spread counts logged


def test_groups_whose_answers_all_scored_alike_are_counted_as_without_spread() -> None:
    from dataclasses import asdict

    from evolve.report.study_markdown import _reward_change
    from evolve.report.study_report import training_section_html

    records = steps({f"p{i}": [0.0, 0.0, 0.5, 0.5] for i in range(6)})  # 12 steps of 2 prompts: 24 groups
    for record, flat in zip(records, [2, 1, 0] * 4, strict=True):
        record["zero_spread_groups"] = flat
    change = reward_change("vpo-t0", records)
    assert (change.flat_groups, change.groups) == (12, 24)
    assert change.sentence().endswith("12 of 24 groups without spread")
    assert "<td class='num'>12 / 24</td>" in training_section_html([], [], [change])
    markdown = _reward_change({"training_reward_change": [asdict(change) | {"change": change.change}]})
    assert markdown.rstrip().endswith("| 12 / 24 |")
