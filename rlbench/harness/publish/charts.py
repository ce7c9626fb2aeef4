"""Line charts with confidence bands as inline SVG: no plotting library, the same numbers
give the same bytes, and the page needs nothing outside itself.

Apart from ``analysis/plots.py`` (matplotlib's figure files for ``rlbench compare``): a
chart here is a few KB of markup written in about a millisecond, inlined in each run's page
with its text escaped as the page's own, where a matplotlib figure is a file of tens of KB;
and the site's modules import no matplotlib.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from rlbench.harness.publish.markup import LARGEST, attr, text

__all__ = ["Band", "Series", "line_chart", "nice_ticks"]

# Okabe-Ito, readable by the colour-blind; names keep their colour on every chart of a page
PALETTE = ("#0072b2", "#e69f00", "#009e73", "#d55e00", "#cc79a7", "#56b4e9", "#f0e442",
           "#000000")


@dataclass(frozen=True)
class Series:
    """A line, with its band (``low``/``high`` at each x) when it has one."""

    name: str
    x: np.ndarray
    y: np.ndarray
    low: np.ndarray | None = None
    high: np.ndarray | None = None


@dataclass(frozen=True)
class Band:
    """A horizontal band across the chart: a published score's range, say."""

    label: str
    low: float
    high: float


def _drawable(values: np.ndarray) -> np.ndarray:
    values = np.asarray(values, dtype=np.float64)
    return np.isfinite(values) & (np.abs(values) <= LARGEST)


def nice_ticks(low: float, high: float, count: int = 5) -> list[float]:
    """About ``count`` round values covering [low, high] (steps of 1, 2, 2.5 or 5 × 10^k);
    none for bounds that are not finite or beyond ``LARGEST``."""
    if not (math.isfinite(low) and math.isfinite(high)) or max(abs(low), abs(high)) > LARGEST:
        return []
    if high <= low:
        high = low + (abs(low) or 1.0)
    raw = (high - low) / max(count - 1, 1)
    power = 10 ** math.floor(math.log10(raw))
    step = next(m * power for m in (1, 2, 2.5, 5, 10) if m * power >= raw)
    first = math.floor(low / step) * step
    ticks, value = [], first
    while value < high + step * 0.5:
        ticks.append(round(value, 12))
        value += step
    return ticks


def _label(value: float) -> str:
    if abs(value) >= 1e4:
        return f"{value / 1e3:,.0f}k" if abs(value) < 1e6 else f"{value / 1e6:,.1f}M"
    return f"{value:,.10g}"


def _point(x: float, y: float) -> str:
    return f"{x:.1f},{y:.1f}"


def line_chart(series: Sequence[Series], *, x_label: str, y_label: str,
               bands: Sequence[Band] = (), colours: dict[str, str] | None = None,
               width: int = 640, height: int = 300, title: str = "") -> str:
    """An ``<svg>`` of the lines over a shared x and y range, with their bands, the
    horizontal ``bands`` behind them and a legend; non-finite points (and those beyond
    ``LARGEST``) are left out."""
    colours = colours or {s.name: PALETTE[i % len(PALETTE)]
                          for i, s in enumerate(sorted(series, key=lambda s: s.name))}
    xs = [v for s in series for v in np.asarray(s.x, dtype=np.float64)[_drawable(s.x)]]
    ys = [v for s in series for arr in (s.y, s.low, s.high) if arr is not None
          for v in np.asarray(arr, dtype=np.float64)[_drawable(arr)]]
    bands = [b for b in bands if _drawable(np.array([b.low, b.high])).all()]
    ys += [v for b in bands for v in (b.low, b.high)]
    left, top = 64, 24 if title else 10
    total_height = height + 16 * (len(series) + len(bands))
    parts = [f'<svg xmlns="http://www.w3.org/2000/svg" role="img" width={attr(width)} '
             f"height={attr(total_height)} viewBox={attr(f'0 0 {width} {total_height}')}>"]
    if title:
        parts.append(f'<text x="{left}" y="15" font-weight="600">{text(title)}</text>')
    if not xs or not ys:
        parts.append(f'<text x="{left}" y="{top + 20}">no finite points to draw</text></svg>')
        return "".join(parts)
    x_ticks, y_ticks = nice_ticks(min(xs), max(xs)), nice_ticks(min(ys), max(ys))
    frame = _Frame(left=left, top=top, plot_w=width - left - 16, plot_h=height - top - 44,
                   x0=min(x_ticks[0], min(xs)), x1=max(x_ticks[-1], max(xs)),
                   y0=min(y_ticks[0], min(ys)), y1=max(y_ticks[-1], max(ys)))
    parts += _axes(frame, x_ticks, y_ticks, x_label, y_label)
    parts += [_horizontal_band(frame, band) for band in bands]
    for s in series:
        parts += _series_marks(frame, s, colours[s.name])
    parts += _legend(left, height + 4, series, colours, bands)
    parts.append("</svg>")
    return "".join(parts)


@dataclass(frozen=True)
class _Frame:
    """The plot area of a chart and its data ranges: where a value is drawn."""

    left: float
    top: float
    plot_w: float
    plot_h: float
    x0: float
    x1: float
    y0: float
    y1: float

    def sx(self, v: float) -> float:
        return self.left + (v - self.x0) / ((self.x1 - self.x0) or 1.0) * self.plot_w

    def sy(self, v: float) -> float:
        return self.top + self.plot_h - (v - self.y0) / ((self.y1 - self.y0) or 1.0) * self.plot_h


def _axes(frame: _Frame, x_ticks: Sequence[float], y_ticks: Sequence[float], x_label: str,
          y_label: str) -> list[str]:
    """The plot's box, its grid lines, tick labels and axis labels."""
    left, top, plot_w, plot_h = frame.left, frame.top, frame.plot_w, frame.plot_h
    base = top + plot_h
    parts = [f'<rect x="{left}" y="{top}" width="{plot_w}" height="{plot_h}" '
             'fill="none" stroke="#c4ccd3"/>']
    for tick in y_ticks:
        parts.append(f'<line x1="{left}" x2="{left + plot_w}" y1="{frame.sy(tick):.1f}" '
                     f'y2="{frame.sy(tick):.1f}" stroke="#eceff2"/>'
                     f'<text x="{left - 6}" y="{frame.sy(tick) + 4:.1f}" text-anchor="end">'
                     f"{text(_label(tick))}</text>")
    for tick in x_ticks:
        parts.append(f'<text x="{frame.sx(tick):.1f}" y="{base + 16}" text-anchor="middle">'
                     f"{text(_label(tick))}</text>")
    parts.append(f'<text x="{left + plot_w / 2:.1f}" y="{base + 34}" text-anchor="middle">'
                 f"{text(x_label)}</text>")
    parts.append(f'<text transform="translate(14 {top + plot_h / 2:.1f}) rotate(-90)" '
                 f'text-anchor="middle">{text(y_label)}</text>')
    return parts


def _horizontal_band(frame: _Frame, band: Band) -> str:
    y_high, y_low = frame.sy(band.high), frame.sy(band.low)
    return (f'<rect x="{frame.left}" y="{y_high:.1f}" width="{frame.plot_w}" '
            f'height="{max(y_low - y_high, 1.0):.1f}" fill="#7a8590" '
            f'fill-opacity="0.18" data-band={attr(band.label)}>'
            f"<title>{text(band.label)}</title></rect>")


def _series_marks(frame: _Frame, s: Series, colour: str) -> list[str]:
    """A series' band (where it has one), its line, and a dot for a lone point."""
    sx, sy = frame.sx, frame.sy
    parts = []
    x = np.asarray(s.x, dtype=np.float64)
    y = np.asarray(s.y, dtype=np.float64)
    if s.low is not None and s.high is not None:
        low, high = np.asarray(s.low, np.float64), np.asarray(s.high, np.float64)
        ok = _drawable(x) & _drawable(low) & _drawable(high)
        if ok.sum() > 1:
            outline = ([_point(sx(a), sy(b)) for a, b in zip(x[ok], high[ok], strict=True)]
                       + [_point(sx(a), sy(b)) for a, b in
                          zip(x[ok][::-1], low[ok][::-1], strict=True)])
            parts.append(f'<polygon points="{" ".join(outline)}" fill="{colour}" '
                         'fill-opacity="0.2" stroke="none"/>')
    ok = _drawable(x) & _drawable(y)
    points = " ".join(_point(sx(a), sy(b)) for a, b in zip(x[ok], y[ok], strict=True))
    parts.append(f'<polyline points="{points}" fill="none" stroke="{colour}" '
                 f'stroke-width="2" data-series={attr(s.name)}/>')
    if ok.sum() == 1:
        parts.append(f'<circle cx="{sx(x[ok][0]):.1f}" cy="{sy(y[ok][0]):.1f}" r="3" '
                     f'fill="{colour}"/>')
    return parts


def _legend(left: float, row_y: float, series: Sequence[Series], colours: dict[str, str],
            bands: Sequence[Band]) -> list[str]:
    """One row per series, then one per horizontal band, under the plot."""
    parts = []
    for s in series:
        parts.append(f'<rect x="{left}" y="{row_y - 9}" width="14" height="10" '
                     f'fill="{colours[s.name]}"/><text x="{left + 20}" y="{row_y}">'
                     f"{text(s.name)}</text>")
        row_y += 16
    for band in bands:
        parts.append(f'<rect x="{left}" y="{row_y - 9}" width="14" height="10" '
                     f'fill="#7a8590" fill-opacity="0.35"/><text x="{left + 20}" '
                     f'y="{row_y}">{text(band.label)}</text>')
        row_y += 16
    return parts
