"""Hand-written SVG charts: scatter/line charts on linear or log axes, lane timelines and labelled bars.

Every mark that means a number carries ``data-tip`` (the page's hover and focus label) and a
``<title>`` (the browser's own tooltip, read by screen readers), so nothing depends on colour: each
series also has its own marker shape and a text legend. Charts scale with their container (a
``viewBox`` and ``width: 100%``), so one drawing serves 1280 px and a phone-width window.
"""

from __future__ import annotations

import math
import zlib
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from html import escape

__all__ = [
    "PALETTE",
    "Guide",
    "Point",
    "Series",
    "bar_rows",
    "lane_timeline",
    "log_ticks",
    "nice_ticks",
    "num",
    "tick_text",
    "xy_chart",
]

# Okabe & Ito's colour-blind-safe palette ("Color Universal Design", jfly.uni-koeln.de/color/, 2008).
PALETTE = ("#0072B2", "#E69F00", "#009E73", "#D55E00", "#CC79A7", "#56B4E9", "#F0E442", "#000000")
MARKERS = ("circle", "square", "triangle", "diamond", "cross")
_W, _H = 640.0, 360.0
_PAD_L, _PAD_R, _PAD_T, _PAD_B = 60.0, 16.0, 28.0, 48.0


@dataclass(frozen=True, slots=True)
class Point:
    """One mark: its data coordinates, its hover label, an optional link and extra attributes."""

    x: float
    y: float
    tip: str
    href: str | None = None
    attrs: Mapping[str, str] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class Series:
    """Points drawn with one colour and one marker shape; ``line`` joins them in x order."""

    name: str
    points: Sequence[Point]
    line: bool = False
    emphasis: bool = False
    markers: bool = True  # False: the line alone (hundreds of samples need no mark each)
    faint: bool = False  # drawn lighter, behind the others (context, not the answer)


@dataclass(frozen=True, slots=True)
class Guide:
    """A reference drawn under the data: a polyline (``band`` False) or a filled polygon, in data
    coordinates, with the text that names it in the legend."""

    label: str
    xy: Sequence[tuple[float, float]]
    band: bool = False


def num(value: float, digits: int = 3) -> str:
    """A number as the page prints it: ``digits`` significant figures, no exponent for everyday sizes."""
    if value == 0 or not math.isfinite(value):
        return f"{value:g}"
    magnitude = abs(value)
    if 1e-3 <= magnitude < 1e7:
        decimals = max(0, digits - 1 - math.floor(math.log10(magnitude)))
        return f"{value:,.{decimals}f}"
    return f"{value:.{digits - 1}e}"


def tick_text(value: float) -> str:
    """A tick label: whole numbers as integers, large ones with K/M/G, small ones to two figures."""
    magnitude = abs(value)
    for scale, suffix in ((1e9, "G"), (1e6, "M"), (1e3, "K")):
        if magnitude >= scale:
            return f"{value / scale:g}{suffix}"
    if value == int(value):
        return str(int(value))
    return f"{value:.2g}"


def nice_ticks(lo: float, hi: float, count: int = 5) -> list[float]:
    """Round tick values covering [lo, hi] (steps of 1, 2 or 5 times a power of ten)."""
    if hi <= lo:
        hi = lo + 1.0
    raw = (hi - lo) / count
    power = 10 ** math.floor(math.log10(raw))
    step = next(m * power for m in (1, 2, 5, 10) if m * power >= raw)
    start = math.floor(lo / step) * step
    ticks = []
    value = start
    while value <= hi + step * 1e-9:
        ticks.append(round(value, 12))
        value += step
    return ticks


def log_ticks(lo: float, hi: float) -> list[float]:
    """Powers of ten within [lo, hi]; with fewer than three, also their 2x and 5x."""
    first, last = math.floor(math.log10(lo)), math.ceil(math.log10(hi))
    decades = [10.0**k for k in range(first, last + 1)]
    ticks = [t for t in decades if lo <= t <= hi]
    if len(ticks) < 3:
        ticks = sorted(t * m for t in decades for m in (1, 2, 5) if lo <= t * m <= hi)
    return ticks or [lo, hi]


@dataclass(frozen=True, slots=True)
class _Scale:
    lo: float
    hi: float
    log: bool
    start: float
    end: float

    def __call__(self, value: float) -> float:
        if self.log:
            a, b, v = math.log10(self.lo), math.log10(self.hi), math.log10(max(value, self.lo))
        else:
            a, b, v = self.lo, self.hi, value
        share = 0.5 if b == a else (v - a) / (b - a)
        return self.start + share * (self.end - self.start)


def _range(values: Sequence[float], log: bool, *, from_zero: bool = True) -> tuple[float, float]:
    """The axis range: the data's, padded (a factor on log axes, 5% on linear ones, which start at 0
    when ``from_zero``)."""
    finite = [v for v in values if math.isfinite(v) and (v > 0 or not log)]
    if not finite:
        return (1.0, 10.0) if log else (0.0, 1.0)
    lo, hi = min(finite), max(finite)
    if log:
        return (lo / 1.3, hi * 1.3) if lo != hi else (lo / 2, hi * 2)
    if from_zero:
        lo = min(lo, 0.0)
    pad = 0.05 * (hi - lo or abs(hi) or 1.0)
    return (lo if from_zero else lo - pad), hi + pad


def _marker(shape: str, x: float, y: float, size: float) -> tuple[str, str]:
    """(SVG element name, geometry attributes) of one marker centred on (x, y)."""
    if shape == "circle":
        return "circle", f'cx="{x:.1f}" cy="{y:.1f}" r="{size:.1f}"'
    if shape == "square":
        return "rect", f'x="{x - size:.1f}" y="{y - size:.1f}" width="{2 * size:.1f}" height="{2 * size:.1f}"'
    corners = {
        "triangle": ((0, -1.2), (1.1, 0.9), (-1.1, 0.9)),
        "diamond": ((0, -1.3), (1.3, 0), (0, 1.3), (-1.3, 0)),
        "cross": ((-1, -0.4), (-0.4, -0.4), (-0.4, -1), (0.4, -1), (0.4, -0.4), (1, -0.4), (1, 0.4),
                  (0.4, 0.4), (0.4, 1), (-0.4, 1), (-0.4, 0.4), (-1, 0.4)),
    }[shape]  # fmt: skip
    points = " ".join(f"{x + dx * size:.1f},{y + dy * size:.1f}" for dx, dy in corners)
    return "polygon", f'points="{points}"'


def _mark(point: Point, shape: str, colour: str, x: float, y: float, size: float) -> str:
    tag, geometry = _marker(shape, x, y, size)
    extra = "".join(f' {escape(k)}="{escape(v)}"' for k, v in point.attrs.items())
    tip = escape(point.tip)
    element = (
        f'<{tag} class="mark" {geometry} fill="{colour}" stroke="#222" stroke-width="0.6" '
        f'tabindex="0" data-tip="{tip}"{extra}><title>{tip}</title></{tag}>'
    )
    if point.href:
        return f'<a href="{escape(point.href)}" target="_blank" rel="noopener">{element}</a>'
    return element


def _axes(sx: _Scale, sy: _Scale, x_label: str, y_label: str, x_ticks: Sequence[float]) -> list[str]:
    y_ticks = log_ticks(sy.lo, sy.hi) if sy.log else nice_ticks(sy.lo, sy.hi)
    parts = [
        f'<line x1="{_PAD_L}" y1="{_H - _PAD_B}" x2="{_W - _PAD_R}" y2="{_H - _PAD_B}" stroke="#444"/>',
        f'<line x1="{_PAD_L}" y1="{_PAD_T}" x2="{_PAD_L}" y2="{_H - _PAD_B}" stroke="#444"/>',
    ]
    for t in x_ticks:
        if sx.lo <= t <= sx.hi:
            x = sx(t)
            parts.append(f'<line x1="{x:.1f}" y1="{_PAD_T}" x2="{x:.1f}" y2="{_H - _PAD_B}" class="grid"/>')
            parts.append(
                f'<text x="{x:.1f}" y="{_H - _PAD_B + 16}" text-anchor="middle">{tick_text(t)}</text>'
            )
    for t in y_ticks:
        if sy.lo <= t <= sy.hi:
            y = sy(t)
            parts.append(f'<line x1="{_PAD_L}" y1="{y:.1f}" x2="{_W - _PAD_R}" y2="{y:.1f}" class="grid"/>')
            parts.append(f'<text x="{_PAD_L - 6}" y="{y + 4:.1f}" text-anchor="end">{tick_text(t)}</text>')
    parts.append(
        f'<text x="{(_PAD_L + _W - _PAD_R) / 2:.0f}" y="{_H - 10}" text-anchor="middle" '
        f'class="axis-label">{escape(x_label)}</text>'
    )
    parts.append(
        f'<text transform="translate(12 {(_PAD_T + _H - _PAD_B) / 2:.0f}) rotate(-90)" text-anchor="middle" '
        f'class="axis-label">{escape(y_label)}</text>'
    )
    return parts


def _legend(series: Sequence[Series], guides: Sequence[Guide]) -> str:
    items = []
    for i, s in enumerate(series):
        tag, geometry = _marker(MARKERS[i % len(MARKERS)], 7, 7, 5)
        swatch = f'<svg width="14" height="14" aria-hidden="true"><{tag} {geometry} fill="{PALETTE[i % len(PALETTE)]}"/></svg>'
        count = f" ({len(s.points)})" if s.markers else ""
        items.append(f"<li>{swatch} {escape(s.name)}{count}</li>")
    for g in guides:
        style = "guide-band" if g.band else "guide-line"
        items.append(f'<li><span class="{style}" aria-hidden="true"></span> {escape(g.label)}</li>')
    return f'<ul class="legend">{"".join(items)}</ul>'


def xy_chart(
    title: str,
    x_label: str,
    y_label: str,
    series: Sequence[Series],
    *,
    x_log: bool = False,
    y_log: bool = False,
    guides: Sequence[Guide] = (),
    x_ticks: Sequence[float] | None = None,
    chart_class: str = "",
) -> str:
    """A figure with one SVG scatter/line chart, its caption and a text legend (counts of points)."""
    xs = [p.x for s in series for p in s.points] + [x for g in guides for x, _ in g.xy if not g.band]
    ys = [p.y for s in series for p in s.points] + [y for g in guides for _, y in g.xy if not g.band]
    sx = _Scale(*_range(xs, x_log, from_zero=False), x_log, _PAD_L, _W - _PAD_R)
    sy = _Scale(*_range(ys, y_log), y_log, _H - _PAD_B, _PAD_T)
    ticks = (
        x_ticks if x_ticks is not None else (log_ticks(sx.lo, sx.hi) if x_log else nice_ticks(sx.lo, sx.hi))
    )
    parts = _axes(sx, sy, x_label, y_label, ticks)
    clip = f"clip-{zlib.crc32(title.encode()):08x}"  # same geometry in every chart: a clash is harmless
    parts.append(
        f'<clipPath id="{clip}"><rect x="{_PAD_L}" y="{_PAD_T}" width="{_W - _PAD_L - _PAD_R}" '
        f'height="{_H - _PAD_T - _PAD_B}"/></clipPath>'
    )
    for g in guides:
        coords = " ".join(f"{sx(x):.1f},{sy(y):.1f}" for x, y in g.xy)
        tag = "polygon" if g.band else "polyline"
        parts.append(
            f'<{tag} points="{coords}" class="{"band" if g.band else "guide"}" clip-path="url(#{clip})"/>'
        )
    order = sorted(range(len(series)), key=lambda i: not series[i].faint)  # faint ones underneath
    for i in order:
        s = series[i]
        colour, shape = PALETTE[i % len(PALETTE)], MARKERS[i % len(MARKERS)]
        parts.append('<g opacity="0.45">' if s.faint else "<g>")
        if s.line and len(s.points) > 1:
            coords = " ".join(f"{sx(p.x):.1f},{sy(p.y):.1f}" for p in sorted(s.points, key=lambda p: p.x))
            width = 2.2 if s.emphasis else 1.2
            parts.append(
                f'<polyline points="{coords}" fill="none" stroke="{colour}" stroke-width="{width}"/>'
            )
        size = 5.5 if s.emphasis else 4.0
        if s.markers:
            parts += [_mark(p, shape, colour, sx(p.x), sy(p.y), 3.0 if s.faint else size) for p in s.points]
        parts.append("</g>")
    svg = (
        f'<svg class="chart {chart_class}" viewBox="0 0 {_W:.0f} {_H:.0f}" role="img" '
        f'aria-label="{escape(title)}">{"".join(parts)}</svg>'
    )
    return f"<figure><figcaption>{escape(title)}</figcaption>{svg}{_legend(series, guides)}</figure>"


def lane_timeline(
    title: str, lanes: Sequence[str], spans: Sequence[tuple[str, str, str, float, float]], end_s: float
) -> str:
    """One row per lane (a stream), a bar per (lane, name, kind, start_s, end_s), coloured and
    legended by kind, hover naming the operation and its times."""
    kinds = list(dict.fromkeys(kind for _, _, kind, _, _ in spans))
    lane_h, top, left, right = 22.0, 8.0, 110.0, 12.0
    height = top + lane_h * len(lanes) + 30
    sx = _Scale(0.0, max(end_s, 1e-12), False, left, _W - right)
    row = {lane: i for i, lane in enumerate(lanes)}
    parts = []
    for i, lane in enumerate(lanes):
        y = top + i * lane_h
        parts.append(f'<text x="{left - 6}" y="{y + 15:.1f}" text-anchor="end">{escape(lane)}</text>')
        parts.append(
            f'<line x1="{left}" y1="{y + lane_h:.1f}" x2="{_W - right}" y2="{y + lane_h:.1f}" class="grid"/>'
        )
    for lane, name, kind, start, end in spans:
        y = top + row[lane] * lane_h + 3
        colour = PALETTE[kinds.index(kind) % len(PALETTE)]
        tip = escape(f"{lane}: {name} ({kind}) {start * 1e3:.3f}-{end * 1e3:.3f} ms")
        width = max(sx(end) - sx(start), 0.6)
        parts.append(
            f'<rect class="mark" x="{sx(start):.2f}" y="{y:.1f}" width="{width:.2f}" height="{lane_h - 6}" '
            f'fill="{colour}" data-tip="{tip}"/>'  # no <title>: hundreds of bars, the page stays small
        )
    axis_y = top + lane_h * len(lanes)
    for t in nice_ticks(0.0, end_s * 1e3):
        if t <= end_s * 1e3:
            x = sx(t / 1e3)
            parts.append(
                f'<text x="{x:.1f}" y="{axis_y + 14:.1f}" text-anchor="middle">{tick_text(t)}</text>'
            )
    parts.append(
        f'<text x="{_W - right}" y="{axis_y + 27:.1f}" text-anchor="end" class="axis-label">time in the step (ms)</text>'
    )
    legend = "".join(
        f'<li><span class="swatch" style="background:{PALETTE[i % len(PALETTE)]}"></span> {escape(k)}</li>'
        for i, k in enumerate(kinds)
    )
    svg = (
        f'<svg class="chart timeline" viewBox="0 0 {_W:.0f} {height:.0f}" role="img" '
        f'aria-label="{escape(title)}">{"".join(parts)}</svg>'
    )
    return f'<figure><figcaption>{escape(title)}</figcaption>{svg}<ul class="legend">{legend}</ul></figure>'


def bar_rows(title: str, rows: Sequence[tuple[str, float, str]], *, limit: float | None = None) -> str:
    """Horizontal bars, one per (label, value, value text), the value written beside each bar;
    ``limit`` (e.g. a device's capacity) is drawn as a dashed line and sets the scale when larger."""
    top, bar_h, left, right = 6.0, 20.0, 150.0, 90.0
    height = top + bar_h * len(rows) + 8
    high = max([v for _, v, _ in rows] + ([limit] if limit else []) + [1e-12])
    sx = _Scale(0.0, high, False, left, _W - right)
    parts = []
    for i, (label, value, text) in enumerate(rows):
        y = top + i * bar_h
        tip = escape(f"{label}: {text}")
        parts.append(f'<text x="{left - 6}" y="{y + 14:.1f}" text-anchor="end">{escape(label)}</text>')
        parts.append(
            f'<rect class="mark" x="{left}" y="{y + 2:.1f}" width="{max(sx(value) - left, 0.5):.1f}" '
            f'height="{bar_h - 5}" fill="{PALETTE[i % len(PALETTE)]}" data-tip="{tip}"><title>{tip}</title></rect>'
        )
        parts.append(f'<text x="{sx(value) + 4:.1f}" y="{y + 14:.1f}">{escape(text)}</text>')
    if limit:
        x = sx(limit)
        parts.append(f'<line x1="{x:.1f}" y1="{top}" x2="{x:.1f}" y2="{height - 4:.1f}" class="limit"/>')
    svg = (
        f'<svg class="chart bars" viewBox="0 0 {_W:.0f} {height:.0f}" role="img" '
        f'aria-label="{escape(title)}">{"".join(parts)}</svg>'
    )
    return f"<figure><figcaption>{escape(title)}</figcaption>{svg}</figure>"
