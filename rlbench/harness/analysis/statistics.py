"""Aggregate statistics over seeds and tasks, with bootstrap confidence intervals.

The measures of Agarwal et al. (2021), "Deep RL at the Edge of the Statistical Precipice"
(what the ``rliable`` library computes; ``rliable`` 1.2 does not import beside pandas 3):
interquartile mean, median, mean and optimality gap of normalized scores, percentile
bootstrap CIs that resample runs within each task (stratified), performance profiles and
the probability of improvement. Scores are arrays ``[runs, tasks]``, or a list with one
array of runs per task when tasks ran different numbers of seeds ("ragged": every run is
used, and each task weighs the same); every random draw comes from a
``numpy.random.Generator`` seeded by the caller. With as many runs in every task, a list
gives exactly what the matrix gives. The bands the plots and the site draw (a learning
curve's, a performance profile's) are these bootstraps too.

Apart from ``regress/statistics.py``: these describe runs across tasks for reports; the
gate decides one task between two seed sets, by a Welch test and its power, used nowhere else.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np

__all__ = [
    "AGGREGATES",
    "Interval",
    "Scores",
    "as_tasks",
    "curve_band",
    "expanded_confidence",
    "iqm",
    "labelled_rng",
    "mean_ci_t",
    "mean_score",
    "median_of_task_means",
    "normalize",
    "optimality_gap",
    "percentile_bounds",
    "performance_profile",
    "performance_profile_band",
    "probability_of_improvement",
    "probability_of_improvement_ci",
    "score_matrix",
    "seeds_to_detect",
    "statistic_of_each",
    "stratified_bootstrap_ci",
]

Scores = np.ndarray | list[np.ndarray]  # [runs, tasks], or one array of runs per task
Statistic = Callable[[Scores], float]


def labelled_rng(seed: int, *labels: str) -> np.random.Generator:
    """A generator for one statistic, seeded by ``seed`` and the statistic's labels: adding
    a statistic never shifts another's draws, and the same store gives the same report."""
    digest = hashlib.sha256("\0".join(labels).encode()).digest()
    return np.random.default_rng([seed, int.from_bytes(digest[:8], "little")])


def as_tasks(scores: Scores, owner: str = "") -> list[np.ndarray]:
    """``scores`` as one non-empty float64 array of runs per task."""
    if isinstance(scores, list | tuple):
        tasks = [np.asarray(t, dtype=np.float64).reshape(-1) for t in scores]
        if not tasks or any(t.size == 0 for t in tasks):
            prefix = f"{owner}: " if owner else ""
            raise ValueError(f"{prefix}every task needs at least one run, got "
                             f"{[t.size for t in tasks]}")
        return tasks
    matrix = score_matrix(scores, owner)
    return [matrix[:, i] for i in range(matrix.shape[1])]


def _matrix_if_even(scores: Scores) -> np.ndarray | None:
    """``scores`` as ``[runs, tasks]`` when every task has as many runs, else None."""
    if not isinstance(scores, list | tuple):
        return score_matrix(scores)
    tasks = as_tasks(scores)
    if len({t.size for t in tasks}) == 1:
        return np.stack(tasks, axis=1)
    return None


def _weighted_iqm(tasks: list[np.ndarray]) -> float:
    """The interquartile mean when each task weighs the same and its runs share its weight:
    the mean of the weighted quantile function over [0.25, 0.75]."""
    values = np.concatenate(tasks)
    weights = np.concatenate([np.full(t.size, 1.0 / (t.size * len(tasks))) for t in tasks])
    order = np.argsort(values, kind="stable")
    values, weights = values[order], weights[order]
    ends = np.cumsum(weights)
    starts = ends - weights
    inside = np.clip(np.minimum(ends, 0.75) - np.maximum(starts, 0.25), 0.0, None)
    return float((values * inside).sum() / inside.sum())


def iqm(scores: Scores) -> float:
    """Interquartile mean of all entries: the mean of the middle 50% after sorting.

    ``floor(n / 4)`` values are cut from each end (``scipy.stats.trim_mean(x, 0.25)``).
    Ragged scores take the middle 50% of the weight, each task weighing the same.
    NaN if any score is NaN (sorting would move it to an end and cut it unseen).
    """
    matrix = _matrix_if_even(scores) if isinstance(scores, list | tuple) else scores
    if matrix is None:
        tasks = as_tasks(scores)
        return float("nan") if any(np.isnan(t).any() for t in tasks) else _weighted_iqm(tasks)
    flat = np.sort(np.asarray(matrix, dtype=np.float64), axis=None)
    if np.isnan(flat).any():
        return float("nan")
    cut = int(0.25 * flat.size)
    return float(flat[cut:flat.size - cut].mean())


def optimality_gap(scores: Scores, threshold: float = 1.0) -> float:
    """How far scores fall short of ``threshold`` on average: ``mean(max(threshold - x, 0))``
    (per task, then over tasks, for ragged scores)."""
    matrix = _matrix_if_even(scores)
    if matrix is None:
        return float(np.mean([np.maximum(threshold - t, 0.0).mean() for t in as_tasks(scores)]))
    return float(np.mean(np.maximum(threshold - matrix, 0.0)))


def mean_score(scores: Scores) -> float:
    """Mean of all scores (of the task means, for ragged scores)."""
    matrix = _matrix_if_even(scores)
    if matrix is None:
        return float(np.mean([t.mean() for t in as_tasks(scores)]))
    return float(np.mean(matrix))


def median_of_task_means(scores: Scores) -> float:
    """Median over tasks of each task's mean score (rliable's ``aggregate_median``)."""
    matrix = _matrix_if_even(scores)
    if matrix is None:
        return float(np.median([t.mean() for t in as_tasks(scores)]))
    return float(np.median(matrix.mean(axis=0)))


def _iqm_of_each(samples: np.ndarray) -> np.ndarray:
    flat = np.sort(samples.reshape(samples.shape[0], -1), axis=1)
    cut = int(0.25 * flat.shape[1])
    values = flat[:, cut:flat.shape[1] - cut].mean(axis=1)
    values[np.isnan(flat).any(axis=1)] = np.nan
    return values


# Each aggregate over a stack of even samples ``[reps, runs, tasks]`` at once, with the
# operations, in the order, that the aggregate applies to one sample: the same numbers, bit
# for bit (``test_statistics`` checks), without a Python call per bootstrap replicate.
_OF_EACH: dict[Callable[..., float], Callable[[np.ndarray], np.ndarray]] = {
    iqm: _iqm_of_each,
    median_of_task_means: lambda s: np.median(s.mean(axis=1), axis=1),
    mean_score: lambda s: s.reshape(s.shape[0], -1).mean(axis=1),
    optimality_gap: lambda s: np.maximum(1.0 - s, 0.0).reshape(s.shape[0], -1).mean(axis=1),
}


def statistic_of_each(statistic: Statistic, samples: np.ndarray) -> np.ndarray:
    """``statistic`` of each even sample of ``samples`` ``[reps, runs, tasks]``."""
    batched = _OF_EACH.get(statistic)
    if batched is None:
        return np.array([statistic(sample) for sample in samples])
    return batched(np.ascontiguousarray(samples, dtype=np.float64))


AGGREGATES: dict[str, Statistic] = {
    "iqm": iqm,
    "median": median_of_task_means,
    "mean": mean_score,
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


def expanded_confidence(runs_per_task: Sequence[int], confidence: float = 0.95) -> float:
    """The percentile level an expanded percentile bootstrap takes for a ``confidence``
    interval (Hesterberg, 2015, "What teachers should know about the bootstrap").

    A bootstrap sees each task's spread with divisor n, not n - 1, and the normal tails
    where Student's t holds: at 3-10 seeds a plain "95%" percentile interval covers 87-91%
    (simulated, 5 tasks). Widening the percentiles to ``z = sqrt(n / (n - 1)) * t_df`` with
    n the fewest runs of a task and df = sum(n_task - 1) brings it back to about 95%
    (tests/harness/analysis/test_statistics.py measures it).
    """
    # deferred: scipy.stats is slow to import; only some statistics need it
    from scipy import stats

    fewest = min(runs_per_task)
    if fewest < 2:
        return confidence
    df = sum(n - 1 for n in runs_per_task)
    z = np.sqrt(fewest / (fewest - 1)) * stats.t.ppf(0.5 + confidence / 2, df)
    return float(1 - 2 * stats.norm.sf(z))


def stratified_bootstrap_ci(
    scores: Scores,
    statistic: Statistic,
    *,
    rng: np.random.Generator,
    reps: int = 2000,
    confidence: float = 0.95,
    expand: bool = False,
) -> Interval:
    """Percentile bootstrap CI of ``statistic(scores)``; runs are resampled within each task.

    ``scores`` is ``[runs, tasks]`` (a 1-D array is one task) or ragged. Each replicate
    draws, for every task independently, as many runs as it has with replacement. A task
    with a single run leaves no interval (NaN bounds). ``expand`` widens the percentiles
    to hold ``confidence`` at few runs per task (``expanded_confidence``); without it the
    interval is rliable's.
    """
    if expand:
        confidence = expanded_confidence([t.size for t in as_tasks(scores)], confidence)
    matrix = _matrix_if_even(scores)
    if matrix is None:  # ragged: each task's runs resampled on their own
        tasks = as_tasks(scores)
        if min(t.size for t in tasks) < 2:
            return Interval(statistic(tasks), float("nan"), float("nan"))
        draws = [t[rng.integers(0, t.size, size=(reps, t.size))] for t in tasks]
        values = np.array([statistic([d[i] for d in draws]) for i in range(reps)])
        low, high = percentile_bounds(values, confidence)
        return Interval(statistic(tasks), float(low), float(high))
    runs, tasks = matrix.shape
    if runs < 2:
        return Interval(statistic(matrix), float("nan"), float("nan"))
    index = rng.integers(0, runs, size=(reps, runs, tasks))
    resampled = np.take_along_axis(matrix[None], index, axis=1)
    values = statistic_of_each(statistic, resampled)
    low, high = percentile_bounds(values, confidence)
    return Interval(statistic(matrix), float(low), float(high))


def performance_profile(scores: Scores, thresholds: np.ndarray) -> np.ndarray:
    """Fraction of all runs scoring above each threshold (the run-score distribution); for
    ragged scores each task's fraction, averaged over tasks."""
    taus = np.asarray(thresholds, dtype=np.float64)[:, None]
    matrix = _matrix_if_even(scores)
    if matrix is None:
        return np.mean([(t[None, :] > taus).mean(axis=1) for t in as_tasks(scores)], axis=0)
    flat = matrix.reshape(-1)
    return (flat[None, :] > taus).mean(axis=1)


def curve_band(
    returns: np.ndarray,
    *,
    rng: np.random.Generator,
    reps: int = 2000,
    confidence: float = 0.95,
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Mean over seeds of ``returns`` ``[seeds, T]`` and its percentile bootstrap CI per frame.

    Seeds are resampled whole (one draw ``rng.integers(0, seeds, size=(reps, seeds))`` serves
    every frame), so at each frame the interval is what
    ``stratified_bootstrap_ci(returns[:, t], np.mean, rng=...)`` gives from the same generator
    state, computed for all frames at once. One seed gives ``low == high == mean``.
    """
    matrix = np.asarray(returns, dtype=np.float64)
    if matrix.ndim != 2 or matrix.shape[0] < 1:
        raise ValueError(f"returns must be [seeds, frames], got shape {matrix.shape}")
    seeds = matrix.shape[0]
    index = rng.integers(0, seeds, size=(reps, seeds))
    # how often each seed is drawn in each resample, [reps, seeds]: one bincount over all
    # resamples at once, each offset into its own row (memory reps × seeds, not × seeds²)
    rows = index + np.arange(reps)[:, None] * seeds
    counts = np.bincount(rows.ravel(), minlength=reps * seeds).reshape(reps, seeds)
    means = counts @ matrix / seeds  # [reps, T]: the mean of each resample at each frame
    low, high = percentile_bounds(means, confidence, axis=0)
    return matrix.mean(axis=0), low, high


def performance_profile_band(
    scores: Scores,
    thresholds: np.ndarray,
    *,
    rng: np.random.Generator,
    reps: int = 2000,
    confidence: float = 0.95,
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Performance profile of ``scores`` (``[runs, tasks]`` or ragged) at ``thresholds``,
    with its CI.

    The band is a stratified percentile bootstrap (runs resampled within each task) with the
    draws of ``stratified_bootstrap_ci``: at each threshold it gives what that function gives
    for the statistic "fraction of runs above the threshold" from the same generator state.
    """
    taus = np.asarray(thresholds, dtype=np.float64)
    tasks = as_tasks(scores)
    if len({t.size for t in tasks}) > 1:  # ragged: each task's runs resampled on their own
        draws = [t[rng.integers(0, t.size, size=(reps, t.size))] for t in tasks]
        profiles = np.stack([performance_profile([d[i] for d in draws], taus)
                             for i in range(reps)])
        low, high = percentile_bounds(profiles, confidence, axis=0)
        return performance_profile(tasks, taus), low, high
    matrix = np.stack(tasks, axis=1)
    runs, n_tasks = matrix.shape
    index = rng.integers(0, runs, size=(reps, runs, n_tasks))
    resampled = np.take_along_axis(matrix[None], index, axis=1)
    profiles = np.stack([performance_profile(sample, taus) for sample in resampled])
    low, high = percentile_bounds(profiles, confidence, axis=0)
    return performance_profile(matrix, taus), low, high


def probability_of_improvement(x: Scores, y: Scores) -> float:
    """``P(X > Y)``: for each task the chance a run of X beats a run of Y (ties count half),
    averaged over tasks. ``x`` and ``y`` cover the same tasks, with any numbers of runs.
    NaN if any score is NaN: a NaN run neither wins nor loses."""
    xs, ys = as_tasks(x), as_tasks(y)
    if len(xs) != len(ys):
        raise ValueError(f"x and y cover different numbers of tasks: {len(xs)} vs {len(ys)}")
    if any(np.isnan(t).any() for t in (*xs, *ys)):
        return float("nan")
    per_task = [(a[:, None] > b[None, :]).mean() + 0.5 * (a[:, None] == b[None, :]).mean()
                for a, b in zip(xs, ys, strict=True)]
    return float(np.mean(per_task))


def probability_of_improvement_ci(
    x: Scores,
    y: Scores,
    *,
    rng: np.random.Generator,
    reps: int = 2000,
    confidence: float = 0.95,
    expand: bool = False,
) -> Interval:
    """``P(X > Y)`` with a percentile bootstrap CI: each replicate resamples the runs of X
    and of Y within each task, independently (X's draws first, then Y's). No interval (NaN
    bounds) when a task of either has a single run, or a score is NaN. ``expand`` widens
    the percentiles as ``stratified_bootstrap_ci`` does, by the fewer runs of the two."""
    if expand:
        fewer = [min(a.size, b.size) for a, b in zip(as_tasks(x), as_tasks(y), strict=False)]
        confidence = expanded_confidence(fewer, confidence)
    point = probability_of_improvement(x, y)
    x_even, y_even = _matrix_if_even(x), _matrix_if_even(y)
    if x_even is None or y_even is None:  # ragged: each task's runs resampled on their own
        xs, ys = as_tasks(x), as_tasks(y)
        if min(t.size for t in (*xs, *ys)) < 2 or np.isnan(point):
            return Interval(point, float("nan"), float("nan"))
        x_draws = [t[rng.integers(0, t.size, size=(reps, t.size))] for t in xs]
        y_draws = [t[rng.integers(0, t.size, size=(reps, t.size))] for t in ys]
        values = [probability_of_improvement([d[i] for d in x_draws], [d[i] for d in y_draws])
                  for i in range(reps)]
        low, high = percentile_bounds(np.array(values), confidence)
        return Interval(point, float(low), float(high))
    x, y = x_even, y_even
    if x.shape[1] != y.shape[1]:
        raise ValueError(f"x and y cover different numbers of tasks: {x.shape[1]} vs {y.shape[1]}")
    if min(x.shape[0], y.shape[0]) < 2 or np.isnan(point):
        return Interval(point, float("nan"), float("nan"))
    x_index = rng.integers(0, x.shape[0], size=(reps, *x.shape))
    y_index = rng.integers(0, y.shape[0], size=(reps, *y.shape))
    values = _improvement_of_each(np.take_along_axis(x[None], x_index, axis=1),
                                  np.take_along_axis(y[None], y_index, axis=1))
    low, high = percentile_bounds(values, confidence)
    return Interval(point, float(low), float(high))


def _improvement_of_each(xs: np.ndarray, ys: np.ndarray) -> np.ndarray:
    """``probability_of_improvement`` of each replicate of ``xs`` ``[reps, runs_x, tasks]``
    against ``ys``, the same numbers bit for bit, a block of replicates at a time (at most
    about 16M comparisons held at once)."""
    reps, runs_x, tasks = xs.shape
    block = max(1, 16_000_000 // (runs_x * ys.shape[1] * tasks))
    values = np.empty(reps)
    for start in range(0, reps, block):
        a = np.moveaxis(xs[start:start + block], 2, 1)[:, :, :, None]  # [r, tasks, x, 1]
        b = np.moveaxis(ys[start:start + block], 2, 1)[:, :, None, :]  # [r, tasks, 1, y]
        per_task = ((a > b).mean(axis=(2, 3)) + 0.5 * (a == b).mean(axis=(2, 3)))
        values[start:start + block] = per_task.mean(axis=1)
    values[np.isnan(xs).any(axis=(1, 2)) | np.isnan(ys).any(axis=(1, 2))] = np.nan
    return values


def mean_ci_t(values: np.ndarray, confidence: float = 0.95) -> Interval | None:
    """Student-t confidence interval of the mean of ``values`` (None below 2 values).

    With the 3-5 seeds RL papers run, a percentile bootstrap of the mean is too narrow
    (about 0.6x the t-interval at n=5); the t-interval keeps its coverage there.
    """
    # deferred: scipy.stats is slow to import; only some statistics need it
    from scipy import stats

    values = np.asarray(values, dtype=np.float64).reshape(-1)
    mean = float(values.mean()) if values.size else float("nan")
    if values.size < 2:
        return None
    half = float(stats.t.ppf(0.5 + confidence / 2, values.size - 1)
                 * values.std(ddof=1) / np.sqrt(values.size))
    return Interval(mean, mean - half, mean + half)


def seeds_to_detect(x: Scores, y: Scores, *, alpha: float = 0.05, power: float = 0.8
                    ) -> float | None:
    """Seeds per algorithm and task that a two-sided test at level ``alpha`` needs to find
    a difference of the observed size with probability ``power``.

    The observed size is the standardized mean difference of each task, ``(mean x - mean
    y) / s`` with ``s`` the pooled std of its runs, averaged over the tasks; with ``k``
    tasks the classic two-sample count ``2 (z_{1-alpha/2} + z_power)^2 / d^2`` is divided
    by ``k`` (a normal approximation, so a few seeds short where the count is small).
    ``inf`` for no difference; None when a task has fewer than 2 runs of either, a score
    is NaN, or the runs of a task do not vary at all.
    """
    # deferred: scipy.stats is slow to import; only some statistics need it
    from scipy import stats

    xs, ys = as_tasks(x), as_tasks(y)
    if len(xs) != len(ys):
        raise ValueError(f"x and y cover different numbers of tasks: {len(xs)} vs {len(ys)}")
    effects = []
    for a, b in zip(xs, ys, strict=True):
        if min(a.size, b.size) < 2 or np.isnan(a).any() or np.isnan(b).any():
            return None
        pooled = ((a.size - 1) * a.var(ddof=1) + (b.size - 1) * b.var(ddof=1)) / (
            a.size + b.size - 2)
        if pooled == 0:
            return None
        effects.append((a.mean() - b.mean()) / np.sqrt(pooled))
    effect = float(np.mean(effects))
    if effect == 0:
        return float("inf")
    z = stats.norm.ppf(1 - alpha / 2) + stats.norm.ppf(power)
    return float(np.ceil(2 * z**2 / (effect**2 * len(xs))))
