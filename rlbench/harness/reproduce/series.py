"""Metric series as a run logs them, kept in memory, and where two sets of series part.

A series is what the store keeps of one metric: ``(step, value)`` points, steps being
frames (online) or gradient steps (offline). Wall-clock metrics (``train/fps``,
``train/steps_per_s``) are left out everywhere: they are the only values a run does not
fix bit for bit.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from mlflow.tracking import MlflowClient
from tensordict import TensorDict
from torch import nn

from rlbench.harness.store.recorder import SCORE, eval_row
from rlbench.trace import TRACE_PREFIX

__all__ = [
    "WALL_CLOCK",
    "Parting",
    "PrefixDone",
    "Series",
    "SeriesLogger",
    "TraceParting",
    "comparable",
    "first_parting",
    "points",
    "prefix",
    "stored_series",
    "trace_parting",
    "untraced",
]

WALL_CLOCK = frozenset({"train/fps", "train/steps_per_s"})
Series = dict[str, list[tuple[int, float]]]


class PrefixDone(Exception):
    """Raised by ``SeriesLogger`` at the first point past its prefix: the run stops there."""


class SeriesLogger:
    """A ``RunLogger`` that keeps each metric's points as the harness's recorder would
    store them (evaluations as ``eval/return_mean`` and ``eval/return_std``), drops the
    models and tensors a run saves, and stops the run (``PrefixDone``) at the first point
    logged past ``until``."""

    def __init__(self, until: int) -> None:
        self.until = until
        self.series: Series = {}

    def _add(self, step: int, metrics: Mapping[str, float]) -> None:
        if step > self.until:
            raise PrefixDone(step)
        for key, value in metrics.items():
            if key not in WALL_CLOCK:
                self.series.setdefault(key, []).append((int(step), float(value)))

    def log_metrics(self, step: int, metrics: Mapping[str, float]) -> None:
        self._add(step, metrics)

    def log_eval(self, step: int, returns: Sequence[float]) -> None:
        self._add(step, eval_row(returns))

    def log_score(self, step: int, score: float) -> None:
        self._add(step, {SCORE: score})

    def save_model(self, name: str, module: nn.Module) -> None:
        pass

    def save_tensordict(self, name: str, data: TensorDict) -> None:
        pass


def stored_series(client: MlflowClient, run_id: str) -> Series:
    """Every metric series of a stored run but the wall-clock ones, in step order."""
    keys = sorted(client.get_run(run_id).data.metrics)
    return {key: sorted((int(m.step), float(m.value))
                        for m in client.get_metric_history(run_id, key))
            for key in keys if key not in WALL_CLOCK}


def prefix(series: Series, until: int) -> Series:
    """The points of ``series`` at steps up to ``until``; a metric with none is left out."""
    cut = {key: [point for point in found if point[0] <= until] for key, found in series.items()}
    return {key: found for key, found in cut.items() if found}


def points(series: Series) -> int:
    return sum(len(found) for found in series.values())


@dataclass(frozen=True)
class Parting:
    """The first step at which two sets of series differ, and how."""

    step: int
    metric: str
    stored: float | None  # None: that side has no point there
    again: float | None

    def line(self, stored: str = "stored", again: str = "again") -> str:
        def shown(value: float | None) -> str:
            return "no point" if value is None else repr(value)

        return (f"the series part at step {self.step:,}: {self.metric} is "
                f"{shown(self.stored)} ({stored}) and {shown(self.again)} ({again})")


def _same(a: float, b: float) -> bool:
    """The same double as the store keeps it: every bit but zero's sign, which MLflow's
    store does not keep (a run logs -0.0, the store gives back 0.0); NaN is NaN."""
    return a == b or (math.isnan(a) and math.isnan(b))


def _first_in(metric: str, left: list[tuple[int, float]], right: list[tuple[int, float]]
              ) -> Parting | None:
    """Where one metric's two series first differ, point by point: a step on one side
    only, or another value (``_same``)."""
    for index in range(max(len(left), len(right))):
        a = left[index] if index < len(left) else None
        b = right[index] if index < len(right) else None
        if a is not None and b is not None and a[0] == b[0]:
            if not _same(a[1], b[1]):
                return Parting(a[0], metric, a[1], b[1])
            continue
        step = min(point[0] for point in (a, b) if point is not None)
        return Parting(step, metric, a[1] if a is not None and a[0] == step else None,
                       b[1] if b is not None and b[0] == step else None)
    return None


def first_parting(stored: Series, again: Series) -> Parting | None:
    """The earliest step where a metric has another value, or a point on one side only
    (ties in step: the metric first by name); None when the series are identical."""
    found: Parting | None = None
    for metric in sorted(set(stored) | set(again)):
        parting = _first_in(metric, stored.get(metric, []), again.get(metric, []))
        if parting is not None and (found is None or parting.step < found.step):
            found = parting
    return found


def untraced(series: Series) -> Series:
    """``series`` without its update trace (``trace/...``: ``rlbench.trace``)."""
    return {key: found for key, found in series.items() if not key.startswith(TRACE_PREFIX)}


def comparable(first: Series, second: Series) -> tuple[Series, Series]:
    """The two sets of series to compare: every metric but the trace, and of the trace the
    tensors both runs traced at the updates both traced. A trace on one side only (another
    ``trace_every``, a run traced from a resume on) is no difference in what they computed."""
    steps = _trace_steps(first) & _trace_steps(second)
    shared = {key for key in first if key.startswith(TRACE_PREFIX)} & set(second)

    def kept(series: Series) -> Series:
        traced = {key: [point for point in series[key] if point[0] in steps]
                  for key in sorted(shared)}
        return {**untraced(series), **{key: found for key, found in traced.items() if found}}

    return kept(first), kept(second)


def _trace_steps(series: Series) -> set[int]:
    return {step for key, found in series.items() if key.startswith(TRACE_PREFIX)
            for step, _ in found}


@dataclass(frozen=True)
class TraceParting:
    """The first traced update at which two runs' hashes differ, and the tensors that do."""

    step: int
    tensors: tuple[str, ...]  # the trace metrics that differ there, inputs first
    traced: int  # the trace metrics compared at that step

    def line(self, shown: int = 6) -> str:
        names = [name.removeprefix(TRACE_PREFIX) for name in self.tensors]
        listed = ", ".join(names[:shown]) + (f" and {len(names) - shown} more"
                                              if len(names) > shown else "")
        return (f"the first traced update that parts is at step {self.step:,}: "
                f"{len(names)} of {self.traced} traced tensors differ, first {listed}")


def _trace_order(metric: str) -> tuple[int, str]:
    """Inputs before what the update wrote: the batch, the random streams, then state."""
    rest = metric.removeprefix(TRACE_PREFIX)
    rank = 0 if rest.startswith("batch/") else 1 if rest.startswith("rng/") else 2
    return rank, rest


def trace_parting(first: Series, second: Series) -> TraceParting | None:
    """Where two traced runs' update hashes first differ (a traced metric on one side only
    counts as differing); None when their traces agree or either run has none."""
    left = {key: dict(found) for key, found in first.items() if key.startswith(TRACE_PREFIX)}
    right = {key: dict(found) for key, found in second.items() if key.startswith(TRACE_PREFIX)}
    if not left or not right:
        return None
    metrics = sorted(set(left) | set(right), key=_trace_order)
    steps = sorted({step for found in (*left.values(), *right.values()) for step in found})
    for step in steps:
        here = [m for m in metrics if step in left.get(m, {}) or step in right.get(m, {})]
        differ = tuple(m for m in here
                       if left.get(m, {}).get(step) != right.get(m, {}).get(step))
        if differ:
            return TraceParting(step, differ, len(here))
    return None
