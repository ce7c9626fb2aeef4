"""The ``rlbench compare`` command: read its words (``COMPARE_TABLE``), read the store,
format and write a report.

``output=DIR`` writes every format and the plots (PNG and SVG) there: ``compare.md``,
``.tex``, ``.html`` (tables), ``compare.csv`` (one row per group, plain numbers),
``compare.json`` (everything), ``runs.csv`` (one row per run, its final score),
``curves`` (learning curves) and, per comparison ``k`` (entries that ran the same envs or
datasets at the same budget), ``aggregates-k`` and ``profiles-k``, and per settings study
(configs of one algorithm that differ in a hyperparameter, ``sensitivity.py``)
``sensitivity-<algo>-<setting>``. ``frames=`` picks online
runs by their budget in env frames, ``steps=`` offline runs by theirs in gradient steps; the
CSV and JSON name each group's budget the same way.
"""

from __future__ import annotations

import math
import re
import sys
import types
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
from rich.console import Console
from rich.table import Table as RichTable

from rlbench.envs import validate_env_id
from rlbench.errors import ConfigError, UnknownNameError
from rlbench.harness.analysis.baselines import default_baseline_dir
from rlbench.harness.analysis.cohorts import COHORT_RULE, Cohort
from rlbench.harness.analysis.comparison import (
    MIN_BOOTSTRAP_SEEDS,
    Comparison,
    Group,
    compare,
    load_runs,
    short_numbers,
    stored_algorithms,
)
from rlbench.harness.analysis.comparison_data import frame_csv, groups_frame, runs_frame, to_json
from rlbench.harness.analysis.ranking import RANK_RULE
from rlbench.harness.analysis.sensitivity import SensitivityPoint, SettingStudy, setting_studies
from rlbench.harness.analysis.statistics import AGGREGATES, Interval
from rlbench.harness.plan.algorithms import list_algorithms
from rlbench.harness.plan.command_keys import COMPARE_TABLE, DEFAULT_OUT_DIR, Filters
from rlbench.harness.render import TextTable, inert, render, to_rich
from rlbench.harness.store.results import open_store
from rlbench.harness.store.sqlite import check_out_dir
from rlbench.owned_files import check_target, remove_owned, write_files

__all__ = ["CompareRequest", "build_tables", "is_report_file", "parse_compare_args",
           "run_compare", "terminal_table", "write_report"]
# The plots a report writes: learning curves, and per comparison its aggregates and profiles
_PLOT_FILE = re.compile(
    r"(curves|aggregates(-\d+)?|profiles(-\d+)?|sensitivity-[\w.-]+)\.(png|svg)")
SUFFIXES = {"markdown": ".md", "csv": ".csv", "json": ".json", "latex": ".tex", "html": ".html"}
# How each table and data file ``write_report`` writes begins: an existing file of that
# name that does not is not a report of compare's, and is never replaced
_REPORT_HEADS = {
    "compare.tex": b"\\begin{table}[t]\n\\centering\n\\caption{",
    "compare.html": b'<!DOCTYPE html>\n<html><head><meta charset="utf-8"><title>rlbench '
                    b"compare</title>",
    "compare.csv": b"env,algorithm,label,config,frames,steps,n,",
    "compare.json": b'{\n  "aggregates": [',
    "runs.csv": b"env,algorithm,label,config,frames,steps,seed,",
}

KEYS = COMPARE_TABLE.names
FORMATS = COMPARE_TABLE.key("format").choices


@dataclass
class CompareRequest:
    suite: str = "smoke"
    filters: Filters = field(default_factory=Filters)
    format: str = "table"
    output: Path | None = None
    store: Path = DEFAULT_OUT_DIR
    baselines: Path = field(default_factory=default_baseline_dir)
    seed: int = 0
    reps: int = 2000


def parse_compare_args(args: Sequence[str]) -> CompareRequest:
    """``key=value`` words to a request; unknown keys and names raise with near matches."""
    words = COMPARE_TABLE.parse(args)
    request = CompareRequest(
        suite=words["suite"], filters=Filters.of(words), format=words["format"],
        output=words["output"], store=words["store"],
        baselines=words["baselines"] or default_baseline_dir(), seed=words["seed"],
        reps=words["reps"])
    for env in request.filters.envs:
        validate_env_id(env)
    if request.output is not None:  # before the work: not after the tables are printed
        check_out_dir(request.output, key="output")
    if not (request.baselines / "normalization.csv").is_file():
        raise ConfigError(f"baselines={request.baselines}: no normalization.csv there")
    return request


def _ci(interval: Interval | None, digits: int) -> str:
    if interval is None:
        return "—"
    if not interval.has_bounds:
        return f"{interval.value:,.{digits}f}"
    return (f"{interval.value:,.{digits}f} [{interval.low:,.{digits}f}, "
            f"{interval.high:,.{digits}f}]")


def _seeds_cell(group: Group) -> str:
    extra = [f"{n} {word}" for n, word in ((group.failed, "failed"), (group.killed, "killed"),
                                           (group.running, "running")) if n]
    return f"{len(group.runs)}" + (f" ({', '.join(extra)})" if extra else "")


_EXPANDED = ("intervals: percentile bootstrap CIs (runs resampled within each env) with the "
             "percentiles widened for few seeds per env (expanded percentile bootstrap, "
             "Hesterberg 2015): at 3-10 seeds over 5 envs a plain one, as rliable computes "
             "it, covers 87-91% of the time instead of 95% in simulation, the expanded one "
             "about 95%")


def _words(comparison: Comparison) -> dict[str, str]:
    """The tables' words for what they hold: envs and frames (online), datasets, gradient
    steps and D4RL normalized scores (offline), or both."""
    kinds = {g.runs[0].offline for g in (s.group for s in comparison.summaries)}
    if kinds == {True}:
        return {"task": "dataset", "budget": "gradient steps", "score": "score",
                "tasks": "datasets",
                "what": "final D4RL normalized score per dataset and algorithm"}
    if kinds == {True, False}:
        return {"task": "env or dataset", "budget": "frames or gradient steps",
                "score": "return or score",
                "tasks": "envs or datasets",
                "what": "final return (env) or normalized score (dataset) per algorithm"}
    return {"task": "env", "budget": "frames", "score": "return", "tasks": "envs",
            "what": "final return per env and algorithm"}


_OFFLINE_SCORE = ("offline runs: the D4RL normalized score of each seed's final evaluation, "
                  "100 * (return - min) / (max - min) with the dataset's reference scores "
                  "(the raw return where a dataset has none; the notes say which); published "
                  "rows are CORL's last-checkpoint (judged) and best-checkpoint (shown, not "
                  "judged: another metric) scores")


def build_tables(comparison: Comparison) -> list[TextTable]:
    """The per-group table, then (when there is anything to show) the published baselines,
    and for each comparison (entries that ran the same tasks at the same budget) its
    aggregates with ranks and its probabilities of improvement."""
    suite = comparison.suite
    words = _words(comparison)
    offline = words["task"] != "env"
    rows = [[s.group.env, s.group.label, f"{s.group.budget:,}", _seeds_cell(s.group),
             f"{s.mean:,.1f}" + ("" if s.std is None else f" ± {s.std:,.1f}"),
             _ci(s.mean_ci, 1), _ci(s.iqm, 1),
             "—" if s.group.fps is None else f"{s.group.fps:,.0f}"]
            for s in comparison.summaries]
    rows += [[g.env, g.label, f"{g.budget:,}", _seeds_cell(g), "—", "—", "—", "—"]
             for g in comparison.empty_groups]
    rows.sort(key=lambda r: (r[0], r[1], int(r[2].replace(",", ""))))
    tables = [TextTable(
        title=f"{suite}: {words['what']}",
        headers=[words["task"], "algorithm", words["budget"], "seeds",
                 f"{words['score']} (mean ± std)", "mean [95% t-CI]", "IQM [95% bootstrap CI]",
                 f"{words['budget']}/s"],
        rows=rows,
        notes=[*([_OFFLINE_SCORE] if offline else []),
               "the final deterministic eval return of each seed; std and the t-CI need 2 "
               f"seeds; an IQM CI needs {MIN_BOOTSTRAP_SEEDS} ({comparison.reps} percentile "
               "bootstrap resamples): with fewer, a bootstrap \"95%\" CI covers far less "
               "(75% at 3 seeds in simulation), so read the t-CI",
               *comparison.group_notes])]
    published = [(s, score, judged) for s in comparison.summaries
                 for score, judged in s.baselines]
    if published:
        tables.append(TextTable(
            title=f"{suite}: published baselines beside ours",
            headers=[words["task"], "algorithm", words["budget"], "ours: mean [95% t-CI]",
                     "published by",
                     "published mean (± its std)", "verdict", "differences"],
            rows=[[s.group.env, s.group.label, f"{s.group.budget:,}", _ci(s.mean_ci, 1),
                   score.library, f"{score.mean:,.1f}" + (
                       f" ± {score.std:,.1f}" if score.std is not None else ""),
                   judged.word, "; ".join(judged.caveats) or "none"]
                  for s, score, judged in published],
            notes=["verdict: our 95% t-CI of the mean against the published mean (± 1.96 "
                   "std / sqrt(n) when the source states its seed count n): above, within "
                   "(overlap) or below; none where the env version, the budget or the "
                   "metric differ (unless the baseline file declares that difference "
                   "negligible for its row); read it with the differences beside it",
                   "a published std is what its source reports: over seeds, or over one "
                   "agent's episodes for single runs; sources: results/baselines/SOURCES.md"],
            align="llrrlrll"))
    for number, cohort in enumerate(comparison.cohorts, 1):
        tables += _cohort_tables(suite, number, cohort)
    tables += [_study_table(suite, study, words) for study in setting_studies(
        comparison.summaries)]
    if comparison.aggregate_notes:
        target = next((t for t in tables if ": normalized scores" in t.title), tables[0])
        target.notes += comparison.aggregate_notes
    return tables


def _cohort_tables(suite: str, number: int, cohort: Cohort) -> list[TextTable]:
    """A comparison's aggregates with their ranks and, for two entries or more, its
    probabilities of improvement, titled by its budget and tasks."""
    head = f"{suite}: comparison {number}, {cohort.title}"
    scale = ("D4RL normalized scores: 0 = the dataset's random score, 100 = its expert score"
             if cohort.offline else
             "normalized scores: 0 = random play, 1 = the reference score of "
             "results/baselines/normalization.csv")
    tables = [TextTable(
        title=f"{head}: normalized scores (95% expanded stratified bootstrap CIs)",
        headers=["rank", "algorithm", f"runs × {cohort.task_kind}s",
                 *(n.replace("_", " ") for n in AGGREGATES)],
        rows=[[_rank(cohort.ranks[label]), label, cohort.runs_shown(label),
               *(_ci(cohort.aggregates[label][n], _digits(cohort)) for n in AGGREGATES)]
              for label in cohort.entries],
        notes=[COHORT_RULE, scale, RANK_RULE,
               "median: of the per-task mean scores; optimality gap: the mean shortfall "
               f"below {cohort.scale:g}, lower is better", _EXPANDED],
        align="rlr" + "r" * len(AGGREGATES))]
    if cohort.improvement:
        tables.append(TextTable(
            title=f"{head}: probability of improvement",
            headers=["X", "Y", "P(X > Y) [95% expanded bootstrap CI]", "seeds to detect"],
            rows=[[p.x, p.y, _ci(p.probability, 2), _seeds_needed(p.seeds_needed)]
                  for p in cohort.improvement],
            notes=[f"per {cohort.task_kind}, the chance a run of X beats a run of Y (ties "
                   f"count half), averaged over {cohort.these}, which both ran at this "
                   "budget; the CI resamples each one's runs, its percentiles expanded as "
                   "above",
                   f"seeds to detect: the seeds per algorithm and {cohort.task_kind} a "
                   "two-sided 5% test would need to find a difference of the observed size "
                   f"(the standardized mean difference, averaged over {cohort.these}) 80% "
                   "of the time; with fewer, a real difference of "
                   "this size is often missed, and a chance one of this size is often seen "
                   "(normal approximation; ∞: no difference; —: fewer than 2 seeds)",
                   *(f"{p.x} vs {p.y}: {note}" for p in cohort.improvement
                     for note in p.notes)],
            align="llrr"))
    return tables


def _study_table(suite: str, study: SettingStudy, words: dict[str, str]) -> TextTable:
    """A settings study: each config's final score at its value of the setting, per task
    and budget (and, in a grid over several settings, the others' values)."""
    others = any(point.others for point in study.points)
    return TextTable(
        title=f"{suite}: sensitivity of {study.algo} to {study.setting}",
        headers=[words["task"], words["budget"], *(["other settings"] if others else []),
                 study.setting, "seeds", "IQM [95% bootstrap CI]", "mean [95% t-CI]"],
        rows=[[p.env, f"{p.budget:,}", *([short_numbers(p.others)] if others else []),
               short_numbers(p.value),
               _seeds_cell(p.summary.group), _ci(p.summary.iqm, 1), _ci(p.summary.mean_ci, 1)]
              for p in study.points],
        notes=[f"each row is one config of {study.algo}: the final deterministic eval "
               f"{words['score']} of each of its seeds, as in the first table; the plot "
               f"sensitivity-{study.algo}-{study.setting} draws them against the value",
               f"an IQM CI needs {MIN_BOOTSTRAP_SEEDS} seeds, the t-CI 2: with few seeds "
               "two values whose intervals overlap are not told apart"],
        align="lr" + ("l" if others else "") + "lrrr")


def _rank(rank: int | None) -> str:
    return "—" if rank is None else str(rank)


def _digits(cohort: Cohort) -> int:
    """Decimals of a normalized score: 3 on the 0-1 scale, 1 on D4RL's 0-100."""
    return 1 if cohort.offline else 3


def _seeds_needed(value: float | None) -> str:
    if value is None:
        return "—"
    return "∞" if np.isinf(value) else f"{value:,.0f}"


def terminal_table(table: TextTable) -> RichTable:
    """The table for the terminal; a cell too wide for its column folds onto more lines,
    never cut short (cut, ``rlbench/pendulum/medium-v0`` and ``rlbench/pendulum/medium-
    replay-v0`` would read the same)."""
    out = to_rich(table)
    for column in out.columns:
        column.overflow = "fold"
    return out


def format_comparison(comparison: Comparison, tables: Sequence[TextTable], fmt: str) -> str:
    """The report in ``fmt``: tables for people (markdown, latex, html) or data for
    programs (csv: one row per group, plain numbers; json: everything)."""
    if fmt == "csv":
        return frame_csv(groups_frame(comparison))
    if fmt == "json":
        return to_json(comparison)
    return render(tables, fmt)


def is_report_file(path: Path) -> bool:
    """Whether ``path`` holds the table or data file of its name that ``write_report``
    wrote (how each begins, ``_REPORT_HEADS``; the Markdown: a bold title over a table):
    the only file a report replaces."""
    with open(path, "rb") as handle:
        head = handle.read(4096)
    if path.name == "compare.md":
        lines = head.split(b"\n", 3)
        return (len(lines) == 4 and lines[0].startswith(b"**") and lines[0].endswith(b"**")
                and lines[1] == b"" and lines[2].startswith(b"| "))
    return path.name in _REPORT_HEADS and head.startswith(_REPORT_HEADS[path.name])


def _stale_plots(output: Path) -> list[Path]:
    """The plots of an earlier report in ``output``; a directory that cannot be listed is a
    ``ConfigError``."""
    try:
        names = [entry.name for entry in output.iterdir()] if output.is_dir() else []
    except OSError as err:
        raise ConfigError(f"output={output} cannot be read ({err.strerror or err}); nothing "
                          "written") from err
    return [output / name for name in sorted(names) if _PLOT_FILE.fullmatch(name)]


def write_report(comparison: Comparison, output: Path, *, seed: int = 0,
                 reps: int = 2000) -> list[Path]:
    """Every table format, ``runs.csv`` and the plots under ``output``, each only over a
    file of compare's own (``is_report_file``, ``plots.is_plot_file``). Plots of an
    earlier report there that this one does not make are removed."""
    # deferred: matplotlib loads only when plots are asked for
    from rlbench.harness.analysis import plots

    stale = _stale_plots(output)
    for path in stale:  # refused before anything is written: a link, a file not a plot
        check_target(path, "plot", ours=plots.is_plot_file)
    tables = build_tables(comparison)
    files = {f"compare{SUFFIXES[fmt]}": format_comparison(comparison, tables, fmt)
             for fmt in ("markdown", "latex", "html", "csv", "json")}
    files["runs.csv"] = frame_csv(runs_frame(comparison))
    write_files(output, files, ours=is_report_file)
    for path in stale:
        remove_owned(path)
    written = [output / name for name in files]
    curves: dict[str, dict[str, tuple[np.ndarray, np.ndarray]]] = {}
    seeds: dict[str, list[str]] = {}
    axes: dict[str, tuple[str, str]] = {}
    for summary in comparison.summaries:  # a panel per env and budget: no squeezed axis
        group = summary.group
        panel = f"{group.env}, {group.budget:,} {group.unit}"
        curves.setdefault(panel, {})[group.label] = group.curves()
        seeds.setdefault(panel, []).append(f"{group.label} {len(group.runs)}")
        axes[panel] = (group.unit, _curve_score(group))
    if curves:
        written += plots.plot_learning_curves(
            curves, output / "curves", seed=seed, reps=reps,
            title=f"{comparison.suite}: learning curves",
            subtitles={panel: "seeds: " + ", ".join(n) for panel, n in seeds.items()},
            axis_labels=axes,
            caption="lines: the mean over seeds of each deterministic evaluation; bands: 95% "
                    f"percentile bootstrap CI of that mean ({reps:,} resamples of the seeds; "
                    "none for one seed, and few seeds make it narrow)")
    for study in setting_studies(comparison.summaries):
        written += _plot_study(plots, comparison.suite, study, output)
    for number, cohort in enumerate(comparison.cohorts, 1):
        head = f"{comparison.suite}: comparison {number}, {cohort.title}"
        written += plots.plot_aggregate_intervals(
            cohort.aggregates, output / f"aggregates-{number}",
            title=f"{head}: normalized scores", score_label=cohort.score_label,
            caption=f"bars: 95% expanded stratified bootstrap CIs ({reps:,} resamples), "
                    f"ticks: point estimates; only entries that ran {cohort.these} at this "
                    "budget")
        everything = np.concatenate([v for values in cohort.normalized.values()
                                     for v in values])
        finite = everything[np.isfinite(everything)]
        taus = np.linspace(min(0.0, float(finite.min()) if finite.size else 0.0),
                           max(cohort.scale, float(finite.max()) if finite.size else 0.0), 101)
        written += plots.plot_performance_profiles(
            cohort.normalized, output / f"profiles-{number}", thresholds=taus, seed=seed,
            reps=reps, title=f"{head}: performance profiles", score_label=cohort.score_label,
            caption=f"bands: 95% percentile stratified bootstrap CIs ({reps:,} resamples; "
                    "few seeds make them narrow)")
    return written


def _plot_study(plots: types.ModuleType, suite: str, study: SettingStudy, output: Path
                ) -> list[Path]:
    """A settings study's sensitivity curves: a panel per task and budget."""
    curves: dict[tuple[str, int, str], list[SensitivityPoint]] = {}
    for point in study.points:
        curves.setdefault(point.curve, []).append(point)
    panels: dict[str, dict[str, plots.SensitivityCurve]] = {}
    y_labels = {}
    for (env, budget, others), points in curves.items():
        panel = f"{env}, {budget:,} {points[0].unit}"
        y_labels[panel] = f"final {_curve_score(points[0].summary.group)}"
        intervals = [p.summary.mean_ci for p in points]
        panels.setdefault(panel, {})[others] = plots.SensitivityCurve(
            values=[p.value for p in points], iqm=[p.summary.iqm.value for p in points],
            mean=[p.summary.mean for p in points],
            low=[math.nan if i is None else i.low for i in intervals],
            high=[math.nan if i is None else i.high for i in intervals])
    return plots.plot_sensitivity(
        panels, output / f"sensitivity-{study.algo}-{study.setting}", setting=study.setting,
        title=f"{suite}: sensitivity of {study.algo} to {study.setting}", y_labels=y_labels,
        caption="dots and bars: the mean over seeds of the final evaluation and its 95% "
                "t-CI; open diamonds: the IQM over seeds")


def _curve_score(group: Group) -> str:
    """What a group's curve shows: the eval return, or a D4RL normalized score for a
    dataset with reference scores."""
    if group.offline and group.runs and group.runs[0].refs is not None:
        return "normalized score (D4RL, 0–100)"
    return "eval return"


def run_compare(args: Sequence[str], console: Console) -> int:
    """The command; returns the exit code. Bad input raises ``ConfigError`` (exit 2)."""
    request = parse_compare_args(args)
    client = open_store(request.store)  # read only: a missing or damaged store is refused
    algos = request.filters.algos
    records = load_runs(client, request.suite, **request.filters.selection())
    stored = stored_algorithms(client, request.suite) if algos else set()
    for algo in algos:  # recipes and anything else tracked, e.g. sb3-sac
        if algo in stored:
            continue
        if algo in list_algorithms():
            raise ConfigError(f"suite {request.suite} has no {algo} runs in "
                              f"{client.tracking_uri} (it has runs of "
                              f"{', '.join(sorted(stored)) or 'no algorithm'})")
        raise UnknownNameError(f"algorithm in suite {request.suite}", algo,
                               sorted(stored | set(list_algorithms())))
    if not records:
        raise ConfigError(f"suite {request.suite} has no runs matching "
                          f"{request.filters.words()} in {client.tracking_uri}")
    comparison = compare(records, request.suite, request.baselines, seed=request.seed,
                         reps=request.reps, requested_algos=algos)
    tables = build_tables(comparison)
    if request.format == "table":
        for table in tables:
            console.print(terminal_table(table))
    else:
        print(inert(format_comparison(comparison, tables, request.format)), end="")
    if request.output is not None:
        written = write_report(comparison, request.output, seed=request.seed,
                               reps=request.reps)
        print(f"rlbench: wrote {len(written)} files under {request.output}", file=sys.stderr)
    return 0
