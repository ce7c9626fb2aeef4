"""Which entries a comparison compares with one another, and their cross-task statistics.

An entry is one config (its label) at one budget. Entries meet in a cohort when they ran the
same budget (env frames online, gradient steps offline) on the same tasks (envs, or dataset
files) with a normalization reference. Every cross-task number of a cohort (aggregates,
ranks, P(X > Y), performance profiles) covers exactly those tasks at exactly that budget, so
no two entries are ranked or compared across budgets or over tasks only one of them ran.
An entry alone in its cohort is compared with none, and a note says so.

Normalized scores are shown on the scale their tasks use: online 0 (random play) to 1 (the
reference score), offline D4RL's 0 to 100. The bootstrap runs on the 0-1 scale, and a
cohort's aggregates and profile scores are then multiplied by its scale, so every number a
cohort holds is on the scale it is shown in.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np

from rlbench.harness.analysis.ranking import ci_ranks
from rlbench.harness.analysis.statistics import (
    AGGREGATES,
    Interval,
    labelled_rng,
    normalize,
    probability_of_improvement_ci,
    seeds_to_detect,
    stratified_bootstrap_ci,
)
from rlbench.harness.store.results import budget_unit

__all__ = ["COHORT_RULE", "Cohort", "Improvement", "TaskScores", "build_cohorts", "score_scale"]

COHORT_RULE = ("entries are compared only with entries that ran the same envs or datasets "
               "(those with a normalization reference) at the same budget: each such "
               "comparison has its own aggregates, ranks, probabilities of improvement and "
               "performance profiles, and an entry no other matches is compared with none")


def score_scale(offline: bool) -> float:
    """The normalized score of the reference: 100 for D4RL's offline scores, else 1."""
    return 100.0 if offline else 1.0


@dataclass(frozen=True)
class TaskScores:
    """One entry's final scores on one task with a normalization reference."""

    label: str
    task: str  # as the tables show it (a dataset file's short sha256 where a name has several)
    budget: int
    offline: bool
    finals: np.ndarray  # each seed's final score: a return, or a D4RL normalized score
    reference: tuple[float, float]  # the scores that normalize to 0 and to the scale


@dataclass
class Improvement:
    """``P(X > Y)`` over a cohort's tasks, with what to know about it."""

    x: str
    y: str
    envs: list[str]
    probability: Interval
    notes: list[str]
    # seeds per algorithm and env a 5% two-sided test needs to find a difference of the
    # observed size 80% of the time (statistics.seeds_to_detect); None: not computable
    seeds_needed: float | None = None


@dataclass
class Cohort:
    """Entries that ran the same tasks at the same budget, and their statistics."""

    offline: bool
    budget: int
    tasks: list[str]
    normalized: dict[str, list[np.ndarray]] = field(default_factory=dict)  # per task
    aggregates: dict[str, dict[str, Interval]] = field(default_factory=dict)
    ranks: dict[str, int | None] = field(default_factory=dict)  # by the IQM's CI
    # (ranking.py); None: no CI
    improvement: list[Improvement] = field(default_factory=list)

    @property
    def entries(self) -> list[str]:
        """The labels, best rank first (unranked last), then by IQM, then by name."""
        def order(label: str) -> tuple[float, float, str]:
            rank = self.ranks[label]
            iqm = self.aggregates[label]["iqm"].value
            return (np.inf if rank is None else rank,
                    np.inf if np.isnan(iqm) else -iqm, label)
        return sorted(self.aggregates, key=order)

    def runs_shown(self, label: str) -> str:
        """An entry's runs as the tables count them: ``3 × 2`` (runs × tasks), or
        ``3+1 × 2`` when its tasks ran different seed counts."""
        counts = [len(scores) for scores in self.normalized[label]]
        runs = str(counts[0]) if len(set(counts)) == 1 else "+".join(map(str, counts))
        return f"{runs} × {len(counts)}"

    @property
    def unit(self) -> str:
        return budget_unit(self.offline)

    @property
    def scale(self) -> float:
        return score_scale(self.offline)

    @property
    def task_kind(self) -> str:
        """What one of its tasks is: ``env`` or ``dataset``."""
        return "dataset" if self.offline else "env"

    @property
    def task_word(self) -> str:
        """Its tasks as a count names them: ``env``, ``envs``, ``dataset``, ``datasets``."""
        return self.task_kind + ("" if len(self.tasks) == 1 else "s")

    @property
    def these(self) -> str:
        """``this env``, ``these envs``, ``this dataset`` or ``these datasets``."""
        return ("this " if len(self.tasks) == 1 else "these ") + self.task_word

    @property
    def title(self) -> str:
        """What the cohort is: ``1,000,000 frames on Hopper-v5, Walker2d-v5``."""
        return f"{self.budget:,} {self.unit} on {', '.join(self.tasks)}"

    @property
    def score_label(self) -> str:
        """What its normalized scores are, for axes and captions."""
        return ("normalized score (D4RL, 0–100)" if self.offline
                else "normalized score (0 = random, 1 = reference)")


def _scaled(interval: Interval, scale: float) -> Interval:
    return Interval(interval.value * scale, interval.low * scale, interval.high * scale)


def build_cohorts(scores: Sequence[TaskScores], *, seed: int, reps: int
                  ) -> tuple[list[Cohort], list[str]]:
    """The cohorts of ``scores`` (online before offline, then by budget and tasks), each
    with its statistics, and the notes: every entry alone in its cohort, and every entry
    whose tasks ran different seed counts."""
    by_entry: dict[tuple[bool, int, str], dict[str, TaskScores]] = {}
    for score in scores:
        by_entry.setdefault((score.offline, score.budget, score.label), {})[score.task] = score
    members: dict[tuple[bool, int, tuple[str, ...]], list[str]] = {}
    for (offline, budget, label), tasks in by_entry.items():
        members.setdefault((offline, budget, tuple(sorted(tasks))), []).append(label)
    cohorts, notes = [], []
    for (offline, budget, tasks), labels in sorted(members.items()):
        cohort = Cohort(offline, budget, list(tasks))
        for label in sorted(labels):
            _aggregate(cohort, label, [by_entry[(offline, budget, label)][t] for t in tasks],
                       seed=seed, reps=reps, notes=notes)
        cohort.ranks = ci_ranks({label: values["iqm"]
                                 for label, values in cohort.aggregates.items()})
        cohort.improvement = _improvements(cohort, by_entry, seed=seed, reps=reps)
        cohorts.append(cohort)
    for cohort in cohorts:
        if len(cohort.aggregates) == 1:
            notes.append(_alone(cohort, cohorts))
    return cohorts, notes


def _alone(cohort: Cohort, cohorts: Sequence[Cohort]) -> str:
    """Why the one entry of ``cohort`` is compared with none, and what the entries at its
    budget ran instead."""
    (label,) = cohort.aggregates
    others = [f"{' and '.join(sorted(c.aggregates))} ran {', '.join(c.tasks)}"
              for c in cohorts if c is not cohort and (c.offline, c.budget)
              == (cohort.offline, cohort.budget)]
    return (f"{label} at {cohort.title}: no other entry ran {cohort.these} at this budget, "
            "so it is ranked and compared with none"
            + (f" (at this budget {'; '.join(others)})" if others else ""))


def _labels(cohort: Cohort, *more: str) -> tuple[str, ...]:
    return (str(cohort.budget), cohort.unit, *cohort.tasks, *more)


def _aggregate(cohort: Cohort, label: str, scores: Sequence[TaskScores], *, seed: int,
               reps: int, notes: list[str]) -> None:
    counts = [s.finals.size for s in scores]
    if len(set(counts)) > 1:
        shown = ", ".join(f"{s.task} {s.finals.size}" for s in scores)
        notes.append(f"{label} at {cohort.budget:,} {cohort.unit}: seeds per "
                     f"{cohort.task_kind} differ ({shown}): every seed is used, and each "
                     f"{cohort.task_kind} weighs the same")
    unit_scores = [normalize(s.finals, *s.reference) for s in scores]
    cohort.normalized[label] = [values * cohort.scale for values in unit_scores]
    cohort.aggregates[label] = {
        name: _scaled(stratified_bootstrap_ci(
            unit_scores, statistic, rng=labelled_rng(seed, label, name, *_labels(cohort)),
            reps=reps, expand=True), cohort.scale)
        for name, statistic in AGGREGATES.items()}


def _improvements(cohort: Cohort, by_entry: dict[tuple[bool, int, str], dict[str, TaskScores]],
                  *, seed: int, reps: int) -> list[Improvement]:
    """P(X > Y) for each pair of the cohort's entries, over its tasks (each task's chance
    that a run of X beats one of Y does not depend on the normalization)."""
    labels = sorted(cohort.aggregates)
    finals = {label: [by_entry[(cohort.offline, cohort.budget, label)][t].finals
                      for t in cohort.tasks] for label in labels}
    out = []
    for i, x in enumerate(labels):
        for y in labels[i + 1:]:
            probability = probability_of_improvement_ci(
                finals[x], finals[y], rng=labelled_rng(seed, "poi", x, y, *_labels(cohort)),
                reps=reps, expand=True)
            notes = (["no probability: a final score is NaN (see the notes above)"]
                     if np.isnan(probability.value) else [])
            out.append(Improvement(x, y, list(cohort.tasks), probability, notes,
                                   seeds_to_detect(finals[x], finals[y])))
    return out
