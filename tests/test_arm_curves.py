"""A study's cracked share against answers per arm: each arm's (checkpoint, evolution seed) runs that finished every
test problem pooled into one line, drawn on one chart with the other arms."""

from __future__ import annotations

from pathlib import Path

from evolve.report.arm_curves import arm_curves, arm_curves_html
from evolve.report.figures import page_figures
from evolve.report.results import collect
from tests.test_study_report import _split_study, _write_cell

ARM_OF = {"base": "base", "vpo-t0": "vpo", "vpo-t1": "vpo", "grpo-t0": "grpo", "grpo-t1": "grpo"}


def test_an_arm_pools_its_checkpoints_runs_and_leaves_out_a_run_with_a_cell_not_run(tmp_path: Path) -> None:
    """vpo cracks p0 (of p0, p1) at its second answer in each of its three runs (vpo-t0 seeds 0 and 2, vpo-t1 seed
    1); grpo-t1's p1 cell has not run, so grpo's line rests on grpo-t0's two runs."""
    spec, store = _split_study(tmp_path)
    for problem, policy, seed in spec.cells():
        if (problem, policy) != ("p1", "grpo-t1"):
            _write_cell(store, spec, problem, policy, seed, cracks=policy.startswith("vpo") and problem == "p0")
    curves = {(c.policy, c.axis): c for c in arm_curves(collect(store, spec), ARM_OF)}
    assert set(curves) == {(arm, axis) for arm in ("base", "vpo", "grpo") for axis in ("answers", "iterations")}
    vpo = curves["vpo", "answers"]
    assert (vpo.seeds, vpo.problems, vpo.x[-1], vpo.mean[0], vpo.mean[-1]) == (3, 2, 2.0, 0.0, 0.5)
    assert curves["grpo", "answers"].seeds == 2 and curves["base", "answers"].seeds == 3
    assert max(curves["base", "answers"].mean) == 0.0
    assert all(curve.metric == "cracked_share" for curve in curves.values())


def test_the_arms_chart_is_one_figure_per_axis_named_for_the_arms_and_says_which_arm_has_no_run(
        tmp_path: Path) -> None:
    spec, store = _split_study(tmp_path)
    for problem, policy, seed in spec.cells():
        if policy != "grpo-t0":
            _write_cell(store, spec, problem, policy, seed)
    results = collect(store, spec)
    no_grpo_t0 = {policy: arm for policy, arm in ARM_OF.items() if policy != "grpo-t1"}  # grpo: t0 only, none ran
    page = arm_curves_html(arm_curves(results, no_grpo_t0), ["base", "vpo", "grpo"], results.confidence)
    assert list(page_figures(page)) == ["cracked_share-arms-answers.svg", "cracked_share-arms-iterations.svg"]
    assert page.count('data-series="2"') == 2 and "no curve (no run finished every test problem): grpo" in page


def test_a_run_that_stopped_when_it_solved_holds_its_value_and_does_not_end_the_cost_axes(tmp_path: Path) -> None:
    """vpo solves p0 at its first answer and stops (stop_when_solved); every other cell runs its 2 answers. The
    answers axis still runs to 2, for the arm and for each policy, and vpo's share holds at 0.5 from answer 1."""
    spec, store = _split_study(tmp_path)
    for problem, policy, seed in spec.cells():
        _write_cell(store, spec, problem, policy, seed, cracks=policy.startswith("vpo") and problem == "p0",
                    stop_at=1)
    results = collect(store, spec)
    vpo = next(c for c in arm_curves(results, ARM_OF) if c.policy == "vpo" and c.axis == "answers")
    assert (vpo.x, vpo.mean) == ((0.0, 1.0, 2.0), (0.0, 0.5, 0.5))
    assert results.curve("vpo-t0", "cracked_share", axis="answers").x[-1] == 2.0
    assert results.curve("vpo-t0", "best_score", problem="p1", axis="tokens").x[-1] == 40.0  # 2 answers x 20
