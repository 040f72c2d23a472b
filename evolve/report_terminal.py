"""The terminal view of an experiment report: problems x policies table and the curves' end points, with rich."""

from __future__ import annotations

from rich.console import Console
from rich.table import Table
from rich.text import Text

from evolve.results import Curve, ExperimentResults, ProblemPolicyRow

_BLOCKS = " ▁▂▃▄▅▆▇█"


def sparkline(values: tuple[float, ...], low: float = 0.0, high: float = 1.0, width: int = 24) -> str:
    """The curve squeezed to `width` characters, each the value at that point, scaled from low..high."""
    if not values:
        return ""
    picks = [values[round(i * (len(values) - 1) / max(width - 1, 1))] for i in range(min(width, len(values)))]
    span = (high - low) or 1.0
    return "".join(_BLOCKS[1 + max(0, min(7, round((v - low) / span * 7)))] for v in picks)


def cell_text(row: ProblemPolicyRow) -> Text:
    if row.state == "not_run":
        return Text("not run", style="dim")
    if row.state == "policy_failed":
        return Text(f"policy failed: every call errored ({row.policy_errors} errors)", style="bold red")
    style = "green" if row.cracked else ""
    text = Text(f"{row.cracked}/{row.seeds_run} cracked", style=style)
    if row.median_first_iteration is not None:
        text.append(f", median it {row.median_first_iteration:g}")
    if row.best_scalar is not None:
        text.append(f"\nbest {row.best_scalar:.4f}")
    band = row.mean_best_scalar
    if band is not None and band.n > 1:
        text.append(f", mean {band.mean:.3f} [{band.low:.3f}, {band.high:.3f}]", style="dim")
    if row.state == "partial":
        text.append(f"\npartial: {row.seeds_run}/{row.seeds_planned} seeds started or unfinished", style="yellow")
    if row.policy_errors:
        text.append(f"\n{row.policy_errors} policy errors", style="red")
    return text


def _end(curve: Curve) -> str:
    return f"{curve.mean[-1]:.3f} [{curve.low[-1]:.3f}, {curve.high[-1]:.3f}]"


def render_report(results: ExperimentResults, console: Console) -> None:
    level = f"{results.confidence:.0%}"
    console.print(f"[bold]experiment {results.name}[/]  {results.description}", highlight=False)
    console.print(f"{len(results.policies)} policies x {len(results.problems)} problems x {len(results.seeds)} seeds, "
                  f"{results.iterations} iterations per cell; store {results.db}", highlight=False)
    table = Table(title="problems cracked: seeds that solved it, median first iteration, best scalar",
                  show_lines=True)
    table.add_column("problem", no_wrap=True)
    for policy in results.policies:
        table.add_column(policy)
    for problem in results.problems:
        table.add_row(problem, *(cell_text(results.row(problem, policy)) for policy in results.policies))
    console.print(table)
    curves = Table(title=f"at iteration {results.iterations}: mean over seeds [{level} bootstrap interval], and "
                         f"the curve from iteration 0")
    curves.add_column("policy", no_wrap=True, min_width=max(map(len, results.policies), default=6))
    curves.add_column("seeds", no_wrap=True)
    for column in ("share of problems cracked", "best score, mean over problems"):  # headers may wrap, values not
        curves.add_column(column, min_width=len("0.000 [0.000, 0.000]"))
    for policy in results.policies:
        try:
            cracked = results.curve(policy, "cracked_share")
            best = results.curve(policy, "best_score")
        except StopIteration:
            curves.add_row(policy, "0", "-", "-")
            continue
        low = min(min(c.mean) for c in results.curves if c.metric == "best_score")
        high = max(max(c.mean) for c in results.curves if c.metric == "best_score")
        curves.add_row(policy, str(cracked.seeds), f"{_end(cracked)}\n{sparkline(cracked.mean)}",
                       f"{_end(best)}\n{sparkline(best.mean, low, high)}")
    console.print(curves)
