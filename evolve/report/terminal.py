"""The terminal view of an experiment report (rich): problems x policies, budgets, curve end points on every axis,
paired differences between policies and the objectives each policy reached. Every number names its n."""

from __future__ import annotations

from rich.console import Console
from rich.table import Table
from rich.text import Text

from evolve.report.results import AXIS_LABELS, METRIC_LABELS, ExperimentResults, ObjectiveReach, ProblemPolicyRow
from evolve.report.run_summary import choice_table
from evolve.report.stats import PairedDifference
from evolve.store.program_store import shown_store

_BLOCKS = " ▁▂▃▄▅▆▇█"


def sparkline(values: tuple[float, ...], low: float = 0.0, high: float = 1.0, width: int = 24) -> str:
    """The curve squeezed to `width` characters, each the value at that point, scaled from low..high."""
    if not values:
        return ""
    picks = [values[round(i * (len(values) - 1) / max(width - 1, 1))] for i in range(min(width, len(values)))]
    span = (high - low) or 1.0
    return "".join(_BLOCKS[1 + max(0, min(7, round((v - low) / span * 7)))] for v in picks)


def first_crack_text(row: ProblemPolicyRow) -> str:
    """The Kaplan-Meier median first-crack iteration, or "> budget" when the estimate never reaches one half."""
    survival = row.first_crack
    if survival is None:
        return ""
    censored = f"{survival.censored} censored" if survival.censored else "none censored"
    if survival.median is None:
        budget = f"{survival.longest_budget:g}" if survival.longest_budget is not None else "budget"
        return f"median first crack > {budget} (KM, {censored})"
    return f"median first crack it {survival.median:g} (KM, {censored})"


def cell_text(row: ProblemPolicyRow) -> Text:
    if row.state == "not_run":
        return Text("not run", style="dim")
    if row.state == "policy_failed":
        return Text(f"policy failed: every call errored ({row.policy_errors} errors)", style="bold red")
    style = "green" if row.cracked else ""
    text = Text(f"{row.cracked}/{row.seeds_run} cracked", style=style)
    if row.cracked_interval is not None:
        text.append(f" [{row.cracked_interval.low:.2f}, {row.cracked_interval.high:.2f}]", style="dim")
    text.append(f"\n{first_crack_text(row)}")
    if row.best_scalar is not None:
        text.append(f"\nbest {row.best_scalar:.4f}")
    band = row.mean_best_scalar
    if band is not None:
        text.append(f", mean {band.estimate:.3f} [{band.low:.3f}, {band.high:.3f}] width {band.width:.3f} "
                    f"n={band.n}", style="dim")
        if band.out_of_range:
            text.append(f" ({band.out_of_range} outside the score range)", style="yellow")
    if row.state == "partial":
        text.append(f"\npartial: {row.seeds_run}/{row.seeds_planned} seeds started or unfinished", style="yellow")
    if row.policy_errors:
        text.append(f"\n{row.policy_errors} policy errors", style="red")
    return text


def _per(total: float, iterations: int, digits: int = 1) -> str:
    return f"{total:,.0f} ({total / iterations:.{digits}f}/it)" if iterations else f"{total:,.0f}"


def tokens_per_answer_text(tokens_per_answer: float | None) -> str:
    return "-" if tokens_per_answer is None else f"{tokens_per_answer:,.1f}"


def cap_text(caps: tuple[int, ...]) -> str:
    """An arm's per-answer token cap, or its members' caps."""
    return " / ".join(f"{cap:,}" for cap in caps) or "-"


def render_budgets(results: ExperimentResults, console: Console) -> None:
    table = Table(title="what each arm spent (all its cells; per iteration in brackets); tokens per answer: "
                        "generated tokens / candidate answers asked for (m per request, failed requests included), "
                        "beside the per-answer token cap (a request for m answers may generate m times it)")
    for column in ("policy", "cells", "iterations", "programs evaluated", "generated tokens", "answers",
                   "tokens per answer", "cap per answer", "policy calls", "errors", "wall time (s)"):
        table.add_column(column, no_wrap=column == "policy")
    for b in results.budgets:
        wall = "unknown" if b.wall_s is None else _per(b.wall_s, b.iterations, 2)
        table.add_row(b.policy, str(b.cells), str(b.iterations), _per(b.evaluations, b.iterations),
                      _per(b.completion_tokens, b.iterations), _per(b.answers, b.iterations),
                      tokens_per_answer_text(b.tokens_per_answer), cap_text(b.max_new_tokens),
                      _per(b.policy_calls, b.iterations), str(b.policy_errors), wall)
    console.print(table)


def render_curves(results: ExperimentResults, console: Console) -> None:
    level = f"{results.confidence:.0%}"
    table = Table(title=f"curves at their last point: mean over seeds [{level} interval]; on a cost axis the last "
                        f"point is the smallest total every seed of the policy reached")
    table.add_column("policy", no_wrap=True, min_width=max(map(len, results.policies), default=6))
    table.add_column("axis", no_wrap=True)
    table.add_column("seeds x problems", no_wrap=True)
    for column in ("share of problems cracked", "best score, mean over problems"):
        table.add_column(column, min_width=len("0.000 [0.000, 0.000]"))
    for policy in results.policies:
        drawn = [c for c in results.curves if c.policy == policy and c.metric == "cracked_share"]
        if not drawn:
            table.add_row(policy, "-", "0", "no complete seed", "-")
        for cracked in drawn:
            best = results.curve(policy, "best_score", axis=cracked.axis)
            where = f"{AXIS_LABELS[cracked.axis]} {cracked.x[-1]:,.4g}"
            low = min(min(c.mean) for c in results.curves if c.metric == "best_score")
            high = max(max(c.mean) for c in results.curves if c.metric == "best_score")
            table.add_row(policy, where, f"{cracked.seeds} x {cracked.problems}",
                          f"{cracked.mean[-1]:.3f} [{cracked.low[-1]:.3f}, {cracked.high[-1]:.3f}]\n"
                          f"{sparkline(cracked.mean)}",
                          f"{best.mean[-1]:.3f} [{best.low[-1]:.3f}, {best.high[-1]:.3f}]\n"
                          f"{sparkline(best.mean, low, high)}")
    console.print(table)


def differences_table(differences: tuple[PairedDifference, ...], title: str) -> Table:
    """The paired differences as a rich table (the experiment report's between policies, the study's between
    arms)."""
    table = Table(title=title)
    for column in ("a - b", "metric", "problems", "mean difference", "width", "ahead/behind/tied",
                   "sign test p (Holm)", "permutation p (Holm)", "significant"):
        table.add_column(column)
    for d in differences:
        permutation = (f"{d.permutation_p:.3g}" + ("" if d.permutation_exact else " (Monte Carlo)")
                       + f" ({d.permutation_p_holm:.3g})")
        table.add_row(f"{d.policy_a} - {d.policy_b}", METRIC_LABELS.get(d.metric, d.metric), str(len(d.problems)),
                      f"{d.mean.estimate:+.3f} [{d.mean.low:+.3f}, {d.mean.high:+.3f}]", f"{d.mean.width:.3f}",
                      f"{d.wins}/{d.losses}/{d.ties}", f"{d.sign_p:.3g} ({d.sign_p_holm:.3g})", permutation,
                      Text("yes", style="green") if d.significant else "no")
    return table


def render_differences(results: ExperimentResults, console: Console) -> None:
    if not results.differences:
        return
    level = f"{results.confidence:.0%}"
    alpha = f"{1 - results.confidence:.2g}"
    family = results.differences[0].family
    console.print(differences_table(
        results.differences,
        f"paired differences over problems (a - b): per problem, a's value minus b's; mean over problems [{level} "
        f"betting interval] and its width, problems where a is ahead/behind/tied, exact tests: raw p (Holm-adjusted "
        f"over the {family} comparisons); significant: Holm permutation p <= {alpha}"))


def objectives_text(reaches: list[ObjectiveReach]) -> str:
    """Objectives grouped by how many seeds reached the bar ("3/3: 7 tests"), names listed for small groups; the
    best value per objective where the problem has no bar."""
    if any(reach.reached is None for reach in reaches):
        return "  ".join(f"{reach.objective} {reach.best:.3g}" for reach in reaches)
    groups: dict[tuple[int, int], list[str]] = {}
    for reach in reaches:
        groups.setdefault((reach.reached or 0, reach.seeds), []).append(reach.objective)
    parts = []
    for (reached, seeds), names in sorted(groups.items(), key=lambda item: -item[0][0] / max(item[0][1], 1)):
        listed = " ".join(names) if len(names) <= 6 else f"{len(names)} of {len(reaches)} objectives"
        parts.append(f"{reached}/{seeds} seeds: {listed}")
    return "; ".join(parts)


def render_objectives(results: ExperimentResults, console: Console) -> None:
    if not results.objectives:
        return
    table = Table(title="objectives reached: per test, seeds with a program at or above the problem's bar "
                        "(all_at_least), or the best value where it has none")
    table.add_column("problem", no_wrap=True)
    table.add_column("policy", no_wrap=True)
    table.add_column("objectives")
    for problem in results.problems:
        for policy in results.policies:
            reaches = [o for o in results.objectives if o.problem == problem and o.policy == policy]
            if reaches:
                table.add_row(problem, policy, objectives_text(reaches))
    console.print(table)


def render_report(results: ExperimentResults, console: Console) -> None:
    level = f"{results.confidence:.0%}"
    console.print(f"[bold]experiment {results.name}[/]  {results.description}", highlight=False)
    some = "".join(f" ({arm}: seeds {', '.join(map(str, seeds))})" for arm, seeds in results.arm_seeds.items())
    some += "".join(f" ({arm}: {iterations} iterations x {answers} answers)"
                    for arm, (answers, iterations) in results.arm_budgets.items())
    console.print(f"{len(results.policies)} policies x {len(results.problems)} problems x {len(results.seeds)} seeds"
                  f"{some}, {results.iterations} iterations per cell, "
                  f"{results.answers_per_iteration} candidate answers each; store {shown_store(results.db)}",
                  highlight=False)
    console.print(f"intervals ({level}): cracked k/n Clopper-Pearson (exact); means and paired differences "
                  f"betting (Waudby-Smith and Ramdas; at least {level} for any scores in "
                  f"{results.score_range[0]:g}..{results.score_range[1]:g}, n = seeds or problems); first crack "
                  f"Kaplan-Meier, seeds that never cracked censored at their budget; p-values of the paired "
                  f"differences Holm-adjusted over all of them",
                  highlight=False, style="dim")
    for note in results.notes:
        console.print(f"[yellow]note:[/] {note}", highlight=False)
    table = Table(title=f"problems cracked: seeds that solved it [{level} interval], first crack, best scalar",
                  show_lines=True)
    table.add_column("problem", no_wrap=True)
    for policy in results.policies:
        table.add_column(policy)
    for problem in results.problems:
        table.add_row(problem, *(cell_text(results.row(problem, policy)) for policy in results.policies))
    console.print(table)
    render_budgets(results, console)
    render_curves(results, console)
    render_differences(results, console)
    render_objectives(results, console)
    render_instructions(results, console)


def render_instructions(results: ExperimentResults, console: Console) -> None:
    """Per arm that evolved its system instruction: each instruction's text and what its iterations brought."""
    for arm in results.instructions:
        console.print(choice_table(f"evolved instructions of {arm.policy}, pooled over its {arm.runs} runs",
                                   "instruction", arm.rows))
