"""A study's training curves (reward, per-objective reward, KL, answer diversity per step, from each training run's
train_log.jsonl), drawn as an HTML section beside the experiment report, and the study's JSON summary (its arms
come from report/study_arms.py)."""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass
from html import escape
from pathlib import Path
from typing import Any

from evolve.report.charts import Series, line_chart, palette
from evolve.report.results import ExperimentResults
from evolve.report.reward_change import METHOD as REWARD_CHANGE_METHOD
from evolve.report.reward_change import RewardChange
from evolve.report.sampling_curves import K_METHOD, diversity, k_curves
from evolve.report.study_arms import ARM_DIFFERENCES_METHOD, ARMS_METHOD, ArmReport, arm_json, arm_report, study_arms

DIFFERENCES_METHOD = ("mean: betting interval (Waudby-Smith and Ramdas, fixed bets) of the per-problem differences, "
                      "width = high - low; sign_p and permutation_p raw, *_holm Holm-adjusted over the `family` "
                      "comparisons of the report; significant: permutation_p_holm <= alpha")
CURVE_FIELDS = ("reward", "kl", "diversity", "entropy", "scored_answers", "tokens", "seconds")


@dataclass(frozen=True)
class TrainingCurves:
    """One algorithm's training, step by step, as train_log.jsonl recorded it."""

    algo: str
    steps: tuple[int, ...]
    reward: tuple[float, ...]  # mean scalar reward of the step's answers
    kl: tuple[float, ...]  # k3 KL to the reference
    diversity: tuple[float, ...]  # distinct answers / answers written
    entropy: tuple[float, ...]
    scored_answers: tuple[float, ...]  # share of answers that built and were scored
    tokens: tuple[float, ...]  # completion tokens of the step
    seconds: tuple[float, ...]
    reward_objectives: dict[str, dict[str, tuple[float, ...]]]  # problem -> objective -> mean reward per step
    # (nan at steps that did not train on that problem)


def read_training_log(path: Path) -> list[dict[str, Any]]:
    """The step records of a train_log.jsonl (none when the file is absent); a torn last line is skipped."""
    if not path.is_file():
        return []
    records = []
    for line in path.read_text().splitlines():
        try:
            records.append(json.loads(line))
        except json.JSONDecodeError:
            continue
    return records


def training_curves(algo: str, records: list[dict[str, Any]],
                    objectives: dict[str, tuple[str, ...]]) -> TrainingCurves:
    """The curves of one algorithm from its step records; objectives names each train problem's objectives."""
    columns = {name: tuple(float("nan") if record.get(name) is None else float(record[name]) for record in records)
               for name in CURVE_FIELDS}  # a null (KL not computed at coefficient 0) is no value, as a missing one
    per_objective: dict[str, dict[str, tuple[float, ...]]] = {}
    for problem, names in objectives.items():
        rows = [record.get("reward_objectives", {}).get(problem) for record in records]
        per_objective[problem] = {name: tuple(float(row[i]) if row is not None and i < len(row) else float("nan")
                                              for row in rows) for i, name in enumerate(names)}
    return TrainingCurves(algo, tuple(int(record["step"]) for record in records), reward_objectives=per_objective,
                          **columns)


def _window_mean(values: tuple[float, ...], first: bool) -> float | None:
    """The mean of the first (or last) quarter of the steps that have a value; None when none has."""
    present = [v for v in values if v == v]
    if not present:
        return None
    size = max(1, len(present) // 4)
    chosen = present[:size] if first else present[-size:]
    return sum(chosen) / len(chosen)


def _num(value: float | None) -> str:
    return "&ndash;" if value is None else f"{value:.3f}"


def smoothing_window(steps: int) -> int:
    """Steps per moving window: 1 (the raw values) up to 20 steps, then a twentieth of the run."""
    return max(1, steps // 20)


def moving(values: tuple[float, ...], window: int) -> tuple[list[float], list[float], list[float]]:
    """The trailing moving mean of `values` over `window` steps, with the window's min and max (NaN skipped)."""
    means, lows, highs = [], [], []
    for index in range(len(values)):
        chunk = [v for v in values[max(0, index - window + 1):index + 1] if v == v]
        means.append(sum(chunk) / len(chunk) if chunk else float("nan"))
        lows.append(min(chunk) if chunk else float("nan"))
        highs.append(max(chunk) if chunk else float("nan"))
    return means, lows, highs


def _chart(curves: list[TrainingCurves], colours: dict[str, str], name: str, title: str) -> str:
    window = smoothing_window(max((len(c.steps) for c in curves), default=0))
    series = []
    for c in curves:
        if not c.steps:
            continue
        mean, low, high = moving(getattr(c, name), window)
        band = (low, high) if window > 1 else (None, None)
        series.append(Series(c.algo, colours[c.algo], [float(s) for s in c.steps], mean, *band))
    if window > 1:
        title += f" ({window}-step moving mean)"
    if not series:
        return ""
    return f'<figure class="chart" data-training="{name}">{line_chart(series, title, "step", name, None, 540, 260)}' \
           "</figure>"


def _objective_table(curves: list[TrainingCurves]) -> str:
    """Per train problem and objective: each algorithm's mean reward over its first and last quarter of steps."""
    problems = sorted({problem for c in curves for problem in c.reward_objectives})
    head = "".join(f"<th>{escape(c.algo)} first &rarr; last</th>" for c in curves)
    rows = []
    for problem in problems:
        objectives = next((list(c.reward_objectives[problem]) for c in curves if problem in c.reward_objectives), [])
        for objective in objectives:
            cells = []
            for c in curves:
                values = c.reward_objectives.get(problem, {}).get(objective, ())
                cells.append(f'<td class="num">{_num(_window_mean(values, True))} &rarr; '
                             f"{_num(_window_mean(values, False))}</td>")
            rows.append(f"<tr><td>{escape(problem)}</td><td>{escape(objective)}</td>{''.join(cells)}</tr>")
    return (f'<div class="objectives"><table class="objectives"><thead><tr><th>train problem</th><th>objective</th>'
            f"{head}</tr></thead><tbody>{''.join(rows)}</tbody></table></div>")


def _reward_change_table(changes: list[RewardChange]) -> str:
    """Per training run: the train problems' reward early and late, how many moved up or down, the test's p."""
    if not changes:
        return ""
    rows = "".join(
        f"<tr><td>{escape(c.run)}</td><td class='num'>{c.steps}</td><td class='num'>{c.problems}</td>"
        f"<td class='num'>{_num(c.first)} &rarr; {_num(c.last)}</td>"
        f"<td class='num'>{'' if c.change is None else f'{c.change:+.3f}'}</td>"
        f"<td class='num'>{c.up} / {c.down}</td><td class='num'>{'–' if c.p_value is None else f'{c.p_value:.2g}'}</td>"
        f"<td class='num'>{f'{c.flat_groups} / {c.groups}' if c.groups else '–'}</td></tr>" for c in changes)
    return ("<h3>Did the training reward move?</h3>"
            f'<p class="hint">{escape(REWARD_CHANGE_METHOD)}.</p>'
            '<table class="reward-change"><thead><tr><th>training run</th><th>steps</th><th>train problems</th>'
            "<th>reward first &rarr; last quarter</th><th>change</th><th>up / down</th><th>p</th>"
            "<th>groups without spread</th></tr></thead>"
            f"<tbody>{rows}</tbody></table>")


def training_section_html(curves: list[TrainingCurves], budgets: list[dict[str, Any]],
                          changes: list[RewardChange] | None = None) -> str:
    """The training section: the equal budgets, then reward, KL, diversity and entropy per step (a line per
    algorithm), whether each run's reward moved, and the per-objective reward table."""
    colours = palette([c.algo for c in curves])
    budget_rows = "".join(
        f"<tr><td>{escape(b['algo'])}</td><td class='num'>{b['m']}</td><td class='num'>{b['group_size']}</td>"
        f"<td class='num'>{b['answers_per_prompt']}</td><td class='num'>{b['prompts_per_step']}</td>"
        f"<td class='num'>{b['steps']}</td><td class='num'>{b['total_answers']}</td></tr>" for b in budgets)
    charts = [_chart(curves, colours, name, title) for name, title in (
        ("reward", "Mean reward per step"), ("kl", "KL to the base (k3)"),
        ("diversity", "Answer diversity (distinct / written)"), ("entropy", "Token entropy"))]
    return ('<section id="training"><h2>Training</h2><p class="hint">Every algorithm trained from the same base '
            "with the same budget counted in answers, once per training seed (each training run spends the budget "
            "below): an algorithm writing m answers per completion samples answers_per_prompt / m completions per "
            f"prompt. The curves are each step's values as its run's train_log.jsonl recorded them, one line per "
            f"training run ({_runs_text(curves)}). A line is one run, so it has no interval: how far one "
            "algorithm's training seeds differ is the gap between its lines, and in crack share the spread between "
            "training seeds in the arms table. Past 40 steps each line is a trailing moving mean over a twentieth "
            "of the steps, its band the smallest and largest value in that window.</p>"
            '<table class="budgets"><thead><tr><th>algorithm</th><th>m</th><th>completions per prompt</th>'
            "<th>answers per prompt</th><th>prompts per step</th><th>steps</th><th>answers in all</th></tr></thead>"
            f"<tbody>{budget_rows}</tbody></table>"
            f'<div class="multiples">{"".join(charts)}</div>'
            f"{_reward_change_table(changes or [])}"
            "<h3>Reward per objective: mean over the first quarter of steps &rarr; over the last quarter</h3>"
            f"{_objective_table(curves)}</section>")


def _runs_text(curves: list[TrainingCurves]) -> str:
    """The training runs the curves come from, per algorithm: "vpo: 2 training seeds (vpo-t0, vpo-t1); ..."."""
    parts = []
    for arm in study_arms(c.algo for c in curves):
        if not arm.trained:
            parts.append(escape(arm.name))
            continue
        seeds = len(arm.policies)
        parts.append(f"{escape(arm.name)}: {seeds} training seed{'s' * (seeds != 1)} "
                     f"({', '.join(escape(policy) for _, policy in arm.policies)})")
    return "; ".join(parts) or "none yet"


def with_training_section(page: str, section: str) -> str:
    """The experiment report's page with the training section put before its footer (html.py renders the page;
    the study adds a section of its own without touching it)."""
    marker = "<footer>"
    return page.replace(marker, section + marker, 1) if marker in page else page + section


def cracked_by_policy(results: ExperimentResults) -> dict[str, dict[str, Any]]:
    """Per policy: problems cracked by at least one seed out of the problems some seed of it has run (a checkpoint
    whose cells have not started in an interim report has 0 of 0, not 0 of 30), and per problem the cracked seeds
    out of those run with the exact interval."""
    summary: dict[str, dict[str, Any]] = {}
    for policy in results.policies:
        rows = [row for row in results.table if row.policy == policy]
        summary[policy] = {
            "problems_cracked": sum(row.cracked > 0 for row in rows),
            "problems": sum(row.seeds_run > 0 for row in rows),
            "per_problem": {row.problem: {"cracked_seeds": row.cracked, "seeds_run": row.seeds_run,
                                          "interval": asdict(row.cracked_interval) if row.cracked_interval else None,
                                          "best_scalar": row.best_scalar} for row in rows},
        }
    return summary


def sampling_summary(samples: dict[str, list[Any]]) -> dict[str, dict[str, Any]]:
    """Per policy and test problem: n answers, c solved, pass@1 and best@n, the tokens generated and per answer
    (ProblemSample's figures)."""
    return {policy: {s.problem: {"n": s.n, "c": s.c, "pass@1": s.pass_at(1), f"pass@{s.n}": s.pass_at(s.n),
                                 "best@1": s.best_at(1), f"best@{s.n}": s.best_at(s.n), "run_id": s.run_id,
                                 "failed_requests": s.failed_requests, "completion_tokens": s.completion_tokens,
                                 "tokens_per_answer": s.tokens_per_answer} for s in rows}
            for policy, rows in samples.items()}


def sample_tokens(rows: list[Any]) -> dict[str, Any]:
    """Over ProblemSamples (plain sampling of several problems): answers, generated tokens and tokens per answer
    (None without an answer), each problem's answers its n (m per request, failed requests included)."""
    answers, tokens = sum(s.n for s in rows), sum(s.completion_tokens for s in rows)
    return {"problems": len(rows), "answers": answers, "completion_tokens": tokens,
            "tokens_per_answer": tokens / answers if answers else None}


def sampling_tokens(samples: dict[str, list[Any]]) -> dict[str, dict[str, Any]]:
    """Per policy, `sample_tokens` over its sampled test problems."""
    return {policy: sample_tokens(rows) for policy, rows in samples.items()}


def evolution_tokens(results: ExperimentResults) -> dict[str, dict[str, Any]]:
    """Per arm of the experiment: answers asked for, programs evaluated (the answers that became a new child),
    generated tokens, tokens per answer and the per-answer token cap (`PolicyBudget`), comparable with
    `sampling_tokens`."""
    return {b.policy: {"answers": b.answers, "evaluations": b.evaluations, "completion_tokens": b.completion_tokens,
                       "tokens_per_answer": b.tokens_per_answer, "max_new_tokens": list(b.max_new_tokens),
                       "policy_calls": b.policy_calls, "policy_errors": b.policy_errors}
            for b in results.budgets}


def study_json(name: str, facts: dict[str, Any], budgets: list[dict[str, Any]], curves: list[TrainingCurves],
               samples: dict[str, list[Any]], results: ExperimentResults, seconds: dict[str, float],
               arms: ArmReport | None = None, changes: list[RewardChange] | None = None) -> dict[str, Any]:
    """Everything the study found, in one document (the experiment's own numbers are in report.json beside it).

    `arms`: the study's arms (`arm_report`); by default made from facts' training_runs, claim and training_seeds
    (without training_runs, policies named ALGO-tSEED are grouped under ALGO)."""
    if arms is None:
        spec = facts.get("spec") or {}
        arms = arm_report(results, facts.get("training_runs"), facts.get("claim"), facts.get("training_seeds"),
                          comparisons=spec.get("comparisons"),
                          split=(spec.get("evolution") or {}).get("checkpoint_seeds") == "split")
    return {
        "study": name, "claim": arms.claim, **facts,
        "training_budgets": budgets,
        "training_curves": {c.algo: _finite(asdict(c)) for c in curves},
        "training_reward_change_method": REWARD_CHANGE_METHOD,
        "training_reward_change": [asdict(c) | {"change": c.change} for c in changes or []],
        "sampling": sampling_summary(samples),
        "sampling_tokens": sampling_tokens(samples),
        "sampling_k_method": K_METHOD,
        "sampling_k_curves": [asdict(curve) for curve in k_curves(samples, results.confidence, results.score_range)],
        "sampling_diversity": [asdict(d) for d in diversity(samples)],
        "evolution": {"iterations": results.iterations, "seeds": list(results.seeds),
                      "answers_per_iteration": results.answers_per_iteration, "problems": list(results.problems),
                      "cracked": cracked_by_policy(results),
                      "tokens": evolution_tokens(results),
                      "differences_method": DIFFERENCES_METHOD,
                      "differences": [asdict(d) for d in results.differences]},
        "arms_method": ARMS_METHOD,
        "arms": {arm.arm: arm_json(arm) for arm in arms.arms},
        "arm_differences_method": ARM_DIFFERENCES_METHOD,
        "arm_differences": [asdict(d) for d in arms.differences],
        "arm_differences_registered": arms.registered,
        "arm_differences_exploratory": [asdict(d) for d in arms.exploratory],
        "arm_notes": list(arms.notes),
        "stage_seconds": seconds,
    }


def _finite(value: Any) -> Any:
    """NaN (a step without that problem) as null: JSON has no NaN."""
    if isinstance(value, float):
        return value if value == value else None
    if isinstance(value, dict):
        return {k: _finite(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_finite(v) for v in value]
    return value


# ---- arms: the base and each algorithm, its checkpoints (one per training seed) pooled -------------------------
