"""The site's pages, as files (relative path -> text): index, suites, envs or datasets, runs.

Every table is written three times: in its page, and beside it as ``<name>.csv`` and
``<name>.json`` (the values the cells sort by: plain numbers). Offline budgets are gradient
steps, online ones env frames, and every header and note says which. A suite's aggregates,
ranks, probabilities of improvement and profiles are per comparison: the entries that ran
the same envs or datasets at the same budget (``analysis/cohorts.py``).

The site is self-contained: every ``href`` and ``src`` is a relative path to one of its
own files, so it can be copied anywhere and opened from disk. Stores are named as
``stores.py`` names them, artifacts as ``run_page.py`` shows them: as text.
"""

from __future__ import annotations

import hashlib
import math
import re
from collections.abc import Iterator, Mapping, Sequence
from typing import Any

import numpy as np
import pandas as pd

from rlbench.harness.analysis.cohorts import COHORT_RULE, Cohort
from rlbench.harness.analysis.comparison import (
    MIN_BOOTSTRAP_SEEDS,
    Comparison,
    Group,
    GroupSummary,
    RunRecord,
)
from rlbench.harness.analysis.ranking import RANK_RULE
from rlbench.harness.analysis.statistics import (
    AGGREGATES,
    Interval,
    curve_band,
    labelled_rng,
    performance_profile_band,
)
from rlbench.harness.publish.assets import ASSETS
from rlbench.harness.publish.charts import Band, Series, line_chart
from rlbench.harness.publish.collect import SuiteData
from rlbench.harness.publish.data_files import DataWriter, slug
from rlbench.harness.publish.markup import Cell, Table, attr, facts, fmt, link, page, text
from rlbench.harness.publish.run_page import portable_tags, run_page
from rlbench.harness.store.identity_tags import IDENTITY_TAGS
from rlbench.harness.store.results import budget_unit

__all__ = ["site_files"]

# Tags shown as filterable row tags: what tells runs of one group apart, not per-run ids.
# a run's host is not among them: a machine's id means nothing where the site is read
_FILTER_TAGS = ("git_commit", "rlbench_version", "torch_version", "device", "library")
_NOT_TAGS = ("tag.run_dir", "tag.dataset_sha256", "tag.reused_for",
             *(f"tag.{name}" for name in IDENTITY_TAGS))
_WHITESPACE = re.compile(r"\s+")


def _ci_text(interval: Interval | None, digits: int = 1) -> str:
    if interval is None or math.isnan(interval.value):
        return "—"
    if not interval.has_bounds:
        return fmt(interval.value, digits)
    return (f"{fmt(interval.value, digits)} [{fmt(interval.low, digits)}, "
            f"{fmt(interval.high, digits)}]")


def _notes(notes: Sequence[str]) -> str:
    if not notes:
        return ""
    return '<ul class="notes">' + "".join(f"<li>{text(n)}</li>" for n in notes) + "</ul>"


def _kind(data: SuiteData) -> str:
    kinds = {r.offline for r in data.records}
    return {frozenset({True}): "offline", frozenset({True, False}): "online and offline"
            }.get(frozenset(kinds), "online")


def _kind_words(data: SuiteData) -> dict[str, str]:
    """What a suite's pages call its tasks: envs (online), datasets (offline) or both."""
    kinds = {r.offline for r in data.records}
    if kinds == {True}:
        return {"task": "dataset", "tasks": "datasets"}
    if kinds == {True, False}:
        return {"task": "env or dataset", "tasks": "envs and datasets"}
    return {"task": "env", "tasks": "envs"}


def _run_tags(row: Mapping[str, Any]) -> list[str]:
    """``name=value`` tokens of a run for the tag filter (whitespace in them as ``_``)."""
    pairs = [(name, row.get(name)) for name in _FILTER_TAGS if name in row]
    pairs += list(portable_tags({c.removeprefix("tag."): row[c] for c in row
                                 if c.startswith("tag.") and c not in _NOT_TAGS
                                 and isinstance(row[c], str)}).items())
    return sorted({_WHITESPACE.sub("_", f"{name}={value}") for name, value in pairs
                   if isinstance(value, str) and value})


class SiteBuilder:
    """Renders every page of the site from the suites' data."""

    def __init__(self, suites: Sequence[SuiteData], stores: Mapping[str, str], *, reps: int,
                 seed: int):
        self.suites = suites
        self.stores = stores
        self.reps = reps
        self.seed = seed
        self.out = DataWriter({})
        self.records: dict[str, RunRecord] = {}
        self.rows: dict[str, dict[str, Any]] = {}
        self.run_tags: dict[str, list[str]] = {}

    def build(self) -> dict[str, str]:
        # as compare: an infinite score makes the bands that include it infinite or NaN
        # (not drawn), and numpy's warnings about it would say nothing more
        with np.errstate(over="ignore", invalid="ignore"):
            self.index()
            for data in self.suites:
                self.suite(data)
        return self.out.files

    # --- the index -----------------------------------------------------------------------
    def index(self) -> None:
        rows = []
        for data in self.suites:
            runs = data.runs
            budgets = sorted({(r.budget, r.unit) for r in data.records})
            last = _last_update(runs)
            rows.append([
                Cell(link(f"suites/{slug(data.name)}/index.html", data.name), data.name),
                Cell.of(_kind(data)),
                Cell.of(", ".join(sorted(set(runs.env))), len(set(runs.env))),
                Cell.of(", ".join(sorted(set(runs.algorithm)))),
                Cell.of(", ".join(f"{b:,} {u}" for b, u in budgets)),
                Cell.of(f"{data.finished} of {len(runs)}", data.finished),
                Cell.of(last or "—", last or None),
            ])
        spec = Table("suites", ["suite", "kind", "envs or datasets", "algorithms", "budgets",
                                "finished runs", "last update"], rows,
                     caption="every suite of the stores; a budget is env frames (online) "
                             "or gradient steps (offline)")
        body = [f"<p>From {text(self._sources())}.</p>",
                self.out.table("", spec)]
        self.out.files["index.html"] = page("rlbench leaderboards", body, root="")

    def _sources(self) -> str:
        """The stores read, by name and kind with the runs published from each."""
        counts = {name: sum(int((data.runs.store == name).sum()) for data in self.suites)
                  for name in self.stores}
        return "; ".join(f"{name}, {kind} ({counts[name]:,} runs published)"
                         for name, kind in self.stores.items())

    # --- a suite -------------------------------------------------------------------------
    def suite(self, data: SuiteData) -> None:
        self.records = {r.run_id: r for r in data.records}
        # plain dicts: pandas' per-cell access costs seconds over 10,000 runs
        self.rows = {row["run_id"]: row for row in data.runs.to_dict("records")}
        self.run_tags = {run_id: _run_tags(row) for run_id, row in self.rows.items()}
        here = f"suites/{slug(data.name)}/"
        root = "../../"
        words = _kind_words(data)
        body = [f"<p>{len(data.runs)} runs in {len(set(data.runs.env))} {words['tasks']}; "
                f"{data.finished} finished.</p>", _notes(data.notes)]
        comparison = data.comparison
        if comparison is None:
            body.append(self._missing(data))
        else:
            body += self._comparisons(here, comparison, words)
            body += self._baselines(here, comparison, words)
        body.append(f"<h2>{text(words['tasks'].capitalize())}</h2>")
        body.append(self.out.table(here, self._tasks_table(data, words)))
        if comparison is not None:
            body.append(_notes([*comparison.group_notes, *comparison.aggregate_notes]))
        self.out.files[f"{here}index.html"] = page(
            f"suite {data.name}", body, root=root)
        for env in sorted(set(data.runs.env)):
            self.task(data, env, words)
        for run_id, row in self.rows.items():
            self.out.files.update(run_page(data.name, row, self.records[run_id]))

    def _missing(self, data: SuiteData) -> str:
        counts = data.runs.status.value_counts().to_dict()
        finished = [r for r in data.records if r.status == "FINISHED"]
        said = ", ".join(f"{n} {status.lower()}" for status, n in sorted(counts.items()))
        why = (f"{len(finished)} finished without an evaluation" if finished else
               "none finished")
        return (f'<p class="missing">No scores to rank: of its {len(data.runs)} runs '
                f"({said}), {text(why)}. Each run's page below says what it recorded "
                "(a failed run's traceback included).</p>")

    def _comparisons(self, here: str, comparison: Comparison, words: dict[str, str]
                     ) -> list[str]:
        """A section per cohort (entries that ran the same tasks at the same budget), after
        the rule and what was left out."""
        out = ["<h2>Comparisons</h2>",
               f"<p>{text(COHORT_RULE[0].upper() + COHORT_RULE[1:])}. "
               f"{text(RANK_RULE[0].upper() + RANK_RULE[1:])}.</p>"]
        if not comparison.cohorts:
            out.append(f'<p class="missing">No comparison: no {words["task"]} of this suite '
                       "has a normalization reference (see the notes below).</p>")
            return out
        left = [f"{c.entries[0]} at {c.title}: no other entry ran {c.these} at this budget"
                for c in comparison.cohorts if len(c.entries) == 1]
        left += [f"{env}: no normalization reference, so in no comparison"
                 for env in comparison.unreferenced]
        if left:
            out.append('<p class="missing">Compared with no other entry:</p>' + _notes(left))
        for number, cohort in enumerate(comparison.cohorts, 1):
            out.append(f"<h3 id={attr(f'comparison-{number}')}>Comparison {number}: "
                       f"{text(cohort.title)}</h3>")
            out.append(self._aggregates(here, number, cohort))
            out += self._improvement(here, number, cohort)
            out += self._profiles(cohort)
        return out

    def _aggregates(self, here: str, number: int, cohort: Cohort) -> str:
        digits = 1 if cohort.offline else 3
        rows = [[Cell.of("—" if cohort.ranks[label] is None else str(cohort.ranks[label]),
                         cohort.ranks[label]), Cell.of(label),
                 Cell.of(cohort.runs_shown(label),
                         sum(len(n) for n in cohort.normalized[label])),
                 *(Cell.of(_ci_text(cohort.aggregates[label][name], digits),
                           cohort.aggregates[label][name].value) for name in AGGREGATES)]
                for label in cohort.entries]
        scale = ("D4RL normalized final scores, 0 = the dataset's random score, 100 = its "
                 "expert score" if cohort.offline else
                 "normalized final scores, 0 = random play, 1 = the reference score")
        spec = Table(f"aggregates-{number}", ["rank", "algorithm", f"runs × {cohort.task_kind}s",
                                              *(n.replace("_", " ") for n in AGGREGATES)],
                     rows,
                     caption=f"{scale}, over {', '.join(cohort.tasks)} at {cohort.budget:,} "
                             f"{cohort.unit}, with 95% expanded stratified bootstrap CIs; "
                             f"optimality gap: the mean shortfall below {cohort.scale:g}, "
                             "lower is better; rank by the IQM's CI as above")
        out = self.out.table(here, spec)
        if len(cohort.entries) == 1:
            out += (f"<p>Only {text(cohort.entries[0])} ran {cohort.these} at this budget: "
                    "it is ranked and compared with none.</p>")
        return out

    def _improvement(self, here: str, number: int, cohort: Cohort) -> list[str]:
        if not cohort.improvement:
            return []
        algos = sorted(cohort.aggregates)
        cells: dict[tuple[str, str], Interval] = {}
        for p in cohort.improvement:
            cells[(p.x, p.y)] = p.probability
            v = p.probability
            cells[(p.y, p.x)] = Interval(1 - v.value, 1 - v.high, 1 - v.low)
        rows = [[Cell.of(x), *(Cell.of(_ci_text(cells[(x, y)], 2), cells[(x, y)].value)
                               if (x, y) in cells else Cell.of("—", None) for y in algos)]
                for x in algos]
        spec = Table(f"improvement-{number}", ["X \\ Y", *algos], rows,
                     caption="P(X > Y): the chance a run of the row's algorithm beats one of "
                             f"the column's on {cohort.these}"
                             + (", averaged over them" if len(cohort.tasks) > 1 else "")
                             + ", with its 95% expanded bootstrap CI")
        return [f"<h4>Probability of improvement, comparison {number}</h4>",
                self.out.table(here, spec)]

    def _profiles(self, cohort: Cohort) -> list[str]:
        values = np.concatenate([v for scores in cohort.normalized.values() for v in scores])
        finite = values[np.isfinite(values)]
        top = float(finite.max()) if finite.size else cohort.scale
        taus = np.linspace(0.0, max(cohort.scale, top) * 1.02, 61)
        series = []
        for algo, scores in sorted(cohort.normalized.items()):
            rng = labelled_rng(self.seed, "profile", cohort.title, algo)
            value, low, high = performance_profile_band(scores, taus, rng=rng,
                                                        reps=self.reps)
            series.append(Series(algo, taus, value, low, high))
        chart = line_chart(series, x_label=f"τ: {cohort.score_label}",
                           y_label="fraction of runs with score > τ")
        return ["<h4>Performance profiles</h4>",
                f"<figure>{chart}<figcaption>bands: 95% stratified percentile bootstrap "
                f"CIs ({self.reps:,} resamples of each {cohort.task_kind}'s "
                "runs)</figcaption></figure>"]

    def _baselines(self, here: str, comparison: Comparison, words: dict[str, str]
                   ) -> list[str]:
        rows = []
        for s in comparison.summaries:
            for score, judged in s.baselines:
                rows.append([
                    Cell.of(s.group.env), Cell.of(s.group.label),
                    Cell.of(f"{s.group.budget:,} {s.group.unit}", s.group.budget),
                    Cell.of(_ci_text(s.mean_ci), s.mean),
                    Cell.of(score.library), Cell.of(score.metric),
                    Cell.of(fmt(score.mean) + ("" if score.std is None
                                               else f" ± {fmt(score.std)}"), score.mean),
                    Cell.of(judged.word), Cell.of("; ".join(judged.caveats) or "none")])
        if not rows:
            return []
        spec = Table("baselines", [words["task"], "algorithm", "budget",
                                   "ours: mean [95% t-CI]", "published by", "metric",
                                   "published mean ± std", "verdict", "differences"], rows,
                     filters=["verdict"],
                     caption="a verdict compares our 95% t-CI of the mean with the published "
                             "mean where env, budget and metric match; otherwise it says "
                             "what differs (sources: results/baselines/SOURCES.md)")
        return ["<h2>Published baselines beside ours</h2>", self.out.table(here, spec)]

    def _tasks_table(self, data: SuiteData, words: dict[str, str]) -> Table:
        rows = []
        for env, runs in data.runs.groupby("env", sort=True):
            rows.append([
                Cell(link(f"tasks/{slug(str(env))}/index.html", env), str(env)),
                Cell.of(", ".join(sorted(set(runs.algorithm)))),
                Cell.of(str(len(runs)), len(runs)),
                Cell.of(str(int((runs.status == "FINISHED").sum())),
                        int((runs.status == "FINISHED").sum()))])
        return Table("tasks", [words["task"], "algorithms", "runs", "finished"], rows)

    # --- an env or dataset ---------------------------------------------------------------
    def task(self, data: SuiteData, env: str, words: dict[str, str]) -> None:
        suite_dir = f"suites/{slug(data.name)}/"
        here = f"{suite_dir}tasks/{slug(env)}/"
        root = "../../../../"
        runs = data.runs[data.runs.env == env]
        summaries = ([s for s in data.comparison.summaries if s.group.env == env]
                     if data.comparison is not None else [])
        records = [r for r in data.records if r.env == env]
        offline = any(r.offline for r in records)
        unit = budget_unit(offline)
        body = [self._provenance(runs) if offline else ""]
        rows, tags = [], []
        for s in summaries:
            g = s.group
            verdicts = "; ".join(f"{score.library}: {judged.word}"
                                 for score, judged in s.baselines
                                 if not score.metric.endswith("_best")) or "—"
            rows.append([
                Cell.of(g.label), Cell.of(g.algo), Cell.of(f"{g.budget:,}", g.budget),
                Cell.of(_seeds(g), len(g.runs)),
                Cell.of(fmt(s.mean) + ("" if s.std is None else f" ± {fmt(s.std)}"), s.mean),
                Cell.of(fmt(s.std), s.std),
                Cell.of(_ci_text(s.iqm), s.iqm.value),
                Cell.of(fmt(g.fps, 0), g.fps), Cell.of(verdicts)])
            ids = {r.run_id for r in g.runs}
            tags.append(sorted({t for run_id in ids for t in self.run_tags[run_id]}))
        score = "D4RL normalized score" if offline else "return"
        spec = Table("algorithms", ["configuration", "algorithm", unit, "seeds",
                                    f"final {score} (mean ± std)", "std",
                                    "IQM [95% bootstrap CI]", f"{unit}/s",
                                    "verdict vs published"], rows,
                     filters=["algorithm", unit], row_tags=tags,
                     caption="each seed's final deterministic evaluation; the IQM CI is "
                             f"a percentile bootstrap ({self.reps:,} resamples) and needs "
                             f"{MIN_BOOTSTRAP_SEEDS} seeds; a verdict needs the env, budget "
                             "and metric to match")
        if summaries:
            body += ["<h2>Algorithms</h2>", self.out.table(here, spec)]
        else:
            body.append('<p class="missing">No finished run with an evaluation: nothing to '
                        "score. The runs below say what they recorded.</p>")
        body += self._curves(summaries, unit, score)
        body += self._published(here, summaries)
        body += ["<h2>Runs</h2>", self.out.table(here, self._runs_table(data, runs, unit))]
        self.out.files[f"{here}index.html"] = page(
            f"{env} — {data.name}", body, root=root,
            crumbs=[(f"{root}{suite_dir}index.html", f"suite {data.name}")])

    def _provenance(self, runs: pd.DataFrame) -> str:
        first = runs.iloc[0]
        pairs = [("dataset", text(first.get("tag.dataset", "—"))),
                 ("sha256", f"<code>{text(first.get('tag.dataset_sha256', '—'))}</code>"),
                 ("evaluated in", text(first.get("tag.eval_env", "—")))]
        low, high = first.get("tag.ref_min_score"), first.get("tag.ref_max_score")
        if isinstance(low, str) and low and isinstance(high, str) and high:
            pairs.append(("reference scores", text(
                f"{float(low):,.2f} (0) and {float(high):,.2f} (100): the D4RL normalized "
                "score is 100 × (return − min) / (max − min)")))
        else:
            pairs.append(("reference scores", "none: scores are raw returns"))
        hashes = sorted({h for h in runs.get("tag.dataset_sha256", pd.Series(dtype=str))
                         if isinstance(h, str) and h})
        if len(hashes) > 1:
            pairs.append(("note", text(f"its runs read {len(hashes)} different files under "
                                       "this name: compare them by tag.dataset_sha256")))
        return "<h2>Dataset</h2>" + facts(pairs)

    def _curves(self, summaries: Sequence[GroupSummary], unit: str, score: str
                ) -> list[str]:
        out = []
        by_budget: dict[int, list[GroupSummary]] = {}
        for s in summaries:
            by_budget.setdefault(s.group.budget, []).append(s)
        for budget, members in sorted(by_budget.items()):
            series = []
            for s in members:
                steps, returns = s.group.curves()
                if steps.size == 0:
                    continue
                rng = np.random.default_rng([self.seed, int.from_bytes(hashlib.sha256(
                    f"curve\0{s.group.env}\0{s.group.label}\0{budget}".encode()).digest()[:8],
                    "little")])
                mean, low, high = curve_band(returns, rng=rng, reps=self.reps)
                series.append(Series(s.group.label, steps, mean, low, high))
            bands = [Band(f"{p.library} {p.algorithm} on {p.env}: {fmt(p.mean)}"
                          + ("" if p.std is None else f" ± {fmt(p.std)}") + " (published)",
                          p.mean - (p.std or 0.0), p.mean + (p.std or 0.0))
                     for p in _published_scores(members) if p.metric.endswith("_last")
                     or not p.metric.startswith("d4rl_")]
            if series:
                chart = line_chart(series, x_label=unit, y_label=score, bands=bands)
                out += [f"<h2>Learning curves at {budget:,} {text(unit)}</h2>",
                        f"<figure>{chart}<figcaption>lines: mean over seeds; bands: 95% "
                        f"percentile bootstrap CI of that mean ({self.reps:,} resamples; "
                        "none for one seed); grey: a published mean ± std"
                        "</figcaption></figure>"]
        return out

    def _published(self, here: str, summaries: Sequence[GroupSummary]) -> list[str]:
        rows = [[Cell.of(s.group.label), Cell.of(p.library), Cell.of(p.env),
                 Cell.of(p.metric), Cell.of(f"{p.steps:,}" if p.steps else "—", p.steps),
                 Cell.of(fmt(p.mean), p.mean), Cell.of(fmt(p.std), p.std),
                 Cell.of(str(p.n_seeds or "—"), p.n_seeds), Cell.of(judged.word),
                 Cell.of("; ".join(judged.caveats) or "none")]
                for s in summaries for p, judged in s.baselines]
        if not rows:
            return []
        spec = Table("published", ["ours", "published by", "published on", "metric",
                                   "budget", "mean", "std", "seeds", "verdict",
                                   "differences"], rows,
                     caption="published numbers for this env or dataset (or, for a dataset "
                             "rlbench made, D4RL's of the same env and quality: a sanity "
                             "band, never a verdict)")
        return ["<h2>Published</h2>", self.out.table(here, spec)]

    def _runs_table(self, data: SuiteData, runs: pd.DataFrame, unit: str) -> Table:
        rows = []
        for run_id in runs.run_id:
            row = self.rows[run_id]
            record = self.records[run_id]
            final = record.final_return
            rows.append([
                Cell(link(f"../../runs/{slug(row['run_id'])}.html", row['run_id']),
                     row["run_id"]),
                Cell.of(row["algorithm"]), Cell.of(str(row["seed"]), int(row["seed"])),
                Cell.of(f"{record.budget:,}", record.budget), Cell.of(row['status']),
                Cell.of(fmt(final), final), Cell.of(record.code)])
        return Table("runs", ["run", "algorithm", "seed", unit, "status", "final", "code"],
                     rows, filters=["algorithm", "status"])

def _seeds(group: Group) -> str:
    extra = [f"{n} {word}" for n, word in ((group.failed, "failed"), (group.killed, "killed"),
                                           (group.running, "running")) if n]
    return f"{len(group.runs)}" + (f" ({', '.join(extra)})" if extra else "")


def _published_scores(members: Sequence[GroupSummary]) -> Iterator:
    seen = set()
    for s in members:
        for score, _ in s.baselines:
            key = (score.library, score.algorithm, score.env, score.metric)
            if key not in seen:
                seen.add(key)
                yield score


def _last_update(runs: pd.DataFrame) -> str:
    if runs.empty:
        return ""
    ends = runs.start_time + pd.to_timedelta(runs.seconds.fillna(0), unit="s")
    return ends.max().strftime("%Y-%m-%d %H:%M UTC")


def site_files(suites: Sequence[SuiteData], stores: Mapping[str, str], *, reps: int,
               seed: int) -> dict[str, str]:
    """Every file of the site, by its path relative to the site's top, assets included;
    ``stores`` maps each store's name on the pages to its kind (``stores.py``)."""
    files = SiteBuilder(suites, stores, reps=reps, seed=seed).build()
    files.update({f"assets/{name}": content for name, content in ASSETS.items()})
    return files

