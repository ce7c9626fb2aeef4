"""Settings studies: how an algorithm's final score moves with one of its settings.

Where a store holds configs of one algorithm that differ in a hyperparameter on the same env
and budget (a grid, ``ppo.learning_rate=1e-4,3e-4,1e-3``), ``rlbench compare`` shows, per
such setting, each env's final score against the setting's value: a table and a plot (a
sensitivity curve). The other settings the grid varies are held fixed along each curve, so a
two-setting grid draws one curve per value of the other.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

from rlbench.harness.analysis.comparison import GroupSummary

__all__ = ["SensitivityPoint", "SettingStudy", "numeric_value", "setting_studies"]

_PREFIX = "algo_params."


@dataclass(frozen=True)
class SensitivityPoint:
    """One config's final scores, placed at its value of the setting studied."""

    env: str
    budget: int
    unit: str
    others: str  # the other varied settings, ``clip_epsilon=0.1``; empty for a 1-D grid
    value: str  # as the store holds it
    summary: GroupSummary

    @property
    def curve(self) -> tuple[str, int, str]:
        """The curve the point is on: env, budget and the other settings."""
        return self.env, self.budget, self.others


@dataclass(frozen=True)
class SettingStudy:
    """One algorithm's final scores against one setting, every env it ran."""

    algo: str
    setting: str
    points: list[SensitivityPoint]

    @property
    def numeric(self) -> bool:
        return all(numeric_value(p.value) is not None for p in self.points)


def numeric_value(text: str) -> float | None:
    """The number a stored value is, or None (a list, a name, true/false)."""
    try:
        value = float(text)
    except ValueError:
        return None
    return value if math.isfinite(value) else None


def _settings(summary: GroupSummary) -> dict[str, str]:
    params = summary.group.runs[0].params
    return {key.removeprefix(_PREFIX): value for key, value in params.items()
            if key.startswith(_PREFIX)}


def _order(value: str) -> tuple[int, float, str]:
    number = numeric_value(value)
    return (0, number, "") if number is not None else (1, 0.0, value)


def setting_studies(summaries: Sequence[GroupSummary]) -> list[SettingStudy]:
    """A study per (algorithm, setting) where some env and budget ran two values or more
    of the setting, its points ordered by env, budget, the other settings and the value
    (numbers by size). Runs that do not record the setting (a store written by other
    code) are left out of its study."""
    by_algo: dict[str, list[GroupSummary]] = {}
    for summary in summaries:
        if summary.group.runs:
            by_algo.setdefault(summary.group.algo, []).append(summary)
    studies = []
    for algo, members in sorted(by_algo.items()):
        settings = {id(s): _settings(s) for s in members}
        varied: set[str] = set()
        by_task: dict[tuple[str, int], list[GroupSummary]] = {}
        for s in members:
            by_task.setdefault((s.group.env, s.group.budget), []).append(s)
        for same in by_task.values():
            names = {name for s in same for name in settings[id(s)]}
            varied |= {name for name in names
                       if len({settings[id(s)].get(name) for s in same}) > 1}
        for setting in sorted(varied):
            others = sorted(varied - {setting})
            points = [SensitivityPoint(
                env=s.group.env, budget=s.group.budget, unit=s.group.unit,
                others=",".join(f"{o}={settings[id(s)].get(o, '—')}" for o in others),
                value=settings[id(s)][setting], summary=s)
                for s in members if setting in settings[id(s)]]
            points.sort(key=lambda p: (p.env, p.budget, p.others, _order(p.value)))
            studies.append(SettingStudy(algo, setting, points))
    return studies
