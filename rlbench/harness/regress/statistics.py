"""The regression gate's test: candidate seeds against reference seeds, one task at a time.

Higher scores are better. For a task with minimal effect ``delta`` (the smallest change of
the mean final score that matters) and level ``alpha``:

- **REGRESSION** when a one-sided Welch t-test finds the candidate's mean below the
  reference's (p < alpha) *and* the observed drop is larger than ``delta``; **IMPROVEMENT**
  symmetrically. Requiring both keeps a tiny but significant change (many seeds) from
  failing a build, and keeps a large drop that noise explains from failing it either.
- **UNDERPOWERED** when neither holds and the seeds could not have told a drop of ``delta``
  from noise: the t-test's power at ``delta`` is under ``POWER`` (Colas et al., 2018, "How
  Many Random Seeds?"). The report then gives the seeds per side that would reach it.
- **PASS** otherwise.

Power is computed with the samples' standard error taken as the true one (as Colas et al.
do): a drop ``D`` is caught when ``mean drop > max(delta, t_crit * se)``, which happens with
probability ``T_df.cdf((D - max(delta, t_crit * se)) / se)``; the smallest drop caught with
probability ``POWER`` is ``max(delta, t_crit * se) + t_POWER * se``.
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
    vc, vr = c.var(ddof=1) / c.size, r.var(ddof=1) / r.size
    se = math.sqrt(vc + vr)
    if se == 0:
        return Welch(float(c.mean() - r.mean()), 0.0, float(c.size + r.size - 2))
    df = (vc + vr) ** 2 / (vc**2 / (c.size - 1) + vr**2 / (r.size - 1))
    return Welch(float(c.mean() - r.mean()), se, float(df))


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
    ci_low: float  # bootstrap interval of the difference
    ci_high: float
    p_worse: float  # one-sided p-value of "the candidate is worse"
    p_better: float
    power: float  # the t-test's power to find a drop of delta at alpha
    detectable_drop: float  # the smallest drop the gate flags with probability POWER
    seeds_needed: int | None  # seeds per side for POWER at delta; None: no variation seen

    def as_dict(self) -> dict[str, float | int | str | None]:
        return asdict(self)


def _seeds_needed(std: float, delta: float, alpha: float) -> int | None:
    """Seeds per side (both the same count) at which a one-sided Welch test at ``alpha``
    finds a drop of ``delta`` with probability ``POWER``, for scores of std ``std``:
    Colas et al.'s iteration of ``n = 2 (t_crit + t_power)^2 std^2 / delta^2``."""
    # deferred: scipy.stats is slow to import; only the gate needs it
    from scipy import stats

    if std == 0:
        return None
    for n in range(2, MAX_SEEDS_NEEDED + 1):
        df = 2 * (n - 1)
        se = std * math.sqrt(2 / n)
        if (stats.t.ppf(1 - alpha, df) + stats.t.ppf(POWER, df)) * se <= delta:
            return n
    return MAX_SEEDS_NEEDED + 1


def judge_task(candidate: np.ndarray, reference: np.ndarray, *, delta: float, alpha: float,
              seed: int = 0) -> TaskVerdict:
    """The verdict on one task's final scores (see the module docstring)."""
    # deferred: scipy.stats is slow to import; only the gate needs it
    from scipy import stats

    if not delta > 0:
        raise ValueError(f"delta must be positive, got {delta}")
    if not 0 < alpha < 1:
        raise ValueError(f"alpha must be in (0, 1), got {alpha}")
    w = welch(candidate, reference)
    if w.se == 0:
        p_worse = 0.0 if w.difference < 0 else 1.0
        p_better = 0.0 if w.difference > 0 else 1.0
        power, detectable = 1.0, delta
    else:
        t = w.difference / w.se
        p_worse, p_better = float(stats.t.cdf(t, w.df)), float(stats.t.sf(t, w.df))
        t_crit = float(stats.t.ppf(1 - alpha, w.df))
        power = float(stats.t.cdf(delta / w.se - t_crit, w.df))
        detectable = max(delta, t_crit * w.se) + float(stats.t.ppf(POWER, w.df)) * w.se
    if p_worse < alpha and -w.difference > delta:
        verdict = "REGRESSION"
    elif p_better < alpha and w.difference > delta:
        verdict = "IMPROVEMENT"
    elif power < POWER:
        verdict = "UNDERPOWERED"
    else:
        verdict = "PASS"
    c = np.asarray(candidate, dtype=np.float64)
    r = np.asarray(reference, dtype=np.float64)
    pooled = math.sqrt(((c.size - 1) * c.var(ddof=1) + (r.size - 1) * r.var(ddof=1))
                       / (c.size + r.size - 2))
    low, high = bootstrap_difference_ci(c, r, seed=seed)
    return TaskVerdict(verdict, w.difference, low, high, p_worse, p_better, power, detectable,
                    _seeds_needed(pooled, delta, alpha))
