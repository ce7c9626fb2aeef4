"""The regression gate's test: candidate seeds against reference seeds, one task at a time.

Higher scores are better. Each task has a minimal effect ``delta``: the smallest drop of
the mean final score that matters, the drop the gate must catch with probability
``POWER``. With ``alpha`` the task's level:

- **REGRESSION** when a one-sided Welch t-test finds the candidate's mean below the
  reference's (p < alpha) *and* the observed drop is more than half the minimal effect;
  **IMPROVEMENT** symmetrically. The second condition keeps a tiny but significant change
  (many seeds, little noise) from failing a build; it asks for half of ``delta``, not all
  of it, because a true drop of exactly ``delta`` shows as less than ``delta`` half the
  time, and the gate must catch it far more often than that.
- **UNDERPOWERED** when neither holds and the seeds could not have caught a drop of
  ``delta`` with probability ``POWER`` (as Colas et al., 2018, "How Many Random Seeds?",
  size a comparison); the report gives the seeds per side that would.
- **PASS** otherwise.

Power is that of the whole rule, with the samples' variances taken as the true ones (as
Colas et al. do): a true drop ``D`` is flagged when the observed drop exceeds
``bar = max(delta / 2, t_crit * se)``, which happens with probability
``T_df.cdf((D - bar) / se)``; the smallest drop flagged with probability ``POWER`` is
``bar + t_POWER * se``.

Apart from ``analysis/statistics.py``, whose aggregates describe runs across tasks for
reports: nothing here is computed there (its seed count, ``seeds_to_detect``, is a normal
approximation for an observed effect; ``_seeds_needed`` is this rule's power at ``delta``).
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass

import numpy as np

__all__ = ["POWER", "VERDICTS", "TaskVerdict", "bootstrap_difference_ci", "judge_task",
           "welch"]

POWER = 0.8
VERDICTS = ("REGRESSION", "IMPROVEMENT", "UNDERPOWERED", "PASS")
MAX_SEEDS_NEEDED = 10_000  # past this the report says "more than" instead of a count
MAX_SCORE = 1e100  # at or beyond it no return (as the store reads it); below, squares are finite


@dataclass(frozen=True)
class Welch:
    """Welch's t statistic of ``mean(candidate) - mean(reference)``."""

    difference: float
    se: float
    df: float


def welch(candidate: np.ndarray, reference: np.ndarray) -> Welch:
    """The difference of means, its standard error and Welch-Satterthwaite degrees of
    freedom. Both samples need 2 values; when neither varies, ``se`` is 0 and ``df`` is
    the pooled count (the difference is then known exactly)."""
    c = np.asarray(candidate, dtype=np.float64)
    r = np.asarray(reference, dtype=np.float64)
    if c.size < 2 or r.size < 2:
        raise ValueError(f"the t-test needs 2 seeds on each side, got {c.size} and {r.size}")
    var_c, var_r = float(c.var(ddof=1)), float(r.var(ddof=1))
    se = math.sqrt(var_c / c.size + var_r / r.size)
    if se == 0:
        return Welch(float(c.mean() - r.mean()), 0.0, float(c.size + r.size - 2))
    return Welch(float(c.mean() - r.mean()), se, _welch_df(var_c, var_r, c.size, r.size))


def bootstrap_difference_ci(candidate: np.ndarray, reference: np.ndarray, *,
                            confidence: float = 0.95, reps: int = 10_000, seed: int = 0
                            ) -> tuple[float, float]:
    """Percentile bootstrap interval of ``mean(candidate) - mean(reference)``: each side
    resampled with replacement on its own, ``reps`` times, from ``seed``."""
    c = np.asarray(candidate, dtype=np.float64)
    r = np.asarray(reference, dtype=np.float64)
    rng = np.random.default_rng(seed)
    means_c = c[rng.integers(0, c.size, size=(reps, c.size))].mean(axis=1)
    means_r = r[rng.integers(0, r.size, size=(reps, r.size))].mean(axis=1)
    tail = (1 - confidence) / 2
    low, high = np.quantile(means_c - means_r, [tail, 1 - tail])
    return float(low), float(high)


@dataclass(frozen=True)
class TaskVerdict:
    """The gate's numbers for one task: its verdict and why."""

    verdict: str
    difference: float  # mean(candidate) - mean(reference)
    ci_low: float  # bootstrap interval of the difference, two-sided at 1 - 2 alpha
    ci_high: float
    p_worse: float  # one-sided p-value of "the candidate is worse"
    p_better: float
    power: float  # the probability that the gate flags a true drop of delta
    detectable_drop: float  # the smallest drop the gate flags with probability POWER
    seeds_needed: int | None  # seeds per side for POWER at delta; None: no variation seen

    def as_dict(self) -> dict[str, float | int | str | None]:
        return asdict(self)


def _power(drop: float, delta: float, se: float, df: float, alpha: float) -> float:
    """The probability that the rule flags a true ``drop`` (see the module docstring)."""
    # deferred: scipy.stats is slow to import; only the gate needs it
    from scipy import stats

    bar = max(delta / 2, float(stats.t.ppf(1 - alpha, df)) * se)
    return float(stats.t.cdf((drop - bar) / se, df))


def _welch_df(var_c: float, var_r: float, n_c: int, n_r: int) -> float:
    """Welch-Satterthwaite degrees of freedom, from each side's share of the variance of
    the difference: scale-free, so scores near ``MAX_SCORE`` square no variance past a
    float's range."""
    a, b = var_c / n_c, var_r / n_r
    share_c, share_r = a / (a + b), b / (a + b)
    return 1 / (share_c**2 / (n_c - 1) + share_r**2 / (n_r - 1))


def _seeds_needed(var_c: float, var_r: float, delta: float, alpha: float) -> int | None:
    """Seeds per side (the same count on both) at which the rule flags a true drop of
    ``delta`` with probability ``POWER``, for the two sides' variances as measured."""
    if var_c + var_r == 0:
        return None
    for n in range(2, MAX_SEEDS_NEEDED + 1):
        se = math.sqrt((var_c + var_r) / n)
        if _power(delta, delta, se, _welch_df(var_c, var_r, n, n), alpha) >= POWER:
            return n
    return MAX_SEEDS_NEEDED + 1


def bootstrap_confidence(alpha: float) -> float:
    """The two-sided interval that matches a one-sided test at ``alpha``."""
    return 1 - 2 * alpha


def judge_task(candidate: np.ndarray, reference: np.ndarray, *, delta: float, alpha: float,
               seed: int = 0) -> TaskVerdict:
    """The verdict on one task's final scores (see the module docstring)."""
    # deferred: scipy.stats is slow to import; only the gate needs it
    from scipy import stats

    if not (math.isfinite(delta) and delta > 0):
        raise ValueError(f"delta must be positive, got {delta}")
    if not 0 < alpha < 0.5:
        raise ValueError(f"alpha must be in (0, 0.5), got {alpha}")
    c = np.asarray(candidate, dtype=np.float64)
    r = np.asarray(reference, dtype=np.float64)
    if not (np.all(np.abs(c) < MAX_SCORE) and np.all(np.abs(r) < MAX_SCORE)):
        raise ValueError(f"scores must be finite numbers within ±{MAX_SCORE:g}")
    w = welch(c, r)
    if w.se == 0:
        p_worse = 0.0 if w.difference < 0 else 1.0
        p_better = 0.0 if w.difference > 0 else 1.0
        power, detectable = 1.0, delta / 2
    else:
        t = w.difference / w.se
        p_worse, p_better = float(stats.t.cdf(t, w.df)), float(stats.t.sf(t, w.df))
        power = _power(delta, delta, w.se, w.df, alpha)
        bar = max(delta / 2, float(stats.t.ppf(1 - alpha, w.df)) * w.se)
        detectable = bar + float(stats.t.ppf(POWER, w.df)) * w.se
    if p_worse < alpha and -w.difference > delta / 2:
        verdict = "REGRESSION"
    elif p_better < alpha and w.difference > delta / 2:
        verdict = "IMPROVEMENT"
    elif power < POWER:
        verdict = "UNDERPOWERED"
    else:
        verdict = "PASS"
    low, high = bootstrap_difference_ci(c, r, confidence=bootstrap_confidence(alpha), seed=seed)
    return TaskVerdict(verdict, w.difference, low, high, p_worse, p_better, power, detectable,
                       _seeds_needed(float(c.var(ddof=1)), float(r.var(ddof=1)), delta, alpha))
