"""A study's arms (the base, each algorithm with its checkpoints ALGO-tSEED, one per training seed): each arm's crack
share pooled over its checkpoints and per training seed with its intervals, the spread between training seeds, and
the paired differences between arms, training seeds pooled (HTML section, terminal tables, JSON)."""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import asdict, dataclass
from html import escape
from typing import Any

import numpy as np
from rich.console import Console
from rich.table import Table

from evolve.report.html_tables import differences_table_html
from evolve.report.results import ExperimentResults, every_pair, pooled_cells, pooled_differences
from evolve.report.stats import Interval, PairedDifference, clopper_pearson, mean_interval
from evolve.report.terminal import differences_table

ARMS_METHOD = ("per arm (the base; each algorithm with its checkpoints ALGO-tSEED, one per training seed): "
               "crack_share = mean over the test problems run of (cells that cracked it / cells run), a cell one "
               "evolution seed of one checkpoint, rows whose every policy call failed left out; interval: its "
               "betting interval over problems (n = problems); cells_interval: cracked_cells / cells with the exact "
               "Clopper-Pearson interval (n = cells); pooled: all the arm's checkpoints' cells; spread: of the "
               "per-training-seed crack shares (sd with n - 1)")
ARM_DIFFERENCES_METHOD = ("per test problem, arm a's share of cells cracked minus arm b's, each pooling all its "
                          "checkpoints' cells (training seeds pooled), over the problems both ran; mean: betting "
                          "interval of the per-problem differences; sign_p and permutation_p (sign-flip) raw, "
                          "*_holm Holm-adjusted over the study's registered comparisons (its `comparisons`, the "
                          "primary first) or, where it names none, over every pair of arms (`family`); significant: "
                          "permutation_p_holm <= alpha. Conditional on these checkpoints (the problems are the sample, "
                          "the training runs are not): the spread between training seeds is the variation a new "
                          "training run adds, which no interval here holds")
TRAINED_POLICY = re.compile(r"^(?P<algo>.+)-t(?P<seed>\d+)$")  # a study's checkpoint: ALGO-tSEED


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
    differences: tuple[PairedDifference, ...]  # metric "pooled_cracked_share": the registered family, Holm over it
    notes: tuple[str, ...]
    registered: bool = False  # True: `differences` are the study's named comparisons, not every pair of arms
    split: bool = False  # checkpoint_seeds = "split": each checkpoint evolved on its share of the seeds
    exploratory: tuple[PairedDifference, ...] = ()  # the other pairs of arms, with a registered family: Holm apart

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
               samples: int = 100_000, comparisons: Iterable[Sequence[str]] | None = None,
               split: bool = False) -> ArmReport:
    """Per arm (`study_arms`): its crack share pooled over its checkpoints and per training seed, the spread
    between training seeds; and the paired differences of arms' pooled per-problem shares (`pooled_differences`):
    with `comparisons` (the study's registered (a, b) pairs, the primary first) those, Holm-adjusted together, and
    every other pair of arms apart as exploratory; without, every pair of arms in one family. `claim` defaults to
    "methods" when every trained arm has at least 2 checkpoints; `split`: the study's checkpoint_seeds = "split"
    (each checkpoint evolved on its share of the evolution seeds), for the claim's words."""
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
    registered = [(str(a), str(b)) for a, b in comparisons or ()]
    if not registered:
        return ArmReport(claim, seeds, results.confidence, results.problems, tuple(out),
                         pooled_differences(results, arm_of, samples), tuple(notes), split=split)
    named = {frozenset(pair) for pair in registered}
    others = [pair for pair in every_pair([arm.name for arm in arms]) if frozenset(pair) not in named]
    family = pooled_differences(results, arm_of, samples, registered)
    compared = {(d.policy_a, d.policy_b) for d in family}
    dropped = [f"{a} - {b}" for a, b in registered if (a, b) not in compared]
    if dropped:
        notes.append(f"registered comparisons without a test problem both arms ran, so not tested; each still "
                     f"counts in the Holm family of {len(registered)} with p = 1 (a registered family does not "
                     f"shrink): {', '.join(dropped)}.")
    return ArmReport(claim, seeds, results.confidence, results.problems, tuple(out), family, tuple(notes), True,
                     split, pooled_differences(results, arm_of, samples, others))


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
        evolved = ("each checkpoint was evolved on every test problem with its share of the evolution seeds (split: "
                   "the i-th seed to the checkpoint of the i-th training seed, in turn), so every arm has one cell "
                   "per problem and seed" if report.split else
                   "every checkpoint was evolved on every test problem x evolution seed")
        return (f"Claim: methods. Each algorithm was trained from {seeds} training seed{'s' * (seeds != 1)} "
                f"({listed}), one checkpoint each (ALGO-tSEED), and {evolved}. An arm's crack share pools the cells "
                f"of all its checkpoints, so a difference between arms compares the training methods averaged "
                f"over these training runs; the spread between training seeds shows how far one training run moves "
                f"an arm. The intervals and tests take the test problems as the sample and hold for these "
                f"checkpoints: a training run's own variation is not in them, so a significant difference says "
                f"the methods differ only as far as that spread is small beside it (a test over training runs "
                f"needs more of them: with 2 an arm, swapping training seeds between two arms gives 6 splits, "
                f"so no p below 1/3).")
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
    over = (f"the {family} registered comparisons (the study&rsquo;s <code>comparisons</code>, the primary first)"
            if report.registered else f"the {family} pairs of arms")
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
            f"brackets, Holm-adjusted over {over}; &ldquo;significant&rdquo; is the Holm-adjusted "
            f"permutation p at or below &alpha; = {1 - report.confidence:.2g}. The differences between single "
            f"checkpoints are in the table of paired differences between policies.</p>{differences}"
            f"{_exploratory_html(report)}</section>")


def _exploratory_html(report: ArmReport) -> str:
    """The pairs of arms outside a registered family: exploratory, Holm-adjusted among themselves."""
    if not report.exploratory:
        return ""
    count = len(report.exploratory)
    return (f'<h3 class="exploratory">Other pairs of arms (exploratory, not registered)</h3>'
            f'<p class="hint">The same measures for the {count} pair{"s" * (count != 1)} the study did not register; '
            f"their p-values are Holm-adjusted among themselves, apart from the registered family, and no headline "
            f"rests on them.</p>{differences_table_html(report.exploratory, report.confidence)}")


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
        over = f"the {family} registered comparisons" if report.registered else f"the {family} pairs of arms"
        console.print(differences_table(
            report.differences,
            f"paired differences between arms (a - b): per test problem, a's share of cells cracked minus b's, "
            f"training seeds pooled; mean over problems [{level} betting interval], exact tests: raw p (Holm-adjusted "
            f"over {over}); significant: Holm permutation p <= {1 - report.confidence:.2g}"))
    if report.exploratory:
        console.print(differences_table(
            report.exploratory, f"other pairs of arms (exploratory, not registered): the same measures, Holm-adjusted "
                                f"over these {len(report.exploratory)} alone"))
