"""A study's share of test problems cracked against candidate answers (and iterations), one line per arm: with a
sampling arm, plain sampling and the evolution arms on one chart at equal answers (a registered secondary of the
second study).

A policy's curves (results_curves.py) average its evolution seeds; an arm pools its checkpoints, so its replicates
are the (checkpoint, evolution seed) runs that finished every test problem, each one row of per-problem step
functions averaged over the problems. With checkpoint_seeds = "split" each checkpoint runs its share of the seeds,
so an algorithm's line rests on as many runs as the base's. The band is pointwise over those runs; runs of one
checkpoint share its training, so the band holds for these checkpoints, not for new training runs.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from html import escape

from evolve.report.charts import line_chart, palette
from evolve.report.result_types import ExperimentResults
from evolve.report.results import complete_cell
from evolve.report.results_curves import AXIS_LABELS, Axis, Curve, curve_series, policy_curves

ARM_AXES: tuple[Axis, ...] = ("answers", "iterations")


def arm_curves(results: ExperimentResults, arm_of: Mapping[str, str],
               axes: Sequence[Axis] = ARM_AXES) -> list[Curve]:
    """Per arm (in the order its policies appear) and axis, the cracked-share curve over its runs that finished
    every test problem (`arm_of`: policy -> arm; a policy it does not name is left out). An arm with no such run,
    or a run without the axis' cost stored, has no curve on that axis. Curve.policy is the arm's name and
    Curve.seeds the runs it rests on."""
    cells = {(c.problem, c.policy, c.seed): c for c in results.cells}
    arms: dict[str, list[str]] = {}
    for policy in results.policies:
        if policy in arm_of:
            arms.setdefault(arm_of[policy], []).append(policy)
    curves = []
    for arm, policies in arms.items():
        runs = [[cells[(problem, policy, seed)] for problem in results.problems]
                for policy in policies for seed in results.arm_seeds.get(policy, results.seeds)
                if all(complete_cell(cells[(problem, policy, seed)], results.iterations_of(policy))
                       for problem in results.problems)]
        iterations = min(results.iterations_of(policy) for policy in policies)  # no run carried past its budget
        for axis in axes:
            curves += [curve for curve in policy_curves(arm, results.problems, [[c.steps for c in run] for run in runs],
                                                        axis, iterations, results.confidence, results.score_range,
                                                        [[c.stopped_early for c in run] for run in runs])
                       if curve.metric == "cracked_share"]
    return curves


def arm_curves_html(curves: Sequence[Curve], arms: Sequence[str], confidence: float,
                    sampling_arm: str | None = None) -> str:
    """The arms' cracked-share charts, one per axis, for the study page (figures/cracked_share-arms-AXIS.svg);
    `sampling_arm`: the arm that samples the base plainly, if the study has one."""
    colours = palette(list(arms))
    charts = []
    for axis in dict.fromkeys(curve.axis for curve in curves):
        drawn = [curve for arm in arms for curve in curves if curve.policy == arm and curve.axis == axis]
        svg = line_chart(curve_series(drawn, colours, "run"), f"Share cracked per arm against {AXIS_LABELS[axis]}",
                         AXIS_LABELS[axis], "share of test problems cracked", (0.0, 1.0), 540, 280)
        charts.append(f'<figure class="chart" data-metric="cracked_share" data-by="arm" '
                      f'data-axis="{axis}" data-series="{len(drawn)}">{svg}</figure>')
    missing = [arm for arm in arms if not any(curve.policy == arm for curve in curves)]
    note = (f'<p class="missing">no curve (no run finished every test problem): {escape(", ".join(missing))}</p>'
            if missing else "")
    equal = (f"Against candidate answers the sampling arm ({escape(sampling_arm)}: the base sampled from the seed "
             "program alone) and the evolution arms compare at equal answers. " if sampling_arm else
             "Against candidate answers the arms compare at equal answers. ")
    return ('<section id="arm-curves"><h2>Share cracked per arm, against answers and iterations</h2>'
            '<p class="hint">Per arm, each run (one checkpoint&rsquo;s evolution seed, or an untrained arm&rsquo;s '
            "seed) that finished every test problem gives the share of the test problems solved by a program "
            "committed by x; the line is the mean over those runs with its pointwise "
            f"{confidence:.0%} band, drawn as steps, a run that stopped when it solved its problem holding its "
            f"value. {equal}An arm&rsquo;s checkpoints are pooled: the band holds for these "
            f"checkpoints, not for a new training run.</p>{note}"
            f'<div class="multiples">{"".join(charts)}</div></section>')
