"""The HTML view of an experiment report: one self-contained page (inline CSS and SVG, no scripts, works offline).

Header and how the intervals are made, the problems x policies table, the budget each arm spent, the share of
problems cracked and the best score so far against four axes (iterations, programs evaluated, generated tokens,
wall time; small multiples, drawn as steps), the best score per problem, paired differences between policies,
the objectives each policy reached, and every cell. Every string from the data is escaped: problem and policy
names are the user's.
"""

from __future__ import annotations

from html import escape

from evolve.report.charts import line_chart, palette
from evolve.report.html_tables import budgets_html, differences_html, instructions_html, objectives_html
from evolve.report.results import AXIS_LABELS, CellResult, ExperimentResults, ProblemPolicyRow
from evolve.report.results_curves import curve_series
from evolve.report.terminal import first_crack_text

_CSS = """
:root { color-scheme: light; }
body { font: 14px/1.45 system-ui, -apple-system, "Segoe UI", Roboto, sans-serif; color: #1d1d1f;
       background: #f6f7f9; margin: 0; }
main { max-width: 1180px; margin: 0 auto; padding: 24px 28px 48px; }
h1 { font-size: 24px; margin: 0 0 4px; }
h2 { font-size: 18px; margin: 32px 0 6px; padding-top: 8px; border-top: 1px solid #dde1e6; }
p.lead { margin: 0 0 14px; color: #444; }
p.hint { color: #555; margin: 2px 0 12px; max-width: 900px; }
dl.facts { display: grid; grid-template-columns: max-content 1fr; gap: 3px 16px; margin: 0 0 12px; }
dl.facts dt { color: #666; } dl.facts dd { margin: 0; }
.notes { background: #fff8e1; border-left: 4px solid #e0a800; padding: 8px 14px; margin: 12px 0; }
.notes li { margin: 2px 0; }
table { border-collapse: collapse; background: #fff; box-shadow: 0 1px 2px rgba(0,0,0,.06); }
th, td { border: 1px solid #dde1e6; padding: 6px 10px; text-align: left; vertical-align: top; }
th { background: #eef1f5; font-weight: 600; }
table.matrix td { min-width: 150px; }
table.cells td, table.cells th { padding: 3px 8px; font-size: 13px; }
td.num, th.num { text-align: right; font-variant-numeric: tabular-nums; }
.swatch { display: inline-block; width: 11px; height: 11px; border-radius: 2px; margin-right: 6px;
          vertical-align: -1px; }
.cracked { color: #0a7a36; font-weight: 600; }
.zero { color: #333; }
.detail { color: #444; font-size: 13px; }
.band { color: #666; }
.nowrap { white-space: nowrap; }
.state { display: inline-block; font-size: 12px; font-weight: 600; padding: 1px 6px; border-radius: 3px;
         margin-top: 3px; }
.state-partial { background: #fff1c2; color: #7a5600; }
.state-not_run { background: #eceff2; color: #555; }
.failed, .state-policy_failed { color: #c0121f; font-weight: 600; }
td.not_run { background: #f7f8fa; color: #777; }
td.policy_failed { background: #fff1f1; }
tr.policy-failed td { background: #fff4f4; }
tr.not-run td { color: #888; }
code { font: 12px ui-monospace, SFMono-Regular, Menlo, Consolas, monospace; background: #eef1f5;
       padding: 1px 4px; border-radius: 3px; }
.chart { background: #fff; box-shadow: 0 1px 2px rgba(0,0,0,.06); padding: 8px; margin: 10px 0;
         display: inline-block; max-width: 100%; }
.chart svg { display: block; max-width: 100%; height: auto; }
.chart .missing { color: #777; font-size: 12px; margin: 4px 6px 0; }
.multiples { display: flex; flex-wrap: wrap; gap: 0 14px; }
h3 { font-size: 14px; margin: 14px 0 4px; }
table.objectives td, table.objectives th { padding: 3px 6px; font-size: 12px; }
div.objectives { overflow-x: auto; max-width: 100%; }
table.differences td, table.budgets td { font-size: 13px; }
table.differences td:first-child, table.differences td:nth-child(5) { white-space: nowrap; }
footer { margin-top: 36px; color: #777; font-size: 12px; }
"""


def report_html(results: ExperimentResults, kind: str = "Experiment") -> str:
    """The whole report as one HTML document, headed "KIND NAME" (an experiment's, or a study's evolution stage)."""
    colours = palette(results.policies)
    body = [_header(results, kind), _notes(results), _matrix(results, colours), budgets_html(results, colours),
            *_charts(results, colours), differences_html(results), objectives_html(results, colours),
            instructions_html(results), _cells(results)]
    return "\n".join([
        "<!DOCTYPE html>", '<html lang="en">', "<head>", '<meta charset="utf-8">',
        '<meta name="viewport" content="width=device-width, initial-scale=1">',
        f"<title>evolve report: {escape(results.name)}</title>", f"<style>{_CSS}</style>", "</head>",
        "<body>", "<main>", *body,
        f"<footer>evolve report {escape(results.name)}, generated {escape(results.generated_at)}. Every number "
        f"here is also in report.json and the CSV files beside this page.</footer>",
        "</main>", "</body>", "</html>", ""])


def _num(value: float | None, digits: int = 4) -> str:
    if value is None:
        return "&ndash;"
    return f"{value:.{digits}f}" if abs(value) < 1e5 else f"{value:.{digits}g}"


def _header(results: ExperimentResults, kind: str) -> str:
    level = f"{results.confidence:.0%}"
    seeds = len(results.seeds)
    facts = [
        ("store", f"<code>{escape(results.db)}</code>"),
        ("generated", escape(results.generated_at)),
        ("design", f"{_count(len(results.policies), 'policy', 'policies')} &times; "
                   f"{_count(len(results.problems), 'problem')} &times; {_count(seeds, 'seed')} "
                   f"({', '.join(escape(str(s)) for s in results.seeds)})" + _arm_seeds(results)),
        ("iterations", f"{results.iterations} per cell, {results.answers_per_iteration} candidate answers each "
                       "(a policy writing m per request makes answers / m requests)" + _arm_budgets(results)),
        ("intervals", f"{level}: Clopper-Pearson for cracked k/n; betting (Waudby-Smith and Ramdas) for means of "
                      f"scores in {results.score_range[0]:g}..{results.score_range[1]:g} and for paired differences; "
                      f"p-values of the differences Holm-adjusted"),
    ]
    rows = "".join(f"<dt>{name}</dt><dd>{value}</dd>" for name, value in facts)
    return (f"<header><h1>{escape(kind)} {escape(results.name)}</h1>"
            + (f'<p class="lead">{escape(results.description)}</p>' if results.description else "")
            + f'<dl class="facts">{rows}</dl>'
            f'<p class="hint">How the intervals are computed: seeds are the unit of repetition (never iterations '
            f"or programs), and every interval rests on the n seeds named beside it ({seeds} planned per policy). "
            f"Cracked k of n seeds has the exact Clopper-Pearson {level} interval. A mean over seeds (a table's mean "
            f"best scalar, every point of a curve's shaded band) has the betting interval of Waudby-Smith and Ramdas "
            f"(the candidate means at which a gambler spreading a unit over fixed bets on the scores ends below "
            f"2 / alpha): at least {level} coverage for any distribution of scores in the declared range, at any n, "
            f"narrower than Hoeffding's where the scores agree, and never zero width, so three seeds that agree "
            f"still leave room for a fourth that does not. {_few_seeds(seeds)}First-crack times are Kaplan-Meier "
            f"estimates in which a seed that never cracked counts as censored at its budget. Cracked follows each "
            f"problem's current solved rule, applied to the stored score vectors.</p></header>")


def _arm_budgets(results: ExperimentResults) -> str:
    if not results.arm_budgets:
        return ""
    return "; the same answers split otherwise: " + "; ".join(
        f"{escape(arm)} {iterations} iterations x {answers} answers"
        for arm, (answers, iterations) in results.arm_budgets.items())


def _arm_seeds(results: ExperimentResults) -> str:
    if not results.arm_seeds:
        return ""
    return "; only some seeds: " + "; ".join(f"{escape(arm)} {', '.join(map(str, seeds))}"
                                             for arm, seeds in results.arm_seeds.items())


def _count(n: int, one: str, many: str = "") -> str:
    return f"{n} {one if n == 1 else many or one + 's'}"


def _few_seeds(seeds: int) -> str:
    """The warning a small design needs (empty from 10 seeds on, where the intervals have narrowed)."""
    if seeds >= 10:
        return ""
    return f"At {_count(seeds, 'seed')} these intervals are wide: that is what {_count(seeds, 'seed')} can tell. "


def _notes(results: ExperimentResults) -> str:
    """Warnings a reader must see before trusting the numbers: cells not run, failed policies, other budgets."""
    notes = [escape(note) for note in results.notes]
    missing = [c for c in results.cells if c.run_id is None]
    if missing:
        notes.append(f"{len(missing)} of {len(results.cells)} cells have not run; the curves rest on the others.")
    for row in results.table:
        if row.state == "policy_failed":
            notes.append(f"{escape(row.policy)} on {escape(row.problem)}: policy failed, every call errored "
                         f"({row.policy_errors} errors).")
    other = [c for c in results.cells
             if c.run_id is not None and c.iterations_target != results.iterations_of(c.policy)]
    if other:
        budgets = ", ".join(sorted({str(c.iterations_target) for c in other}))
        notes.append(f"{len(other)} cells were run with a budget of {budgets} iterations, not their arm's "
                     f"({results.iterations} unless the arm has its own); their best score is carried flat past "
                     f"their last iteration.")
    if not notes:
        return ""
    return '<div class="notes"><ul>' + "".join(f"<li>{note}</li>" for note in notes) + "</ul></div>"


def _row_html(row: ProblemPolicyRow) -> str:
    if row.state == "not_run":
        return '<span class="state state-not_run">not run</span>'
    if row.state == "policy_failed":
        return f'<span class="failed">policy failed: every call errored ({row.policy_errors} errors)</span>'
    parts = [f'<span class="{"cracked" if row.cracked else "zero"}">cracked {row.cracked}/{row.seeds_run} '
             f"seeds</span>"]
    if row.cracked_interval is not None:
        interval = row.cracked_interval
        parts.append(f' <span class="band nowrap">[{interval.low:.2f}, {interval.high:.2f}]</span>')
    detail = [escape(first_crack_text(row))]
    detail.append(f"best scalar: {_num(row.best_scalar)}")
    band = row.mean_best_scalar
    if band is not None:
        flag = (f' <span class="failed">{band.out_of_range} outside the score range</span>'
                if band.out_of_range else "")
        detail.append(f'mean best scalar: {_num(band.estimate)} <span class="band">[{_num(band.low)}, '
                      f"{_num(band.high)}] width {_num(band.width, 3)}, n = {band.n}</span>{flag}")
    parts.append('<div class="detail">' + "<br>".join(detail) + "</div>")
    if row.policy_errors:
        parts.append(f'<div class="failed">{row.policy_errors} of {row.policy_errors + row.policy_calls} '
                     f"policy calls errored</div>")
    if row.state == "partial":
        parts.append(f'<span class="state state-partial">partial: {row.seeds_run}/{row.seeds_planned} seeds '
                     f"started, or a run unfinished</span>")
    return "".join(parts)


def _policy_head(policy: str, colours: dict[str, str]) -> str:
    return f'<span class="swatch" style="background:{colours[policy]}"></span>{escape(policy)}'


def _matrix(results: ExperimentResults, colours: dict[str, str]) -> str:
    head = "".join(f"<th>{_policy_head(p, colours)}</th>" for p in results.policies)
    rows = []
    for problem in results.problems:
        cells = []
        for policy in results.policies:
            row = results.row(problem, policy)
            cells.append(f'<td class="{row.state}" data-problem="{escape(problem)}" data-policy="{escape(policy)}" '
                         f'data-state="{row.state}">{_row_html(row)}</td>')
        rows.append(f"<tr><th>{escape(problem)}</th>{''.join(cells)}</tr>")
    level = f"{results.confidence:.0%}"
    return (f'<section><h2>Problems cracked</h2><p class="hint">Per problem and policy: the seeds whose run '
            f"solved the problem (by its current rule) with the {level} Clopper-Pearson interval of the share; the "
            f"median first-crack iteration from the Kaplan-Meier estimate, seeds that never cracked censored at "
            f"their budget (&gt; budget when fewer than half are estimated to crack); the best ranking scalar over "
            f"all seeds; and the mean over seeds of each seed's best scalar with its {level} interval.</p>"
            f'<table class="matrix"><thead><tr><th>problem</th>{head}</tr></thead><tbody>{"".join(rows)}'
            f"</tbody></table></section>")


def _chart(results: ExperimentResults, colours: dict[str, str], metric: str, problem: str | None, axis: str,
           title: str, y_label: str, y_range: tuple[float, float] | None, width: int, height: int) -> str:
    pool = results.curves if problem is None else results.problem_curves
    curves = [c for p in results.policies for c in pool if c.policy == p and c.metric == metric
              and c.problem == problem and c.axis == axis]
    longest = max([results.iterations, *(iterations for _, iterations in results.arm_budgets.values())])
    x_range = (0, longest) if axis == "iterations" else (0, max((c.x[-1] for c in curves), default=1))
    svg = line_chart(curve_series(curves, colours, "seed"), title, AXIS_LABELS[axis], y_label, y_range, width, height,
                     x_range=x_range)
    drawn = {c.policy for c in curves}
    absent = [p for p in results.policies if p not in drawn]
    note = (f'<p class="missing">no curve (no complete seed, or no such cost stored): '
            f'{escape(", ".join(absent))}</p>' if absent else "")
    problem_attr = f' data-problem="{escape(problem)}"' if problem is not None else ""
    return (f'<figure class="chart" data-metric="{metric}" data-axis="{axis}"{problem_attr} '
            f'data-series="{len(curves)}">{svg}{note}</figure>')


def _charts(results: ExperimentResults, colours: dict[str, str]) -> list[str]:
    level = f"{results.confidence:.0%}"
    sections = []
    for metric, title, short, y_label, y_range in (
            ("cracked_share", "Share of problems cracked (pass@k-style)", "Share cracked", "share of problems cracked",
             (0.0, 1.0)),
            ("best_score", "Best score so far, mean over problems (best@k-style)", "Mean best score",
             "mean best scalar", results.score_range)):
        # each chart's own title says what it shows: figures/ carries it out of its section
        charts = [_chart(results, colours, metric, None, axis, f"{short} against {AXIS_LABELS[axis]}", y_label,
                         y_range, 540, 280) for axis in results.axes]
        sections.append(
            f'<section><h2>{title}</h2><p class="hint">Per seed, '
            + ("the share of the experiment's problems solved by some program committed by x"
               if metric == "cracked_share" else
               "the best ranking scalar of the programs committed by x (x = 0 is the seed program), averaged over "
               "problems")
            + f", then the mean over seeds with its pointwise {level} band; drawn as steps, since nothing changes "
            "between commits. Five axes: iterations; candidate answers asked for (m per request, so arms with "
            "other answers per iteration or m compare at equal answers); programs evaluated, generated tokens and "
            "the run's active wall time, each cumulative in the order the iterations were committed. On a cost axis a "
            "policy's curve stops at the smallest total that every one of its seeds reached, so no seed is carried "
            "past its budget. Curves rest on complete seeds (every problem ran its budget).</p>"
            + f'<div class="multiples">{"".join(charts)}</div></section>')
    multiples = [_chart(results, colours, "best_score", problem, "iterations", problem, "best scalar",
                        results.score_range, 340, 250) for problem in results.problems]
    sections.append(
        '<section><h2>Best score per problem</h2><p class="hint">The best ranking scalar so far against iterations, '
        "mean over seeds, one chart per problem with a line per policy; the same curves against the other axes "
        "are in curves.csv. Scales differ between problems.</p>"
        + f'<div class="multiples">{"".join(multiples)}</div></section>')
    return sections


def _cell_row(cell: CellResult) -> str:
    classes = "policy-failed" if cell.policy_failed else "not-run" if cell.run_id is None else ""
    if cell.run_id is None:
        run = "&ndash;"
    else:
        run = f'{cell.run_id} <code title="the ancestry of its best or first solved program">evolve lineage ' \
              f"{cell.run_id}</code>"
    status = "policy failed" if cell.policy_failed else cell.status.replace("_", " ")
    status += " (stopped early)" if cell.stopped_early else ""
    errors = f'<span class="failed">{cell.policy_errors}</span>' if cell.policy_errors else "0"
    calls = f"{cell.policy_calls}/{errors}"
    first = "&ndash;" if cell.first_solved_iteration is None else str(cell.first_solved_iteration)
    wall = "&ndash;" if cell.wall_s is None else f"{cell.wall_s:,.1f}"
    rule = "" if cell.rule == "current" else ' <span class="state state-partial">stored flags</span>'
    values = [escape(cell.problem), escape(cell.policy), str(cell.seed), run,
              f'<span class="{"failed" if cell.policy_failed else ""}">{escape(status)}</span>{rule}',
              f"{cell.iterations_done}/{cell.iterations_target}", first, _num(cell.best_scalar), calls,
              f"{cell.evaluations:,}", f"{cell.completion_tokens:,}", wall]
    numeric = {2, 5, 6, 7, 8, 9, 10, 11}
    tds = "".join(f'<td class="num">{v}</td>' if i in numeric else f"<td>{v}</td>" for i, v in enumerate(values))
    return f'<tr class="{classes}">{tds}</tr>'


def _cells(results: ExperimentResults) -> str:
    heads = ["problem", "policy", "seed", "run", "status", "iterations done/target", "first solved iteration",
             "best scalar", "policy calls/errors", "programs evaluated", "generated tokens", "wall time (s)"]
    numeric = {2, 5, 6, 7, 8, 9, 10, 11}
    head = "".join(f'<th class="num">{h}</th>' if i in numeric else f"<th>{h}</th>" for i, h in enumerate(heads))
    rows = "".join(_cell_row(cell) for cell in results.cells)
    return (f'<section><h2>Cells</h2><p class="hint">One run per problem, policy and seed. <code>evolve lineage '
            f"RUN --db {escape(results.db)}</code> shows how a run's best (or first solved) program came about; "
            f"<code>evolve show RUN --db {escape(results.db)}</code> summarises the run."
            + (" The experiment is in pieces: {piece} is the number of the piece holding the problem (01 for the "
               "first problems of the file), and a run id is one piece store's." if "{piece}" in results.db else "")
            + "</p>"
            f'<table class="cells"><thead><tr>{head}</tr></thead><tbody>{rows}</tbody></table></section>')
