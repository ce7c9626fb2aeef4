"""The plots of ``rlbench compare``: learning curves, aggregate intervals, performance profiles.

Each plot is written twice, ``stem.png`` and ``stem.svg``, through matplotlib's object-oriented
API only (``Figure`` and ``Figure.savefig``): no ``pyplot``, so no global figure registry and
no GUI backend, and it runs headless. Output is reproducible: every bootstrap draw comes from
a generator seeded by the caller, the SVG keeps text as text (``svg.fonttype: none``), its ids
come from a fixed salt and neither file carries a date or software stamp, so the same inputs
give byte-identical SVG files. An algorithm has the same colour in every figure (colours go
to the sorted algorithm names). The bands' numbers come from ``statistics.py``.

Apart from ``publish/charts.py`` (the site's hand-written inline SVG): these are standalone
figure files, multi-panel, with interval bars and shared legends that matplotlib lays out.
"""

from __future__ import annotations

import io
import math
import re
import textwrap
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

import matplotlib
import numpy as np
from matplotlib.axes import Axes
from matplotlib.figure import Figure
from matplotlib.lines import Line2D
from matplotlib.text import Text

from rlbench.harness.analysis.sensitivity import numeric_value
from rlbench.harness.analysis.statistics import (
    AGGREGATES,
    Interval,
    Scores,
    as_tasks,
    curve_band,
    performance_profile_band,
)
from rlbench.harness.render import inert
from rlbench.owned_files import write_file

__all__ = [
    "PLOT_STAMP",
    "SensitivityCurve",
    "is_plot_file",
    "plot_aggregate_intervals",
    "plot_learning_curves",
    "plot_performance_profiles",
    "plot_sensitivity",
]

_RC = {"svg.fonttype": "none", "svg.hashsalt": "rlbench"}
_BAND_ALPHA = 0.2
_TITLE_WIDTH = 40  # characters of a subplot's title per line at its font size
_PNG_MAGIC = b"\x89PNG\r\n\x1a\n"
# An SVG document's start: a byte-order mark, an XML declaration, comments and an SVG
# doctype at most before its root element
_SVG_ROOT = re.compile(rb"(?:\xef\xbb\xbf)?\s*(?:<\?xml[^>]*\?>\s*)?(?:<!--.*?-->\s*)*"
                       rb"(?:<!DOCTYPE\s+svg[^>]*>\s*)?<svg[\s>/]", re.DOTALL)
# What marks a plot as rlbench's: a PNG's Software text chunk (written before its image
# data, within the first bytes), an SVG's Dublin Core creator
PLOT_STAMP = "rlbench compare"
_PNG_STAMP = b"tEXtSoftware\x00" + PLOT_STAMP.encode()
_PNG_STAMP_WITHIN = 256
_SVG_STAMP = re.compile(rb"<dc:creator>\s*<cc:Agent>\s*<dc:title>"
                        + re.escape(PLOT_STAMP.encode()) + rb"</dc:title>")


def plot_learning_curves(
    curves: Mapping[str, Mapping[str, tuple[np.ndarray, np.ndarray]]],
    stem: Path,
    *,
    seed: int = 0,
    reps: int = 2000,
    title: str | None = None,
    subtitles: Mapping[str, str] | None = None,
    axis_labels: Mapping[str, tuple[str, str]] | None = None,
    caption: str | None = None,
) -> list[Path]:
    """Evaluations against the budget: a subplot per env, a mean line and 95% CI band per
    algorithm.

    ``curves[env][algo] = (frames [T], returns [seeds, T])``; ``subtitles[env]`` goes under
    a subplot's title, ``axis_labels[env]`` names its axes (x, y: by default "frames" and
    "eval return"; an offline panel draws normalized scores over gradient steps),
    ``caption`` under the figure (what the bands are). A title wraps at spaces, never cut
    short. Bands are drawn from one generator seeded with ``seed``, envs and algorithms
    taken in sorted order. Writes ``stem.png`` and ``stem.svg`` and returns their paths.
    """
    if not curves:
        raise ValueError("no learning curves to plot: no envs given")
    checked: dict[str, dict[str, tuple[np.ndarray, np.ndarray]]] = {}
    for env in sorted(curves):
        if not curves[env]:
            raise ValueError(f"no learning curves to plot for env {env!r}: no algorithms given")
        checked[env] = {}
        for algo in sorted(curves[env]):
            frames, returns = curves[env][algo]
            frames = np.asarray(frames, dtype=np.float64)
            returns = np.atleast_2d(np.asarray(returns, dtype=np.float64))
            if frames.ndim != 1 or returns.ndim != 2 or frames.shape[0] != returns.shape[1]:
                raise ValueError(
                    f"env {env!r}, algorithm {algo!r}: frames of shape {frames.shape} do not "
                    f"match returns of shape {returns.shape} (want [T] and [seeds, T])"
                )
            checked[env][algo] = frames, returns

    colours = _colours(algo for per_env in checked.values() for algo in per_env)
    rng = np.random.default_rng(seed)
    ncols = min(3, len(checked))
    nrows = math.ceil(len(checked) / ncols)
    fig = Figure(figsize=(4.5 * ncols, 3.2 * nrows + 0.6), layout="constrained")
    axes = fig.subplots(nrows, ncols, squeeze=False).ravel()
    for ax, (env, per_algo) in zip(axes, checked.items(), strict=False):
        for algo, (frames, returns) in per_algo.items():
            mean, low, high = curve_band(returns, rng=rng, reps=reps)
            ax.plot(frames, mean, color=colours[algo], label=algo)
            ax.fill_between(frames, low, high, color=colours[algo], alpha=_BAND_ALPHA, lw=0)
        subtitle = (subtitles or {}).get(env)
        heading = textwrap.fill(env, _TITLE_WIDTH, break_on_hyphens=False,
                                break_long_words=False)
        ax.set_title(f"{heading}\n{subtitle}" if subtitle else heading, fontsize=9)
        x_label, y_label = (axis_labels or {}).get(env, ("frames", "eval return"))
        ax.set_xlabel(x_label)
        ax.set_ylabel(y_label)
        ax.grid(alpha=0.3)
    for ax in axes[len(checked):]:
        ax.set_visible(False)
    _shared_legend(fig, colours, caption)
    if title:
        fig.suptitle(title)
    return _save(fig, stem)


def _caption(fig: Figure, caption: str | None) -> None:
    """``caption`` in small type at the foot of ``fig``, wrapped to its width."""
    if caption:
        width = int(fig.get_figwidth() * 16)
        fig.supxlabel(textwrap.fill(caption, width), fontsize=7, ha="center")


def plot_aggregate_intervals(
    intervals: Mapping[str, Mapping[str, Interval]],
    stem: Path,
    *,
    title: str | None = None,
    caption: str | None = None,
    score_label: str = "normalized score",
) -> list[Path]:
    """Aggregate metrics with their CIs, rliable style: a panel per metric, a bar per algorithm.

    ``intervals[algo][metric]`` is an ``Interval``; each bar spans ``low`` to ``high`` with a
    tick at ``value`` (only the tick when it has no bounds), on the axis ``score_label``
    names. Every algorithm must give every metric. Known metrics (``AGGREGATES``) come first
    in that order, others after them sorted. Writes ``stem.png`` and ``stem.svg``.
    """
    if not intervals:
        raise ValueError("no aggregate intervals to plot: no algorithms given")
    algos = sorted(intervals)
    names = {metric for algo in algos for metric in intervals[algo]}
    if not names:
        raise ValueError("no aggregate intervals to plot: no metrics given")
    for algo in algos:
        missing = names - set(intervals[algo])
        if missing:
            raise ValueError(f"algorithm {algo!r} lacks the metrics {sorted(missing)}")
    metrics = [m for m in AGGREGATES if m in names] + sorted(names - set(AGGREGATES))

    colours = _colours(algos)
    fig = Figure(
        figsize=(3.2 * len(metrics), 0.5 * len(algos) + 1.6 + (0.4 if title else 0)),
        layout="constrained",
    )
    axes = fig.subplots(1, len(metrics), sharey=True, squeeze=False)[0]
    rows = np.arange(len(algos))[::-1]  # the first algorithm on top
    for ax, metric in zip(axes, metrics, strict=True):
        for row, algo in zip(rows, algos, strict=True):
            interval = intervals[algo][metric]
            if interval.has_bounds:
                ax.barh(row, interval.high - interval.low, left=interval.low, height=0.6,
                        color=colours[algo], alpha=0.75)
            ax.vlines(interval.value, row - 0.3, row + 0.3, color="black", lw=2)
        ax.set_title(f"{metric}\n(lower is better)" if metric == "optimality_gap" else metric)
        ax.set_xlabel(textwrap.fill(score_label, 30, break_on_hyphens=False))
        ax.grid(axis="x", alpha=0.3)
        ax.use_sticky_edges = False  # leave a margin beside the bars' ends
    axes[0].set_yticks(rows, algos)
    _caption(fig, caption)
    if title:
        fig.suptitle(title)
    return _save(fig, stem)


def plot_performance_profiles(
    scores: Mapping[str, Scores],
    stem: Path,
    *,
    thresholds: np.ndarray | None = None,
    seed: int = 0,
    reps: int = 2000,
    title: str | None = None,
    caption: str | None = None,
    score_label: str = "normalized score",
) -> list[Path]:
    """Fraction of runs scoring above tau, against tau, per algorithm with a 95% CI band.

    ``scores[algo]`` is ``[runs, tasks]`` of normalized scores, or one array per task. The
    default thresholds are 101 points from ``min(0, lowest score)`` to ``max(1, highest
    score)`` over all algorithms. Bands come from one generator seeded with ``seed``,
    algorithms in sorted order; ``score_label`` names what tau is. Writes ``stem.png`` and
    ``stem.svg`` and returns their paths.
    """
    if not scores:
        raise ValueError("no performance profiles to plot: no algorithms given")
    matrices = {algo: as_tasks(scores[algo], f"algorithm {algo!r}") for algo in sorted(scores)}
    if thresholds is None:
        lowest = min(0.0, *(float(np.concatenate(m).min()) for m in matrices.values()))
        highest = max(1.0, *(float(np.concatenate(m).max()) for m in matrices.values()))
        thresholds = np.linspace(lowest, highest, 101)
    taus = np.asarray(thresholds, dtype=np.float64)

    colours = _colours(matrices)
    rng = np.random.default_rng(seed)
    fig = Figure(figsize=(6.0, 4.2), layout="constrained")
    ax: Axes = fig.subplots()
    for algo, matrix in matrices.items():
        profile, low, high = performance_profile_band(matrix, taus, rng=rng, reps=reps)
        ax.plot(taus, profile, color=colours[algo], label=algo)
        ax.fill_between(taus, low, high, color=colours[algo], alpha=_BAND_ALPHA, lw=0)
    ax.set_xlabel(f"τ: {score_label}")
    ax.set_ylabel("fraction of runs with score > τ")
    ax.set_ylim(-0.02, 1.02)
    ax.grid(alpha=0.3)
    ax.legend()
    _caption(fig, caption)
    if title:
        fig.suptitle(title)
    return _save(fig, stem)


@dataclass(frozen=True)
class SensitivityCurve:
    """One curve of a settings study: the values of the setting (text as stored), the IQM
    at each, and the mean with its 95% interval (NaN bounds: none, fewer than 2 seeds)."""

    values: Sequence[str]
    iqm: Sequence[float]
    mean: Sequence[float]
    low: Sequence[float]
    high: Sequence[float]


def plot_sensitivity(
    panels: Mapping[str, Mapping[str, SensitivityCurve]],
    stem: Path,
    *,
    setting: str,
    title: str | None = None,
    caption: str | None = None,
    y_labels: Mapping[str, str] | None = None,
) -> list[Path]:
    """Final scores against one setting's values: a subplot per panel (an env at a
    budget), a curve per combination of the other settings (``panels[panel][curve]``; an
    empty curve name for a one-setting grid). The mean is drawn with its interval as error
    bars and the IQM as an open marker. Numbers go on a log axis when they are all
    positive and span a factor of 10 or more, else a linear one; other values (lists,
    names) are placed in order, one tick each. Writes ``stem.png`` and ``stem.svg``."""
    if not panels or not all(panels.values()):
        raise ValueError("no sensitivity curves to plot")
    values = [v for curves in panels.values() for c in curves.values() for v in c.values]
    numbers = [numeric_value(v) for v in values]
    numeric = all(n is not None for n in numbers)
    categories = list(dict.fromkeys(values))
    log = numeric and min(numbers) > 0 and max(numbers) >= 10 * min(numbers)
    names = sorted({name for curves in panels.values() for name in curves})
    colours = {name: f"C{i % 10}" for i, name in enumerate(names)}
    ncols = min(3, len(panels))
    nrows = math.ceil(len(panels) / ncols)
    fig = Figure(figsize=(4.5 * ncols, 3.2 * nrows + 0.8), layout="constrained")
    axes = fig.subplots(nrows, ncols, squeeze=False).ravel()
    for ax, (panel, curves) in zip(axes, sorted(panels.items()), strict=False):
        for name, curve in sorted(curves.items()):
            x = np.array([numeric_value(v) if numeric else categories.index(v)
                          for v in curve.values], dtype=np.float64)
            mean = np.asarray(curve.mean, dtype=np.float64)
            low, high = (np.asarray(b, dtype=np.float64) for b in (curve.low, curve.high))
            bars = np.where(np.isfinite(low), [mean - low, high - mean], 0.0)
            ax.errorbar(x, mean, yerr=bars, color=colours[name], marker="o", ms=4,
                        capsize=3, label=name or setting)
            ax.plot(x, curve.iqm, ls="none", marker="D", mfc="none", ms=6,
                    color=colours[name])
        if log:
            ax.set_xscale("log")
        if not numeric:
            ax.set_xticks(range(len(categories)), categories, rotation=30, fontsize=7)
        ax.set_title(textwrap.fill(panel, _TITLE_WIDTH, break_on_hyphens=False,
                                   break_long_words=False), fontsize=9)
        ax.set_xlabel(setting)
        ax.set_ylabel((y_labels or {}).get(panel, "final eval return"))
        ax.grid(alpha=0.3)
    for ax in axes[len(panels):]:
        ax.set_visible(False)
    if names != [""]:
        _shared_legend(fig, colours, caption)
    else:
        _caption(fig, caption)
    if title:
        fig.suptitle(title)
    return _save(fig, stem)


def _colours(algos: Iterable[str]) -> dict[str, str]:
    """The same colour for an algorithm in every figure: the colour cycle over sorted names."""
    return {algo: f"C{i % 10}" for i, algo in enumerate(sorted(set(algos)))}


def _shared_legend(fig: Figure, colours: Mapping[str, str], caption: str | None = None) -> None:
    """One legend under the subplots, with ``caption`` (what lines and bands are) above its
    entries."""
    handles = [Line2D([], [], color=c, label=a) for a, c in colours.items()]
    title = textwrap.fill(caption, int(fig.get_figwidth() * 16)) if caption else None
    fig.legend(handles=handles, loc="outside lower center", ncols=min(len(handles), 5),
               title=title, title_fontsize=7)


def _save(fig: Figure, stem: Path) -> list[Path]:
    """Write ``fig`` as ``stem.png`` and ``stem.svg`` with no dates, stamped as rlbench's
    (``PLOT_STAMP``, which ``is_plot_file`` reads); its text (names from a store among it)
    ``inert``: a control character has no glyph and no place in an SVG's XML."""
    for text in fig.findobj(Text):
        text.set_text(inert(text.get_text()))
    stem = Path(stem)
    stem.parent.mkdir(parents=True, exist_ok=True)
    png, svg = stem.with_suffix(".png"), stem.with_suffix(".svg")
    for path, options in ((png, {"dpi": 120, "metadata": {"Software": PLOT_STAMP}}),
                          (svg, {"metadata": {"Date": None, "Creator": PLOT_STAMP}})):
        drawn = io.BytesIO()
        with matplotlib.rc_context(_RC):
            fig.savefig(drawn, format=path.suffix[1:], **options)
        write_file(path, drawn.getvalue(), "plot", ours=is_plot_file)
    return [png, svg]


def is_plot_file(path: Path) -> bool:
    """Whether ``path`` holds a plot rlbench drew, the only file a plot replaces (or a
    report removes as stale): a PNG whose first chunks carry ``PLOT_STAMP`` as its
    software, or an SVG (its root element ``<svg``, after at most an XML declaration,
    comments and an SVG doctype) whose metadata names it as creator. A user's own image of
    the same name, any other XML or HTML, an inline ``<svg`` in it included, is not one."""
    with open(path, "rb") as handle:
        head = handle.read(4096)
    if head.startswith(_PNG_MAGIC):
        return _PNG_STAMP in head[:_PNG_STAMP_WITHIN]
    return _SVG_ROOT.match(head) is not None and _SVG_STAMP.search(head) is not None
