"""Plain sampling before evolution, per policy: pass@k and best@k against k with intervals over problems, and the
answers' diversity (distinct programs, distinct test-pass patterns) and tokens per answer; the study report's
"Sampling" section, a chart like the paper's first figure (a metric against k, one line per policy)."""

from __future__ import annotations

from dataclasses import dataclass
from html import escape
from typing import Literal

import numpy as np

from evolve.engine.sampling import ProblemSample
from evolve.report.charts import Series, line_chart, palette
from evolve.report.stats import mean_interval

KMetric = Literal["pass", "best"]
K_METHOD = ("per policy and k, the mean over the test problems of each problem's unbiased pass@k (1 - C(n - c, k) / "
            "C(n, k)) or best@k (the expected best scalar of k of its n answers drawn without replacement), with the "
            "betting interval over problems (n = problems); k runs to the smallest n of the policy's problems. The "
            "k answers are drawn from the n as if exchangeable: for a policy writing m answers a request, k counts "
            "answers, not k / m whole requests, so answers of one request may be split")


@dataclass(frozen=True)
class KCurve:
    """A policy's pass@k or best@k against k, mean over its problems with the interval over problems."""

    policy: str
    metric: KMetric
    ks: tuple[int, ...]
    mean: tuple[float, ...]
    low: tuple[float, ...]
    high: tuple[float, ...]
    problems: int


@dataclass(frozen=True)
class Diversity:
    """A policy's answers over its problems: means per problem of the answers, the distinct programs and distinct
    test-pass patterns among them (shares of the answers too), and the tokens generated per answer."""

    policy: str
    problems: int
    answers: float
    distinct_programs: float
    distinct_patterns: float
    program_share: float
    pattern_share: float
    tokens_per_answer: float


def k_curves(samples: dict[str, list[ProblemSample]], confidence: float = 0.95,
             score_range: tuple[float, float] = (0.0, 1.0)) -> list[KCurve]:
    """pass@k and best@k for k = 1 .. the smallest n of each policy's problems (policies without one left out)."""
    curves = []
    for policy, rows in samples.items():
        rows = [row for row in rows if row.n > 0]
        if not rows:
            continue
        ks = tuple(range(1, min(row.n for row in rows) + 1))
        for metric, value_range in (("pass", (0.0, 1.0)), ("best", score_range)):
            intervals = [mean_interval(np.array([row.pass_at(k) if metric == "pass" else row.best_at(k)
                                                 for row in rows]), confidence, value_range) for k in ks]
            curves.append(KCurve(policy, metric, ks, tuple(i.estimate for i in intervals),  # type: ignore[arg-type]
                                 tuple(i.low for i in intervals), tuple(i.high for i in intervals), len(rows)))
    return curves


def diversity(samples: dict[str, list[ProblemSample]]) -> list[Diversity]:
    """Per policy, the diversity and cost of its answers (means over its problems)."""
    out = []
    for policy, rows in samples.items():
        rows = [row for row in rows if row.n > 0]
        if not rows:
            continue
        out.append(Diversity(
            policy, len(rows), float(np.mean([row.n for row in rows])),
            float(np.mean([row.distinct_programs for row in rows])),
            float(np.mean([row.distinct_patterns for row in rows])),
            float(np.mean([row.distinct_programs / row.n for row in rows])),
            float(np.mean([row.distinct_patterns / row.n for row in rows])),
            float(np.mean([row.tokens_per_answer for row in rows]))))
    return out


def sampling_section_html(curves: list[KCurve], spread: list[Diversity], confidence: float = 0.95) -> str:
    """The study page's section: pass@k and best@k against k (one line per policy, its band over problems) and the
    diversity table; empty when nothing was sampled."""
    if not curves:
        return ""
    colours = palette(list(dict.fromkeys(curve.policy for curve in curves)))
    charts = []
    for metric, title, label in (("pass", "pass@k against k", "pass@k"), ("best", "best@k against k", "best@k")):
        series = [Series(curve.policy, colours[curve.policy], curve.ks, curve.mean, curve.low, curve.high,
                         note=f"n = {curve.problems} problems")
                  for curve in curves if curve.metric == metric]
        charts.append(f'<div class="chart">{line_chart(series, title, "k", label, (0.0, 1.0), 560, 300)}</div>')
    rows = "".join(
        f"<tr><td>{escape(d.policy)}</td><td>{d.problems}</td><td>{d.answers:.0f}</td>"
        f"<td>{d.distinct_programs:.1f} ({d.program_share:.0%})</td>"
        f"<td>{d.distinct_patterns:.1f} ({d.pattern_share:.0%})</td><td>{d.tokens_per_answer:.0f}</td></tr>"
        for d in spread)
    return ('<section><h2>Sampling before evolution</h2>'
            f'<p class="hint">{escape(K_METHOD)}; bands: {confidence:.0%}. Diversity: per problem, the distinct '
            'programs (by normalised code) and distinct test-pass patterns (score vectors) among its answers, '
            'averaged over problems; an answer that gave no program counts in neither.</p>'
            f'<div class="multiples">{"".join(charts)}</div>'
            '<table><thead><tr><th>policy</th><th>problems</th><th>answers a problem</th>'
            '<th>distinct programs</th><th>distinct test-pass patterns</th><th>tokens per answer</th></tr></thead>'
            f"<tbody>{rows}</tbody></table></section>")
