"""The HTML report's tables beside the main matrix: what each arm spent, paired differences between policies, and
which objectives (tests) each policy reached. Every string from the data is escaped; every number names its n."""

from __future__ import annotations

from html import escape

from evolve.report.results import METRIC_LABELS, ExperimentResults, ObjectiveReach
from evolve.report.stats import PairedDifference

TRANSPOSE_AT = 8  # objectives past this (and past the number of policies) are rows, not columns


def _per(total: float, iterations: int, digits: int = 1) -> str:
    per = f'<span class="band"> ({total / iterations:,.{digits}f}/it)</span>' if iterations else ""
    return f"{total:,.0f}{per}"


def budgets_html(results: ExperimentResults, colours: dict[str, str]) -> str:
    heads = ["policy", "cells", "iterations", "programs evaluated", "generated tokens", "answers",
             "tokens per answer", "cap per answer", "prompt tokens", "policy calls", "policy errors", "wall time (s)"]
    rows = []
    for b in results.budgets:
        wall = "unknown (older store)" if b.wall_s is None else _per(b.wall_s, b.iterations, 2)
        per_answer = "&ndash;" if b.tokens_per_answer is None else f"{b.tokens_per_answer:,.1f}"
        caps = " / ".join(f"{cap:,}" for cap in b.max_new_tokens) or "&ndash;"
        values = [str(b.cells), str(b.iterations), _per(b.evaluations, b.iterations),
                  _per(b.completion_tokens, b.iterations), _per(b.answers, b.iterations), per_answer, caps,
                  _per(b.prompt_tokens, b.iterations), _per(b.policy_calls, b.iterations), str(b.policy_errors),
                  wall]
        swatch = f'<span class="swatch" style="background:{colours[b.policy]}"></span>'
        rows.append(f'<tr data-policy="{escape(b.policy)}"><th>{swatch}{escape(b.policy)}</th>'
                    + "".join(f'<td class="num">{v}</td>' for v in values) + "</tr>")
    head = "".join(f'<th class="num">{h}</th>' if i else f"<th>{h}</th>" for i, h in enumerate(heads))
    return ('<section><h2>Budget spent</h2><p class="hint">What each arm spent over all its cells that ran, with '
            "the amount per iteration in brackets. Programs evaluated are the children sent to the evaluator "
            "(duplicates and unusable answers are not evaluated); wall time is each run's active clock (time it lay "
            "killed excluded), summed over cells. Answers are the candidate answers the arm's requests asked for (m "
            "per request, failed requests included, as plain sampling counts them); tokens per answer are the "
            "generated tokens divided by them, beside the per-answer token cap (<code>policy.max_new_tokens</code>; "
            "a request for m answers may generate m times it), so an arm writing several answers per request "
            "compares with a one-answer arm. Arms that spend differently per iteration are compared fairly on "
            "the cost axes of the curves below.</p>"
            f'<table class="budgets"><thead><tr>{head}</tr></thead><tbody>{"".join(rows)}</tbody></table></section>')


def short_names(problems: tuple[str, ...] | list[str]) -> list[str]:
    """Each problem's last path part where those are all different (he_016 for programs/humaneval/he_016), else the
    names as they are: the per-problem column of a 30-problem study stays readable."""
    shorts = [problem.rstrip("/").rsplit("/", 1)[-1] for problem in problems]
    return shorts if len(set(shorts)) == len(shorts) else list(problems)


def differences_table_html(differences: tuple[PairedDifference, ...], confidence: float) -> str:
    """The table of paired differences (a row per comparison: interval, width, raw and Holm-adjusted p-values, the
    per-problem differences); the experiment report's between policies, the study report's between arms."""
    level = f"{confidence:.0%}"
    alpha = f"{1 - confidence:.2g}"
    heads = ["a &minus; b", "metric", "problems", "mean difference", f"{level} interval", "width",
             "a ahead / behind / tied", "sign test p (Holm)", "permutation p (Holm)", f"significant (Holm, &alpha; = "
             f"{alpha})", "per problem"]
    rows = []
    for d in differences:
        permutation = (f"{d.permutation_p:.3g}" + ("" if d.permutation_exact else " (Monte Carlo)")
                       + f' <span class="band">(Holm {d.permutation_p_holm:.3g})</span>')
        per_problem = ", ".join(f'<span title="{escape(p)}">{escape(short)}</span> {v:+.3f}'
                                for p, short, v in zip(d.problems, short_names(d.problems), d.per_problem,
                                                       strict=True))
        values = [f"{escape(d.policy_a)} &minus; {escape(d.policy_b)}", METRIC_LABELS.get(d.metric, d.metric),
                  str(len(d.problems)), f"{d.mean.estimate:+.3f}", f"[{d.mean.low:+.3f}, {d.mean.high:+.3f}]",
                  f"{d.mean.width:.3f}", f"{d.wins} / {d.losses} / {d.ties}",
                  f'{d.sign_p:.3g} <span class="band">(Holm {d.sign_p_holm:.3g})</span>', permutation,
                  '<span class="cracked">yes</span>' if d.significant else "no",
                  f'<span class="detail">{per_problem}</span>']
        rows.append(f'<tr data-metric="{d.metric}" data-significant="{str(d.significant).lower()}" '
                    f'data-a="{escape(d.policy_a)}" data-b="{escape(d.policy_b)}">'
                    + "".join(f"<td>{v}</td>" for v in values) + "</tr>")
    head = "".join(f"<th>{h}</th>" for h in heads)
    return f'<table class="differences"><thead><tr>{head}</tr></thead><tbody>{"".join(rows)}</tbody></table>'


def differences_html(results: ExperimentResults) -> str:
    if not results.differences:
        return ""
    level = f"{results.confidence:.0%}"
    alpha = f"{1 - results.confidence:.2g}"
    family = results.differences[0].family
    return (f'<section><h2>Paired differences between policies</h2><p class="hint">For each problem both policies '
            f"ran, a's value minus b's: the share of its seeds that cracked the problem, and the mean over seeds of "
            f"each seed's best scalar. The mean difference over problems has a {level} interval that holds whatever "
            f"the problems' distributions (the betting interval of Waudby-Smith and Ramdas on the differences "
            f"rescaled to [0, 1], with fixed bets so that it covers the average true difference over these "
            f"problems even when they differ in difficulty); its width is printed beside it. The sign test counts "
            f"problems where a is ahead against those where it is behind (ties dropped), exact binomial; the "
            f"permutation test flips the sign of each problem's difference, every pattern enumerated up to 20 "
            f"problems. Both are two-sided. Each p-value is shown raw and, in brackets, Holm-adjusted over all "
            f"{family} comparisons of this table (every pair of policies, both metrics), which keeps the chance of "
            f"any false &ldquo;significant&rdquo; in the table at most &alpha;; &ldquo;significant&rdquo; is the "
            f"Holm-adjusted permutation p at or below &alpha; = {alpha}. The interval is not adjusted for the "
            f"{family} comparisons, so it can exclude 0 where the adjusted test does not; and it is built "
            f"differently from the test (a conservative bound that holds whatever the problems' distributions), so "
            f"a test can also be significant while the interval holds 0. n is the number of problems.</p>"
            f"{differences_table_html(results.differences, results.confidence)}</section>")


def _reach_cell(reach: ObjectiveReach | None) -> str:
    if reach is None:
        return '<td class="num reach-none">&ndash;</td>'
    if reach.reached is None:
        return f'<td class="num" title="best value over {reach.seeds} seeds">{reach.best:.3g}</td>'
    share = reach.reached / reach.seeds if reach.seeds else 0.0
    style = f"background: rgba(10, 122, 54, {0.08 + 0.5 * share:.2f})" if reach.reached else ""
    return (f'<td class="num" style="{style}" title="best value {reach.best:.4g}, mean best {reach.mean_best:.4g}">'
            f"{reach.reached}/{reach.seeds}</td>")


def objectives_html(results: ExperimentResults, colours: dict[str, str]) -> str:
    if not results.objectives:
        return ""
    tables = []
    for problem in results.problems:
        reaches = [o for o in results.objectives if o.problem == problem]
        if not reaches:
            continue
        names = list(dict.fromkeys(o.objective for o in reaches))
        by_key = {(o.policy, o.objective): o for o in reaches}
        policies = [p for p in results.policies if any(o.policy == p for o in reaches)]
        threshold = next((o.threshold for o in reaches if o.threshold is not None), None)
        bar = f"seeds with a program scoring &ge; {threshold:g}" if threshold is not None else \
            "best value over seeds (the problem has no per-objective bar)"
        swatches = {p: f'<span class="swatch" style="background:{colours[p]}"></span>{escape(p)}' for p in policies}
        if len(names) > max(TRANSPOSE_AT, len(policies)):  # a row per objective: any number of them fits the page
            head = "".join(f"<th>{swatches[p]}</th>" for p in policies)
            rows = "".join(f'<tr><th>{escape(n)}</th>' + "".join(_reach_cell(by_key.get((p, n))) for p in policies)
                           + "</tr>" for n in names)
            corner = "objective"
        else:
            head = "".join(f'<th class="num" title="{escape(n)}">{escape(n)}</th>' for n in names)
            rows = "".join(f"<tr><th>{swatches[p]}</th>" + "".join(_reach_cell(by_key.get((p, n))) for n in names)
                           + "</tr>" for p in policies)
            corner = "policy"
        tables.append(f'<div class="objectives" data-problem="{escape(problem)}"><h3>{escape(problem)}: {bar}</h3>'
                      f'<table class="objectives"><thead><tr><th>{corner}</th>{head}</tr></thead><tbody>{rows}'
                      f"</tbody></table></div>")
    return ('<section><h2>Objectives reached</h2><p class="hint">Which tests (objectives) each policy reached, per '
            "problem: in how many of its seeds some program reached the problem's per-objective bar "
            "(<code>all_at_least</code>), judged by the problem's current rule; where a problem has no such bar, the "
            "best value any seed reached. Hover a cell for the best and mean best value.</p>"
            + "".join(tables) + "</section>")


def _value(value: float | None, digits: int = 4) -> str:
    return "&ndash;" if value is None else f"{value:.{digits}f}"


def instructions_html(results: ExperimentResults) -> str:
    """Per arm that evolved its system instruction ([prompt_evolution]): each instruction's text and what its
    iterations brought, pooled over the arm's cells; "" when no arm did."""
    if not results.instructions:
        return ""
    heads = ["instruction", "text", "iterations", "children", "valid share", "improved on parent", "mean gain",
             "best reached"]
    tables = []
    for arm in results.instructions:
        rows = []
        for row in arm.rows:
            share = "&ndash;" if row.valid_share is None else f"{100 * row.valid_share:.0f} %"
            values = [str(row.iterations), f"{row.children} of {row.answers}", share, str(row.improvements),
                      _value(row.mean_gain), _value(row.best)]
            rows.append(f'<tr data-instruction="{escape(row.name)}"><td><code>{escape(row.name)}</code></td>'
                        f"<td>{escape(row.text)}</td>" + "".join(f'<td class="num">{v}</td>' for v in values)
                        + "</tr>")
        head = "".join(f'<th class="num">{h}</th>' if i > 1 else f"<th>{h}</th>" for i, h in enumerate(heads))
        tables.append(f'<h3 data-policy="{escape(arm.policy)}">{escape(arm.policy)} ({arm.runs} run'
                      f'{"s" if arm.runs != 1 else ""})</h3><table class="instructions"><thead><tr>{head}</tr>'
                      f'</thead><tbody>{"".join(rows)}</tbody></table>')
    return ('<section><h2>Evolved instructions</h2><p class="hint">Arms with prompt evolution: one row per system '
            "instruction their runs tried, pooled over the arm's problems and seeds, in order of first use. Children "
            "are valid children of all answers of the iterations that used it; mean gain is how far an iteration's "
            "best child rose above its parent (0 when none did), averaged over those iterations; best reached is "
            "the best child's scalar. Gains and scalars of different problems are pooled, so compare instructions "
            "within an arm. Lead 0 is the template's own system message.</p>" + "".join(tables) + "</section>")
