"""A study's training curves (reward, per-objective reward, KL, answer diversity per step, from each training run's
train_log.jsonl), drawn as an HTML section beside the experiment report; its arms (the base, each algorithm with
its checkpoints, one per training seed): each arm's crack share pooled over its checkpoints and per training seed,
the spread between training seeds and the paired differences between arms (HTML section, terminal tables); and the
study's JSON summary."""

from __future__ import annotations

import json
import re
from collections.abc import Iterable, Mapping
from dataclasses import asdict, dataclass
from html import escape
from pathlib import Path
from typing import Any

import numpy as np
from rich.console import Console
from rich.table import Table

from evolve.report.charts import Series, line_chart, palette
from evolve.report.html_tables import differences_table_html
from evolve.report.results import ExperimentResults, pooled_cells, pooled_differences
from evolve.report.stats import Interval, PairedDifference, clopper_pearson, mean_interval
from evolve.report.terminal import differences_table

DIFFERENCES_METHOD = ("mean: betting interval (Waudby-Smith and Ramdas, fixed bets) of the per-problem differences, "
                      "width = high - low; sign_p and permutation_p raw, *_holm Holm-adjusted over the `family` "
                      "comparisons of the report; significant: permutation_p_holm <= alpha")
ARMS_METHOD = ("per arm (the base; each algorithm with its checkpoints ALGO-tSEED, one per training seed): "
               "crack_share = mean over the test problems run of (cells that cracked it / cells run), a cell one "
               "evolution seed of one checkpoint, rows whose every policy call failed left out; interval: its "
               "betting interval over problems (n = problems); cells_interval: cracked_cells / cells with the exact "
               "Clopper-Pearson interval (n = cells); pooled: all the arm's checkpoints' cells; spread: of the "
               "per-training-seed crack shares (sd with n - 1)")
ARM_DIFFERENCES_METHOD = ("per test problem, arm a's share of cells cracked minus arm b's, each pooling all its "
                          "checkpoints' cells (training seeds pooled), over the problems both ran; mean: betting "
                          "interval of the per-problem differences; sign_p and permutation_p (sign-flip) raw, "
                          "*_holm Holm-adjusted over every pair of arms (`family`); significant: "
                          "permutation_p_holm <= alpha. Conditional on these checkpoints: the spread between "
                          "training seeds is the variation a new training run adds")
TRAINED_POLICY = re.compile(r"^(?P<algo>.+)-t(?P<seed>\d+)$")  # a study's checkpoint: ALGO-tSEED
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
    columns = {name: tuple(float(record.get(name, float("nan"))) for record in records) for name in CURVE_FIELDS}
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


def training_section_html(curves: list[TrainingCurves], budgets: list[dict[str, Any]]) -> str:
    """The training section: the equal budgets, then reward, KL, diversity and entropy per step (a line per
    algorithm) and the per-objective reward table."""
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
    """Per policy: problems cracked by at least one seed, and per problem the cracked seeds out of those run with
    the exact interval."""
    summary: dict[str, dict[str, Any]] = {}
    for policy in results.policies:
        rows = [row for row in results.table if row.policy == policy]
        summary[policy] = {
            "problems_cracked": sum(row.cracked > 0 for row in rows),
            "problems": len(rows),
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
    """Per arm of the experiment: answers asked for, generated tokens, tokens per answer and the per-answer token
    cap (`PolicyBudget`), comparable with `sampling_tokens`."""
    return {b.policy: {"answers": b.answers, "completion_tokens": b.completion_tokens,
                       "tokens_per_answer": b.tokens_per_answer, "max_new_tokens": list(b.max_new_tokens),
                       "policy_calls": b.policy_calls, "policy_errors": b.policy_errors}
            for b in results.budgets}


def study_json(name: str, facts: dict[str, Any], budgets: list[dict[str, Any]], curves: list[TrainingCurves],
               samples: dict[str, list[Any]], results: ExperimentResults, seconds: dict[str, float],
               arms: ArmReport | None = None) -> dict[str, Any]:
    """Everything the study found, in one document (the experiment's own numbers are in report.json beside it).

    `arms`: the study's arms (`arm_report`); by default made from facts' training_runs, claim and training_seeds
    (without training_runs, policies named ALGO-tSEED are grouped under ALGO)."""
    if arms is None:
        arms = arm_report(results, facts.get("training_runs"), facts.get("claim"), facts.get("training_seeds"))
    return {
        "study": name, "claim": arms.claim, **facts,
        "training_budgets": budgets,
        "training_curves": {c.algo: _finite(asdict(c)) for c in curves},
        "sampling": sampling_summary(samples),
        "sampling_tokens": sampling_tokens(samples),
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

@dataclass(frozen=True)
class StudyArm:
    """An arm of a study: the base, or an algorithm with its checkpoints (one per training seed)."""

    name: str
    policies: tuple[tuple[int | None, str], ...]  # (training seed, policy); None: not a trained checkpoint

    @property
    def trained(self) -> bool:
        return any(seed is not None for seed, _ in self.policies)


def study_arms(policies: Iterable[str],
               training_runs: Iterable[Mapping[str, Any]] | None = None) -> tuple[StudyArm, ...]:
    """The arms of a study's policies, in the order they first appear. A checkpoint the study trained (in
    `training_runs`, {policy, algo, training_seed} as study_report.json lists them; without them, a policy named
    ALGO-tSEED) joins its algorithm's arm; any other policy (the base) is an arm of its own. A training run whose
    policy is not among `policies` (not evolved yet) still joins its arm."""
    runs = {str(run["policy"]): (str(run["algo"]), int(run["training_seed"])) for run in training_runs or ()}
    arms: dict[str, list[tuple[int | None, str]]] = {}
    for policy in dict.fromkeys([*policies, *runs]):
        named = TRAINED_POLICY.match(policy) if training_runs is None else None
        arm: str
        seed: int | None
        if policy in runs:
            arm, seed = runs[policy]
        elif named:
            arm, seed = named["algo"], int(named["seed"])
        else:
            arm, seed = policy, None
        arms.setdefault(arm, []).append((seed, policy))
    return tuple(StudyArm(name, tuple(members)) for name, members in arms.items())


@dataclass(frozen=True)
class CrackShare:
    """The crack share of one checkpoint, or of an arm's checkpoints pooled: the mean over the test problems they ran
    of (cells that cracked the problem / cells run), a cell being one evolution seed of one checkpoint (rows whose
    every policy call failed left out)."""

    crack_share: float | None  # None: no cell ran
    interval: Interval | None  # the betting interval of that mean over problems (n = problems)
    cracked_cells: int
    cells: int
    cells_interval: Interval | None  # cracked_cells / cells with the exact Clopper-Pearson interval (n = cells)
    problems_cracked: int  # problems some cell cracked
    problems: int
    per_problem: dict[str, dict[str, int]]  # problem -> {"cracked_cells", "cells"}


@dataclass(frozen=True)
class TrainingSeedShare:
    policy: str
    training_seed: int
    share: CrackShare


@dataclass(frozen=True)
class Spread:
    """How far an arm's crack shares differ between its training seeds (those with a share)."""

    training_seeds: int
    min: float
    max: float
    range: float
    mean: float
    sd: float  # sample standard deviation (n - 1)


@dataclass(frozen=True)
class ArmResult:
    arm: str
    trained: bool
    policies: tuple[str, ...]
    per_training_seed: tuple[TrainingSeedShare, ...]  # empty for the base
    pooled: CrackShare  # every checkpoint's cells
    spread: Spread | None  # None below 2 training seeds with a share


@dataclass(frozen=True)
class ArmReport:
    """The study's arms and the paired differences between them (the primary endpoint compares two trained arms)."""

    claim: str  # "methods" (>= 2 training seeds per algorithm) or "checkpoints"
    training_seeds: tuple[int, ...]
    confidence: float
    problems: tuple[str, ...]
    arms: tuple[ArmResult, ...]
    differences: tuple[PairedDifference, ...]  # metric "pooled_cracked_share", Holm over every pair of arms
    notes: tuple[str, ...]

    def arm(self, name: str) -> ArmResult:
        return next(arm for arm in self.arms if arm.arm == name)


def crack_share(results: ExperimentResults, policies: Iterable[str]) -> CrackShare:
    """The crack share of `policies` taken together, with its betting interval over problems and the exact interval
    of its cells."""
    pooled = pooled_cells(results.table, policies)
    shares = np.array([cracked / cells for cracked, cells in pooled.values()])
    cracked = sum(c for c, _ in pooled.values())
    cells = sum(n for _, n in pooled.values())
    cells_interval = Interval(cracked / cells, *clopper_pearson(cracked, cells, results.confidence), cells) \
        if cells else None
    return CrackShare(float(shares.mean()) if shares.size else None,
                      mean_interval(shares, results.confidence) if shares.size else None, cracked, cells,
                      cells_interval, sum(c > 0 for c, _ in pooled.values()), len(pooled),
                      {problem: {"cracked_cells": c, "cells": n} for problem, (c, n) in pooled.items()})


def _spread(shares: list[float]) -> Spread | None:
    if len(shares) < 2:
        return None
    mean = sum(shares) / len(shares)
    sd = (sum((x - mean) ** 2 for x in shares) / (len(shares) - 1)) ** 0.5
    return Spread(len(shares), min(shares), max(shares), max(shares) - min(shares), mean, sd)


def arm_report(results: ExperimentResults, training_runs: Iterable[Mapping[str, Any]] | None = None,
               claim: str | None = None, training_seeds: Iterable[int] | None = None,
               samples: int = 100_000) -> ArmReport:
    """Per arm (`study_arms`): its crack share pooled over its checkpoints and per training seed, the spread
    between training seeds; and per pair of arms the paired difference of their pooled per-problem shares
    (`pooled_differences`). `claim` defaults to "methods" when every trained arm has at least 2 checkpoints."""
    arms = study_arms(results.policies, training_runs)
    trained = [arm for arm in arms if arm.trained]
    claim = claim or ("methods" if trained and all(len(arm.policies) >= 2 for arm in trained) else "checkpoints")
    seeds = tuple(training_seeds) if training_seeds is not None else tuple(sorted(
        {seed for arm in trained for seed, _ in arm.policies if seed is not None}))
    out, notes = [], []
    for arm in arms:
        per_seed = tuple(TrainingSeedShare(policy, seed, crack_share(results, [policy]))
                         for seed, policy in arm.policies if seed is not None)
        spread = _spread([s.share.crack_share for s in per_seed if s.share.crack_share is not None])
        policies = tuple(policy for _, policy in arm.policies)
        out.append(ArmResult(arm.name, arm.trained, policies, per_seed, crack_share(results, policies), spread))
        ran = sum(s.share.cells > 0 for s in per_seed)
        if arm.trained and claim == "methods" and ran < 2:
            notes.append(f"{arm.name}: {ran} training seed{'s' * (ran != 1)} with cells run, so no spread between "
                         f"training seeds: its numbers speak for that checkpoint, not for the method.")
    failed = [row for row in results.table if row.state == "policy_failed"]
    if failed:
        notes.append(f"{len(failed)} (problem, policy) rows whose every policy call failed are left out of the crack "
                     f"shares and differences: " + ", ".join(f"{row.policy} on {row.problem}" for row in failed))
    arm_of = {policy: arm.name for arm in arms for _, policy in arm.policies}
    return ArmReport(claim, seeds, results.confidence, results.problems, tuple(out),
                     pooled_differences(results, arm_of, samples), tuple(notes))


def arm_json(arm: ArmResult) -> dict[str, Any]:
    """One arm as study_report.json gives it: trained, policies, per_training_seed (by training seed, as a
    string), pooled, spread."""
    return {"trained": arm.trained, "policies": list(arm.policies),
            "per_training_seed": {str(s.training_seed): {"policy": s.policy, "training_seed": s.training_seed,
                                                         **asdict(s.share)} for s in arm.per_training_seed},
            "pooled": asdict(arm.pooled), "spread": asdict(arm.spread) if arm.spread else None}


def claim_text(report: ArmReport) -> str:
    """What the study's comparison is about, in plain words."""
    seeds = len(report.training_seeds)
    listed = ", ".join(map(str, report.training_seeds))
    if report.claim == "methods":
        return (f"Claim: methods. Each algorithm was trained from {seeds} training seed{'s' * (seeds != 1)} "
                f"({listed}), one checkpoint each (ALGO-tSEED), and every checkpoint was evolved on every test "
                f"problem x evolution seed. An arm's crack share pools the cells of all its checkpoints, so a "
                f"difference between arms compares the training methods averaged over their training runs; the "
                f"spread between training seeds shows how far one training run moves an arm.")
    return (f"Claim: checkpoints. Each algorithm was trained from {seeds} training seed{'s' * (seeds != 1)} "
            f"({listed}): a difference between arms compares these checkpoints, not the training methods (another "
            f"training seed might order them otherwise).")


def _share_text(share: CrackShare, digits: int = 3) -> str:
    if share.crack_share is None or share.interval is None:
        return "no cell ran"
    return (f"{share.crack_share:.{digits}f} [{share.interval.low:.{digits}f}, {share.interval.high:.{digits}f}] "
            f"n={share.problems} problems")


def _cells_text(share: CrackShare) -> str:
    if share.cells_interval is None:
        return "0 cells"
    return (f"{share.cracked_cells}/{share.cells} cells [{share.cells_interval.low:.3f}, "
            f"{share.cells_interval.high:.3f}]")


def _spread_text(arm: ArmResult) -> str:
    if not arm.trained:
        return "untrained"
    if arm.spread is None:
        return "one training seed: unknown"
    s = arm.spread
    return f"{s.min:.3f} - {s.max:.3f} (range {s.range:.3f}), sd {s.sd:.3f}, {s.training_seeds} training seeds"


def arms_section_html(report: ArmReport) -> str:
    """The study's arms on its report page: the claim, per arm its pooled crack share with both intervals, per
    training seed its checkpoint's share, the spread between training seeds; cells cracked per problem and arm; the
    paired differences between arms."""
    level = f"{report.confidence:.0%}"
    rows = []
    for arm in report.arms:
        seeds = "<br>".join(
            f'<span data-training-seed="{s.training_seed}">{escape(s.policy)}: {escape(_share_text(s.share))}'
            f'<span class="band">; {escape(_cells_text(s.share))}</span></span>' for s in arm.per_training_seed) \
            or '<span class="band">untrained</span>'
        values = [escape(", ".join(arm.policies)), escape(_share_text(arm.pooled)), escape(_cells_text(arm.pooled)),
                  f"{arm.pooled.problems_cracked}/{arm.pooled.problems}", seeds, escape(_spread_text(arm))]
        rows.append(f'<tr data-arm="{escape(arm.arm)}"><th>{escape(arm.arm)}</th>'
                    + "".join(f"<td>{v}</td>" for v in values) + "</tr>")
    heads = ["arm", "checkpoints", f"crack share, pooled [{level} betting interval]",
             f"cells cracked, pooled [{level} exact interval]", "problems cracked",
             f"per training seed: crack share [{level} betting]; cells", "spread between training seeds"]
    arms_table = (f'<table class="arms"><thead><tr>{"".join(f"<th>{h}</th>" for h in heads)}</tr></thead>'
                  f'<tbody>{"".join(rows)}</tbody></table>')
    problem_rows = []
    for problem in report.problems:
        cells = []
        for arm in report.arms:
            counts = arm.pooled.per_problem.get(problem)
            cells.append('<td class="num">&ndash;</td>' if counts is None else
                         f'<td class="num" data-arm="{escape(arm.arm)}">{counts["cracked_cells"]}/{counts["cells"]}'
                         f'<span class="band"> ({counts["cracked_cells"] / counts["cells"]:.3f})</span></td>')
        problem_rows.append(f'<tr data-problem="{escape(problem)}"><th>{escape(problem)}</th>{"".join(cells)}</tr>')
    arm_heads = "".join(f'<th class="num">{escape(arm.arm)}</th>' for arm in report.arms)
    per_problem = (f'<table class="arm-problems"><thead><tr><th>test problem</th>{arm_heads}</tr></thead>'
                   f'<tbody>{"".join(problem_rows)}</tbody></table>')
    notes = ("" if not report.notes else
             '<div class="notes"><ul>' + "".join(f"<li>{escape(n)}</li>" for n in report.notes) + "</ul></div>")
    family = report.differences[0].family if report.differences else 0
    differences = (differences_table_html(report.differences, report.confidence) if report.differences else
                   '<p class="missing">no two arms ran a common test problem</p>')
    return (f'<section id="arms"><h2>Arms: each algorithm&rsquo;s checkpoints pooled, and per training seed</h2>'
            f'<p class="claim" data-claim="{escape(report.claim)}"><strong>{escape(claim_text(report))}</strong></p>'
            f"{notes}"
            f'<p class="hint">An arm is the base, or an algorithm with its checkpoints (ALGO-tSEED, one per training '
            f"seed). Its crack share is the mean over the test problems of the share of cells that cracked the "
            f"problem, a cell being one evolution seed of one checkpoint; pooled, each problem's share counts the "
            f"cells of all the arm's checkpoints. Beside it: the {level} betting interval of that mean (n = "
            f"problems), the cells cracked with the exact Clopper-Pearson interval (n = cells), each training "
            f"seed's checkpoint alone, and the spread of those per-seed shares (smallest to largest, sample sd). "
            f"The intervals hold for these checkpoints; a new training run adds the variation the spread "
            f"shows.</p>{arms_table}"
            f"<h3>Cells cracked per test problem, each arm&rsquo;s checkpoints pooled</h3>{per_problem}"
            f"<h3>Paired differences between arms</h3>"
            f'<p class="hint">Per test problem, arm a&rsquo;s pooled share of cells cracked minus arm b&rsquo;s '
            f"(training seeds pooled), paired across the problems both ran: the mean with its {level} betting "
            f"interval and width, the exact sign test and the sign-flip permutation test; p-values raw and, in "
            f"brackets, Holm-adjusted over the {family} pairs of arms; &ldquo;significant&rdquo; is the Holm-adjusted "
            f"permutation p at or below &alpha; = {1 - report.confidence:.2g}. The differences between single "
            f"checkpoints are in the table of paired differences between policies.</p>{differences}</section>")


def render_arms(report: ArmReport, console: Console) -> None:
    """The study's arms in the terminal: the claim, the arm table and the paired differences between arms."""
    level = f"{report.confidence:.0%}"
    console.print(claim_text(report), highlight=False, soft_wrap=True)
    for note in report.notes:
        console.print(f"[yellow]note:[/] {note}", highlight=False, soft_wrap=True)
    table = Table(title=f"arms: crack share = mean over test problems of cells cracked / cells run, pooled over each "
                        f"arm's checkpoints [{level} betting interval], cells cracked [{level} exact interval], per "
                        f"training seed, and the spread between training seeds")
    for column in ("arm", "crack share, pooled", "cells cracked, pooled", "problems cracked", "per training seed",
                   "spread between training seeds"):
        table.add_column(column, no_wrap=column == "arm")
    for arm in report.arms:
        seeds = "\n".join(f"{s.policy}: {_share_text(s.share)}; {_cells_text(s.share)}"
                          for s in arm.per_training_seed) or "untrained"
        table.add_row(arm.arm, _share_text(arm.pooled), _cells_text(arm.pooled),
                      f"{arm.pooled.problems_cracked}/{arm.pooled.problems}", seeds, _spread_text(arm))
    console.print(table)
    if report.differences:
        family = report.differences[0].family
        console.print(differences_table(
            report.differences,
            f"paired differences between arms (a - b): per test problem, a's share of cells cracked minus b's, "
            f"training seeds pooled; mean over problems [{level} betting interval], exact tests: raw p (Holm-adjusted "
            f"over the {family} pairs of arms); significant: Holm permutation p <= {1 - report.confidence:.2g}"))
