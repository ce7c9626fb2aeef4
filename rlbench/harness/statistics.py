"""Aggregate statistics over seeds and tasks, with bootstrap confidence intervals.

The measures of Agarwal et al. (2021), "Deep RL at the Edge of the Statistical Precipice"
(what the ``rliable`` library computes; ``rliable`` 1.2 does not import beside pandas 3):
interquartile mean, median, mean and optimality gap of normalized scores, percentile
bootstrap CIs that resample runs within each task (stratified), performance profiles and
the probability of improvement. Scores are arrays ``[runs, tasks]``; every random draw
comes from a ``numpy.random.Generator`` seeded by the caller.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

__all__ = [
    "AGGREGATES",
    "Interval",
    "iqm",
    "mean_ci_t",
    "median_of_task_means",
    "normalize",
    "optimality_gap",
    "percentile_bounds",
    "performance_profile",
    "probability_of_improvement",
    "probability_of_improvement_ci",
    "score_matrix",
    "stratified_bootstrap_ci",
]

Statistic = Callable[[np.ndarray], float]


def iqm(scores: np.ndarray) -> float:
    """Interquartile mean of all entries: the mean of the middle 50% after sorting.

    ``floor(n / 4)`` values are cut from each end (``scipy.stats.trim_mean(x, 0.25)``).
    NaN if any score is NaN (sorting would move it to an end and cut it unseen).
    """
    flat = np.sort(np.asarray(scores, dtype=np.float64), axis=None)
    if np.isnan(flat).any():
        return float("nan")
    cut = int(0.25 * flat.size)
    return float(flat[cut:flat.size - cut].mean())


def optimality_gap(scores: np.ndarray, threshold: float = 1.0) -> float:
    """How far scores fall short of ``threshold`` on average: ``mean(max(threshold - x, 0))``."""
    return float(np.mean(np.maximum(threshold - np.asarray(scores, dtype=np.float64), 0.0)))


def median_of_task_means(scores: np.ndarray) -> float:
    """Median over tasks of each task's mean score (rliable's ``aggregate_median``)."""
    return float(np.median(score_matrix(scores).mean(axis=0)))


AGGREGATES: dict[str, Statistic] = {
    "iqm": iqm,
    "median": median_of_task_means,
    "mean": lambda x: float(np.mean(x)),
    "optimality_gap": optimality_gap,
}


def normalize(score: np.ndarray | float, random_score: float, reference_score: float
              ) -> np.ndarray:
    """``(score - random) / (reference - random)``: 0 is random play, 1 the reference."""
    if reference_score == random_score:
        raise ValueError("the reference and random scores must differ")
    return (np.asarray(score, dtype=np.float64) - random_score) / (reference_score - random_score)


@dataclass(frozen=True)
class Interval:
    """A point estimate with its bootstrap confidence interval.

    ``low`` and ``high`` are NaN when there is no interval: a task with a single run gives
    the bootstrap nothing to resample, and a zero-width interval would claim certainty.
    """

    value: float
    low: float
    high: float

    @property
    def has_bounds(self) -> bool:
        return not (np.isnan(self.low) or np.isnan(self.high))


def score_matrix(scores: np.ndarray, owner: str = "") -> np.ndarray:
    """``scores`` as a non-empty float64 ``[runs, tasks]`` matrix (1-D is one task);
    ``owner`` (e.g. an algorithm) prefixes the error."""
    matrix = np.asarray(scores, dtype=np.float64)
    if matrix.ndim == 1:
        matrix = matrix[:, None]
    if matrix.ndim != 2 or matrix.size == 0:
        prefix = f"{owner}: " if owner else ""
        raise ValueError(f"{prefix}scores must be a non-empty [runs, tasks], got {matrix.shape}")
    return matrix


def percentile_bounds(values: np.ndarray, confidence: float, axis: int | None = None
                      ) -> tuple[np.ndarray, np.ndarray]:
    """The central ``confidence`` percentile interval of bootstrap ``values`` (along
    ``axis``): the ends of every percentile-bootstrap CI here."""
    tail = (1 - confidence) / 2 * 100
    low, high = np.percentile(values, [tail, 100 - tail], axis=axis)
    return low, high


def stratified_bootstrap_ci(
    scores: np.ndarray,
    statistic: Statistic,
    *,
    rng: np.random.Generator,
    reps: int = 2000,
    confidence: float = 0.95,
) -> Interval:
    """Percentile bootstrap CI of ``statistic(scores)``; runs are resampled within each task.

    ``scores`` is ``[runs, tasks]`` (a 1-D array is one task). Each replicate draws, for
    every task independently, as many runs as it has with replacement. A single run has no
    interval (NaN bounds).
    """
    matrix = score_matrix(scores)
    runs, tasks = matrix.shape
    if runs < 2:
        return Interval(statistic(matrix), float("nan"), float("nan"))
    index = rng.integers(0, runs, size=(reps, runs, tasks))
    resampled = np.take_along_axis(matrix[None], index, axis=1)
    values = np.array([statistic(sample) for sample in resampled])
    low, high = percentile_bounds(values, confidence)
    return Interval(statistic(matrix), float(low), float(high))


def performance_profile(scores: np.ndarray, thresholds: np.ndarray) -> np.ndarray:
    """Fraction of all runs scoring above each threshold (the run-score distribution)."""
    flat = np.asarray(scores, dtype=np.float64).reshape(-1)
    return (flat[None, :] > np.asarray(thresholds, dtype=np.float64)[:, None]).mean(axis=1)


def probability_of_improvement(x: np.ndarray, y: np.ndarray) -> float:
    """``P(X > Y)``: for each task the chance a run of X beats a run of Y (ties count half),
    averaged over tasks. ``x`` and ``y`` are ``[runs, tasks]`` with the same tasks."""
    x, y = score_matrix(x), score_matrix(y)
    if x.shape[1] != y.shape[1]:
        raise ValueError(f"x and y cover different numbers of tasks: {x.shape[1]} vs {y.shape[1]}")
    wins = (x[:, None, :] > y[None, :, :]).mean(axis=(0, 1))
    ties = (x[:, None, :] == y[None, :, :]).mean(axis=(0, 1))
    return float(np.mean(wins + 0.5 * ties))


def probability_of_improvement_ci(
    x: np.ndarray,
    y: np.ndarray,
    *,
    rng: np.random.Generator,
    reps: int = 2000,
    confidence: float = 0.95,
) -> Interval:
    """``P(X > Y)`` with a percentile bootstrap CI: each replicate resamples the runs of X
    and of Y within each task, independently (X's draws first, then Y's). No interval (NaN
    bounds) when either has a single run."""
    x, y = score_matrix(x), score_matrix(y)
    if x.shape[1] != y.shape[1]:
        raise ValueError(f"x and y cover different numbers of tasks: {x.shape[1]} vs {y.shape[1]}")
    if min(x.shape[0], y.shape[0]) < 2:
        return Interval(probability_of_improvement(x, y), float("nan"), float("nan"))
    x_index = rng.integers(0, x.shape[0], size=(reps, *x.shape))
    y_index = rng.integers(0, y.shape[0], size=(reps, *y.shape))
    values = [probability_of_improvement(np.take_along_axis(x, xi, axis=0),
                                         np.take_along_axis(y, yi, axis=0))
              for xi, yi in zip(x_index, y_index, strict=True)]
    low, high = percentile_bounds(np.array(values), confidence)
    return Interval(probability_of_improvement(x, y), float(low), float(high))


def mean_ci_t(values: np.ndarray, confidence: float = 0.95) -> Interval | None:
    """Student-t confidence interval of the mean of ``values`` (None below 2 values).

    With the 3-5 seeds RL papers run, a percentile bootstrap of the mean is too narrow
    (about 0.6x the t-interval at n=5); the t-interval keeps its coverage there.
    """
    from scipy import stats

    values = np.asarray(values, dtype=np.float64).reshape(-1)
    mean = float(values.mean()) if values.size else float("nan")
    if values.size < 2:
        return None
    half = float(stats.t.ppf(0.5 + confidence / 2, values.size - 1)
                 * values.std(ddof=1) / np.sqrt(values.size))
    return Interval(mean, mean - half, mean + half)
