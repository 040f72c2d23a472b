"""What a training step logs of each algorithm's own objective, per problem (evolve/rl/objective_logs.py), how the
reports read it (report/reward_change.py, report/training_takes.py), a KL left uncomputed, and the order in which a
step's files are kept for a resume (trainer.keep_step). Constructed groups; no model."""

from __future__ import annotations

import json
import math
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest

from evolve.report.reward_change import PER_ANSWER, problem_values, reward_change
from evolve.report.training_takes import least_kl_that_takes, training_verdict
from evolve.rl.advantages import answer_key, duplicate_mask, reward_array
from evolve.rl.objective_logs import LOG_WEIGHT_DRAWS, fixed_weights, problem_objectives, step_stats
from evolve.rl.rollouts import Group, Rollout
from evolve.rl.train_config import TrainConfig

SPLIT_A = "def f(x):\n    return x\n"
SPLIT_B = "def f(x):\n    return -x\n"


def make_group(rollouts: list[list[tuple[str | None, list[float] | None]]], name: str = "p",
               tokens: int = 30) -> Group:
    """A scored group as rollouts.score_group builds it: each rollout's answers as (child code, vector); a None code
    is an answer that built no child (its vector None too), a plain-mean problem."""
    built = [Rollout(list(range(tokens)), "", answers=[code or "" for code, _ in answers],
                     codes=[code for code, _ in answers], vectors=[vector for _, vector in answers])
             for answers in rollouts]
    m = max(len(answers) for answers in rollouts)
    d = len(next(vector for answers in rollouts for _, vector in answers if vector is not None))
    keys = [[answer_key(code) if code is not None else None for code in r.codes] for r in built]
    rewards = reward_array([r.vectors for r in built], m, d, keys)
    scalars = np.array([max((float(np.mean(v)) for v in r.vectors if v is not None), default=0.0) for r in built])
    task = SimpleNamespace(problem=SimpleNamespace(name=name))
    return Group(task, built, rewards, scalars, duplicate_mask(keys, m))  # type: ignore[arg-type]


# the review's example: one answer three times, against that answer, its complement and a blank
SAME_THRICE = [(SPLIT_A, [1.0, 1.0, 0.0, 0.0])] * 3
SPREAD = [(SPLIT_A, [1.0, 1.0, 0.0, 0.0]), (SPLIT_B, [0.0, 0.0, 1.0, 1.0]), (None, None)]


def test_the_set_value_rises_where_the_mean_reward_per_answer_falls() -> None:
    same = problem_objectives([make_group([SAME_THRICE, SAME_THRICE])], alpha=1.0)
    spread = problem_objectives([make_group([SPREAD, SPREAD])], alpha=1.0)
    assert np.mean(same["reward_objectives"]["p"]) == pytest.approx(0.5)
    assert same["problem_set_value"]["p"] == pytest.approx(0.5)
    # w1 + w2 ~ Beta(2, 2) for Dirichlet(1, 1, 1, 1): E[max(B, 1 - B)] = 11/16
    assert spread["problem_set_value"]["p"] == pytest.approx(0.6875, abs=2e-3)
    assert np.mean(spread["reward_objectives"]["p"]) == pytest.approx(1 / 3, abs=1e-4)
    # the repeats left out: one row of (1, 1, 0, 0) a rollout, so 0.5; the blank is still a zero row
    assert same["reward_objectives_distinct"]["p"] == [1.0, 1.0, 0.0, 0.0]
    assert np.mean(spread["reward_objectives_distinct"]["p"]) == pytest.approx(1 / 3, abs=1e-4)
    assert same["problem_best_scalar"]["p"] == spread["problem_best_scalar"]["p"] == pytest.approx(0.5)


def test_the_logs_weightings_are_one_fixed_draw_for_every_step_and_run() -> None:
    weights = fixed_weights(4, 1.0)
    assert weights.shape == (LOG_WEIGHT_DRAWS, 4) and np.allclose(weights.sum(axis=1), 1.0)
    assert fixed_weights(4, 1.0) is weights and not weights.flags.writeable
    fixed_weights.cache_clear()
    assert np.array_equal(fixed_weights(4, 1.0), weights)  # drawn again (a new process): the same rows
    assert np.allclose(fixed_weights(4, 1.0).mean(axis=0), 0.25, atol=1e-3)
    assert fixed_weights(3, 0.5).shape == (LOG_WEIGHT_DRAWS, 3) and np.all(fixed_weights(3, 0.5) > 0)


def test_distinct_answers_are_counted_by_normalised_program_not_by_text() -> None:
    commented = "def f(x):\n    # the identity\n    return x\n"
    config = TrainConfig(algo="vpo", group_size=2, answers=3, device="cpu")
    group = make_group([[(SPLIT_A, [1.0, 0.0]), (commented, [1.0, 0.0]), (None, None)],
                        [(SPLIT_A, [1.0, 0.0]), (None, None), (None, None)]])
    group.rollouts[1].answers[1] = "no edit here"  # a failed answer with text of its own
    stats = step_stats(config, [group], [np.zeros(2)])
    # kinds: f's program (a comment does not make it another), the blank failures (one), "no edit here"
    assert stats["problem_distinct"]["p"] == pytest.approx(3 / 6, abs=1e-4)
    assert stats["diversity"] == pytest.approx(3 / 6)
    assert stats["set_value_weights"] == {"draws": LOG_WEIGHT_DRAWS, "alpha": 1.0, "sampler": "sobol", "seed": 0}


def vpo_log(problems: int = 6, visits: int = 4, kl: float | None = 0.01) -> list[dict]:
    """A VPO log through step_stats: each problem's first half of visits writes one answer three times, its second
    half that answer, its complement and a blank (the set value up, the mean reward per answer down)."""
    config = TrainConfig(algo="vpo", group_size=2, answers=3, device="cpu")
    records = []
    for visit in range(visits):
        rollout = SAME_THRICE if visit < visits // 2 else SPREAD
        groups = [make_group([rollout, rollout], name=f"p{i}") for i in range(problems)]
        stats = step_stats(config, groups, [np.zeros(2)] * problems)
        records.append({"step": visit + 1, "algo": "vpo", **stats, "kl": kl})
    return records


def test_each_algorithm_is_judged_on_its_own_objective_with_the_per_answer_mean_beside_it() -> None:
    records = vpo_log()
    assert problem_values(records, "problem_set_value")["p0"][0] == pytest.approx(0.5)
    vpo = training_verdict("vpo-lr1e-4", records)
    assert vpo.measure == "problem_set_value" and vpo.note == "" and vpo.verdict == "takes"
    assert vpo.change.up == 6 and vpo.change.change == pytest.approx(0.1875, abs=2e-3)
    assert vpo.per_answer is not None and vpo.per_answer.down == 6  # the old measure would call it a fall
    assert "problem_set_value" in vpo.sentence() and "mean reward per answer 0.500 -> 0.333" in vpo.sentence()
    grpo = training_verdict("same-log-as-grpo", records, algo="grpo")  # GRPO's yardstick: the per-answer mean
    assert grpo.measure == PER_ANSWER and grpo.per_answer is grpo.change and grpo.verdict == "did not take"
    for algo in ("multi-rlvr", "max-at-k"):  # the best scalar did not move: 0.5 throughout
        judged = training_verdict(algo, records, algo=algo)
        assert judged.measure == "problem_best_scalar" and judged.change.change == pytest.approx(0.0)


def test_a_log_without_the_algorithms_measure_falls_back_to_the_per_answer_mean_and_says_so() -> None:
    old = [{k: v for k, v in r.items() if k != "problem_set_value"} for r in vpo_log()]
    verdict = training_verdict("vpo-first-study", old)
    assert verdict.measure == PER_ANSWER and "predates `problem_set_value`" in verdict.note
    assert verdict.verdict == "did not take" and verdict.note in verdict.sentence()
    resumed = vpo_log()  # an old run resumed by new code: the measure only from some step on
    del resumed[0]["problem_set_value"]
    assert training_verdict("vpo-resumed", resumed).measure == PER_ANSWER
    unnamed = training_verdict("no-algo", [{k: v for k, v in r.items() if k != "algo"} for r in vpo_log()])
    assert unnamed.measure == PER_ANSWER and "names no algorithm" in unnamed.note


def test_reward_change_reads_any_per_problem_measure() -> None:
    records = [{"step": s, "problem_best_scalar": {"a": 0.1 * s, "b": None}, "reward_objectives": {"a": [0.0]}}
               for s in (1, 2)]
    assert problem_values(records, "problem_best_scalar") == {"a": [0.1, 0.2]}
    change = reward_change("max-at-k", records, "problem_best_scalar")
    assert change.measure == "problem_best_scalar" and change.up == 1
    assert change.sentence().startswith("max-at-k (problem_best_scalar): 0.100 -> 0.200")
    assert reward_change("max-at-k", records).change == pytest.approx(0.0)  # the default: the per-answer mean
    assert reward_change("x", records, "problem_set_value").change is None  # not logged: nothing to compare


def test_a_null_kl_is_unknown_and_never_the_least() -> None:
    from evolve.rl.trainer import step_line

    uncomputed = training_verdict("kl0", vpo_log(problems=10, kl=None))  # p = 2/1024, taking after Holm too
    assert uncomputed.verdict == "takes" and uncomputed.kl_last is None
    measured = training_verdict("kl1e-3", vpo_log(problems=10, kl=0.02))
    assert least_kl_that_takes([uncomputed, measured]) is measured
    assert least_kl_that_takes([uncomputed]) is None
    line = step_line({"step": 1, "reward": 0.5, "scored_answers": 1.0, "diversity": 0.5, "adv_std": 1.0, "kl": None,
                      "entropy": 1.0, "tokens": 60, "seconds": 3.0}, 30)
    assert "kl -  entropy" in line


def test_a_periodic_checkpoint_is_written_before_the_resume_state(tmp_path: Path,
                                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    from evolve.rl import trainer

    calls: list[str] = []
    monkeypatch.setattr(trainer, "save_checkpoint",
                        lambda model, tokenizer, folder, lora, provenance: calls.append(f"checkpoint {folder.name}"))
    monkeypatch.setattr(trainer, "save_state",
                        lambda out, model, optimizer, step, records: calls.append(f"state {step}"))
    config = TrainConfig(steps=4, save_every=2, device="cpu")
    provenance = trainer.training_provenance(config, ("p",))
    records = [{"step": 1}, {"step": 2}]
    trainer.keep_step(config, tmp_path, 2, None, None, None, records, provenance)  # type: ignore[arg-type]
    assert calls == ["checkpoint step_2", "state 2"]
    assert [json.loads(line) for line in (tmp_path / "train_log.jsonl").read_text().splitlines()] == [{"step": 2}]

    def killed(*args: object) -> None:
        raise KeyboardInterrupt

    calls.clear()
    monkeypatch.setattr(trainer, "save_checkpoint", killed)
    with pytest.raises(KeyboardInterrupt):  # killed while step_4 is written: the state stays at the step before
        trainer.keep_step(config.model_copy(update={"steps": 6}), tmp_path, 4, None, None, None,  # type: ignore
                          [*records, {"step": 3}, {"step": 4}], provenance)
    assert calls == []
    trainer.keep_step(config, tmp_path, 3, None, None, None, [*records, {"step": 3}], provenance)  # type: ignore
    assert calls == ["state 3"]  # no periodic checkpoint at 3, nor at the last step (OUT/final is that)


def test_the_study_reports_training_curves_read_a_null_kl_as_no_value() -> None:
    from evolve.report.study_report import training_curves

    records = [{"step": 1, "reward": 0.5, "kl": None}, {"step": 2, "reward": 0.6, "kl": None}]
    curves = training_curves("vpo", records, {})
    assert len(curves.kl) == 2 and all(math.isnan(kl) for kl in curves.kl)
