"""Inline SVG line charts in pure Python: a line and a translucent confidence band per series, no scripts.

`line_chart` returns one `<svg>` element (axes, ticks, gridlines, a legend, `<title>` tooltips) to paste into a
self-contained HTML page. Each series is one `<g class="series">` holding exactly one `<polygon class="band">`
and one `<path class="line">`, so a test can count them. `palette` gives every name a colour that stays the
same across all charts of a page.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from html import escape

# Okabe-Ito's colour-blind-safe set (yellow dropped: too faint on white), then Tableau's extras
_COLOURS = ("#0072B2", "#D55E00", "#009E73", "#CC79A7", "#56B4E9", "#E69F00", "#000000",
            "#8C564B", "#7F7F7F", "#BCBD22")
_FONT = 12  # px, tick and legend text
_CHAR_W = 0.6 * _FONT  # estimated width of one character, for layout only
_MAX_MARKERS = 40  # points per series drawn as dots; longer series are a bare line
Point = tuple[float, float, float, float]  # x, mean, low, high
Scale = Callable[[float], float]


@dataclass(frozen=True)
class Series:
    """One line: mean[i] at x[i], with the band low[i]..high[i] around it (None: no band, the line alone)."""

    label: str
    colour: str
    x: Sequence[float]
    mean: Sequence[float]
    low: Sequence[float] | None = None
    high: Sequence[float] | None = None
    note: str = ""  # shown after the label in the legend and tooltips, e.g. "n = 3 seeds"
    steps: bool = False  # a step function: each value holds until the next x (best so far), drawn as steps


def palette(names: Sequence[str]) -> dict[str, str]:
    """A colour per name, by position: the same names in the same order get the same colours everywhere."""
    colours = {}
    for index, name in enumerate(names):
        if index < len(_COLOURS):
            colours[name] = _COLOURS[index]
        else:  # golden-angle hues: distinct enough for the rare chart with more than ten lines
            colours[name] = f"hsl({(index * 137.508) % 360:.0f}, 65%, 42%)"
    return colours


def nice_ticks(low: float, high: float, count: int = 5) -> list[float]:
    """Round tick values covering low..high, about `count` of them (low < high)."""
    if not high > low:
        return [low]
    raw = (high - low) / max(count, 1)
    magnitude = 10 ** math.floor(math.log10(raw))
    step = next(m * magnitude for m in (1, 2, 2.5, 5, 10) if m * magnitude >= raw)
    first = math.floor(low / step + 1e-9) * step
    ticks = []
    value = first
    while value <= high + step * 1e-6:
        if value >= low - step * 1e-6:
            ticks.append(round(value, 12))
        value += step
    return ticks


def format_number(value: float, step: float | None = None) -> str:
    """A tick or tooltip number: as many decimals as the tick step needs, else 4 significant digits."""
    value = value + 0.0  # no "-0"
    if step is not None and step > 0 and abs(value) < 1e6:
        exponent = math.floor(math.log10(step) + 1e-9)
        decimals = max(0, -exponent + (1 if abs(step / 10 ** exponent - 2.5) < 1e-9 else 0))
        text = f"{value:.{decimals}f}"
        return text[1:] if text.startswith("-") and float(text) == 0 else text
    return f"{value:.4g}"


def _finite_points(series: Series) -> list[Point]:
    """(x, mean, low, high) of the points whose values are all numbers; the band defaults to the mean."""
    points = []
    for i, (x, mean) in enumerate(zip(series.x, series.mean, strict=True)):
        low = series.low[i] if series.low is not None else mean
        high = series.high[i] if series.high is not None else mean
        values = (x, mean, low, high)
        if all(v is not None and math.isfinite(v) for v in values):
            points.append((float(x), float(mean), float(min(low, mean)), float(max(high, mean))))
    return points


def _span(values: list[float], fixed: tuple[float, float] | None, integer: bool) -> tuple[float, float]:
    """The axis range: `fixed` widened to fit the data, else the data's range padded so nothing sits on an edge."""
    if not values:
        return fixed if fixed is not None and fixed[1] > fixed[0] else (0.0, 1.0)
    low, high = min(values), max(values)
    if fixed is not None:
        low, high = min(fixed[0], low), max(fixed[1], high)
    if high - low < 1e-12:  # a flat line or a single point: centre it
        pad = 0.5 if integer else 1.0 if low == 0 else abs(low) * 0.1
        return low - pad, high + pad
    pad = 0.0 if integer or fixed is not None else (high - low) * 0.05
    return low - pad, high + pad


def _legend_rows(series: Sequence[Series], width: float) -> list[list[tuple[Series, float]]]:
    """Legend entries packed into rows that fit `width`, each with its x offset."""
    rows: list[list[tuple[Series, float]]] = [[]]
    x = 0.0
    for item in series:
        text = item.label + (f" ({item.note})" if item.note else "")
        entry_w = 26 + len(text) * _CHAR_W + 16
        if rows[-1] and x + entry_w > width:
            rows.append([])
            x = 0.0
        rows[-1].append((item, x))
        x += entry_w
    return rows


def line_chart(series: Sequence[Series], title: str, x_label: str, y_label: str,
               y_range: tuple[float, float] | None = None, width: int = 720, height: int = 340,
               x_range: tuple[float, float] | None = None) -> str:
    """An SVG line chart of `series`, each a line over a band; y_range and x_range fix an axis (widened to fit
    the data), else it spans the data. The legend's rows add to `height`, so many series never squash the plot."""
    points = [_finite_points(s) for s in series]
    xs = [p[0] for ps in points for p in ps]
    ys = [v for ps in points for p in ps for v in p[1:]]
    integer_x = all(float(x).is_integer() for x in [*xs, *(x_range or ())])
    x_low, x_high = _span(xs, x_range, integer_x)
    y_low, y_high = _span(ys, y_range, False)
    y_ticks = nice_ticks(y_low, y_high, 5)
    y_step = y_ticks[1] - y_ticks[0] if len(y_ticks) > 1 else None
    if y_step:  # the axis ends on ticks
        y_low, y_high = math.floor(y_low / y_step + 1e-9) * y_step, math.ceil(y_high / y_step - 1e-9) * y_step
        y_ticks = nice_ticks(y_low, y_high, 5)
        y_step = y_ticks[1] - y_ticks[0] if len(y_ticks) > 1 else None
    x_ticks = nice_ticks(x_low, x_high, max(2, min(10, width // 70)))
    if integer_x:
        x_ticks = [t for t in x_ticks if float(t).is_integer()] or x_ticks
    x_step = x_ticks[1] - x_ticks[0] if len(x_ticks) > 1 else None
    y_texts = [format_number(t, y_step) for t in y_ticks]

    left = 26 + max(len(t) for t in y_texts) * _CHAR_W + 8
    right, top = 18, 34
    legend = _legend_rows(series, width - left - right)
    legend_h = 18 * len(legend) if series else 0
    bottom = 44 + legend_h
    height = max(height, top + 44 + 80) + legend_h  # the legend adds to the height asked for
    plot_w, plot_h = width - left - right, height - top - bottom

    def px(x: float) -> float:
        return left + (x - x_low) / (x_high - x_low) * plot_w

    def py(y: float) -> float:
        return top + (y_high - y) / (y_high - y_low) * plot_h

    out = [f'<svg xmlns="http://www.w3.org/2000/svg" class="line-chart" viewBox="0 0 {width} {height}" '
           f'width="{width}" height="{height}" role="img" font-family="system-ui, sans-serif" '
           f'font-size="{_FONT}">', f"<title>{escape(title)}</title>",
           f'<text class="chart-title" x="{left}" y="20" font-size="14" font-weight="600">{escape(title)}</text>',
           '<g class="grid" stroke="#e3e3e3" stroke-width="1">']
    out += [f'<line x1="{left}" x2="{left + plot_w}" y1="{py(t):.1f}" y2="{py(t):.1f}"/>' for t in y_ticks]
    out += [f'<line x1="{px(t):.1f}" x2="{px(t):.1f}" y1="{top}" y2="{top + plot_h}"/>' for t in x_ticks]
    out += ['</g>', '<g class="axes" fill="#333">',
            f'<line x1="{left}" x2="{left}" y1="{top}" y2="{top + plot_h}" stroke="#555"/>',
            f'<line x1="{left}" x2="{left + plot_w}" y1="{top + plot_h}" y2="{top + plot_h}" stroke="#555"/>']
    out += [f'<text x="{left - 6}" y="{py(t) + 4:.1f}" text-anchor="end">{escape(s)}</text>'
            for t, s in zip(y_ticks, y_texts, strict=True)]
    out += [f'<text x="{px(t):.1f}" y="{top + plot_h + 16}" text-anchor="middle">'
            f'{escape(format_number(t, x_step))}</text>' for t in x_ticks]
    out += [f'<text class="x-label" x="{left + plot_w / 2:.1f}" y="{top + plot_h + 34}" '
            f'text-anchor="middle">{escape(x_label)}</text>',
            f'<text class="y-label" transform="translate(14 {top + plot_h / 2:.1f}) rotate(-90)" '
            f'text-anchor="middle">{escape(y_label)}</text>', '</g>']
    if not xs:
        out.append(f'<text class="no-data" x="{left + plot_w / 2:.1f}" y="{top + plot_h / 2:.1f}" '
                   f'text-anchor="middle" fill="#888">no data</text>')
    for index, (item, pts) in enumerate(zip(series, points, strict=True)):
        # earlier series are drawn wider, so a later line lying on top of one leaves its edges showing
        step = min(1.2, 2.4 / max(len(series) - 1, 1))
        out.append(_series_svg(item, pts, px, py, 2.0 + step * (len(series) - 1 - index)))
    out.append(_hover_columns(series, points, px, top, plot_h, x_label, x_step))
    out.append('<g class="legend">')
    for row_index, row in enumerate(legend):
        y = top + plot_h + 52 + 18 * row_index
        for item, offset in row:
            text = item.label + (f" ({item.note})" if item.note else "")
            x = left + offset
            out.append(f'<g class="legend-item"><title>{escape(text)}</title>'
                       f'<rect x="{x:.1f}" y="{y - 9}" width="20" height="10" fill="{item.colour}" '
                       f'fill-opacity="0.25" stroke="{item.colour}" stroke-width="2"/>'
                       f'<text x="{x + 26:.1f}" y="{y}" fill="#222">{escape(text)}</text></g>')
    out += ['</g>', '</svg>']
    return "\n".join(out)


def _series_svg(item: Series, pts: list[Point], px: Scale, py: Scale, stroke: float = 2.2) -> str:
    """One series: its band polygon (upper edge left to right, lower edge back) and its line with dots."""
    name = escape(item.label + (f" ({item.note})" if item.note else ""))
    colour = escape(item.colour)
    if len(pts) == 1:  # a lone point: a narrow bar for the band, a dot for the line
        x, mean, low, high = pts[0]
        cx = px(x)
        band = f"{cx - 5:.1f},{py(high):.1f} {cx + 5:.1f},{py(high):.1f} {cx + 5:.1f},{py(low):.1f} " \
               f"{cx - 5:.1f},{py(low):.1f}"
        line = f"M{cx - 0.01:.2f},{py(mean):.1f} L{cx + 0.01:.2f},{py(mean):.1f}"
    else:
        upper = [f"{px(x):.1f},{py(y):.1f}" for x, y in _path([(p[0], p[3]) for p in pts], item.steps)]
        lower = [f"{px(x):.1f},{py(y):.1f}" for x, y in reversed(_path([(p[0], p[2]) for p in pts], item.steps))]
        band = " ".join(upper + lower)
        line = "M" + " L".join(f"{px(x):.1f},{py(y):.1f}" for x, y in _path([(p[0], p[1]) for p in pts], item.steps))
    parts = [f'<g class="series" data-series="{escape(item.label)}">',
             f'<polygon class="band" points="{band}" fill="{colour}" fill-opacity="0.16" stroke="none">'
             f'<title>{name}: band</title></polygon>',
             f'<path class="line" d="{line}" fill="none" stroke="{colour}" stroke-width="{stroke:.1f}" '
             f'stroke-linejoin="round" stroke-linecap="round"><title>{name}</title></path>']
    if len(pts) <= _MAX_MARKERS:
        parts += [f'<circle class="point" cx="{px(x):.1f}" cy="{py(mean):.1f}" r="{stroke / 2 + 1.6:.1f}" '
                  f'fill="{colour}"/>'
                  for x, mean, _, _ in pts]
    parts.append("</g>")
    return "".join(parts)


def _path(points: list[tuple[float, float]], steps: bool) -> list[tuple[float, float]]:
    """The vertices through `points`: straight segments, or for a step function a level run to each next x, then
    the jump there."""
    if not steps:
        return points
    out = points[:1]
    for (_, previous), (x, y) in zip(points, points[1:], strict=False):
        out += [(x, previous), (x, y)]
    return out


def _hover_columns(series: Sequence[Series], points: list[list[Point]], px: Scale, top: float, plot_h: float,
                   x_label: str, x_step: float | None) -> str:
    """Invisible columns, one per x value, whose tooltip lists every series' mean and band there."""
    by_x: dict[float, list[str]] = {}
    for item, pts in zip(series, points, strict=True):
        for x, mean, low, high in pts:
            band = "" if low == high == mean else f" [{format_number(low)}, {format_number(high)}]"
            by_x.setdefault(x, []).append(f"{item.label}: {format_number(mean)}{band}")
    xs = sorted(by_x)
    out = ['<g class="hover" fill="transparent">']
    for i, x in enumerate(xs):
        left = (px(xs[i - 1]) + px(x)) / 2 if i else px(x) - 8
        right = (px(xs[i + 1]) + px(x)) / 2 if i + 1 < len(xs) else px(x) + 8
        label = f"{x_label} {format_number(x, x_step)}"
        tip = escape("\n".join([label, *by_x[x]]))
        out.append(f'<rect x="{left:.1f}" y="{top}" width="{max(right - left, 1):.1f}" height="{plot_h:.1f}">'
                   f'<title>{tip}</title></rect>')
    out.append("</g>")
    return "".join(out)
