"""The paired throughput gate's test: rounds of base and candidate, judged on their ratios.

Each round times a benchmark once on the base and once on the candidate, one right after
the other on one machine, and gives ``d = log(candidate time / base time)``. The machine's
drift over minutes (another process, a clock that changes) moves both times of a round
alike and cancels in ``d``; what is left is the change and the noise of a fraction of a
second. With ``m`` benchmarks judged at the family-wise level ``alpha`` and the minimal
effect ``delta`` (a fractional slowdown, 0.10 for 10%):

- **SLOWER** when the one-sided exact Wilcoxon signed-rank test finds the ``d`` centred
  above 0 (p < alpha / m, Bonferroni) *and* the Hodges-Lehmann estimate of the slowdown
  (the median of the Walsh averages of ``d``) is more than half the minimal effect, as the
  learning gate asks for half of its delta: a tiny but significant difference (a process's
  memory layout, many rounds) does not fail a build. **FASTER** symmetrically.
- **NOISY** when neither holds and the rounds could not have caught a slowdown of
  ``delta`` with probability ``POWER``; the report gives the rounds that would.
- **PASS** otherwise.

Power is a normal approximation with the ``d``'s robust scale taken as the true one: the
Hodges-Lehmann estimate has standard error ``sigma * sqrt(pi / (3 n))`` for normal ``d``,
the test rejects about where the estimate exceeds ``z(1 - alpha/m) * se``, so a true
slowdown ``D`` is flagged with probability ``POWER`` when
``D >= max(half delta, z_crit * se) + z(POWER) * se``.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass
from statistics import NormalDist

import numpy as np

__all__ = ["POWER", "VERDICTS", "PairedVerdict", "hodges_lehmann", "judge_pairs",
           "robust_scale", "wilcoxon_greater"]

POWER = 0.8
VERDICTS = ("SLOWER", "FASTER", "NOISY", "PASS")
MAX_ROUNDS_NEEDED = 100_000  # past this the report says "more than" instead of a count
_NORMAL = NormalDist()


def wilcoxon_greater(d: np.ndarray) -> float:
    """The exact one-sided p-value of Wilcoxon's signed-rank test that ``d`` is centred
    above 0. Zeros are dropped (Wilcoxon's rule); tied magnitudes get their mean rank,
    and the null distribution is computed for those ranks, so ties stay exact."""
    d = np.asarray(d, dtype=np.float64)
    d = d[d != 0]
    if d.size == 0:
        return 1.0
    magnitude = np.abs(d)
    order = np.argsort(magnitude, kind="stable")
    ranks = np.empty(d.size)
    sorted_magnitude = magnitude[order]
    start = 0
    while start < d.size:
        end = start
        while end + 1 < d.size and sorted_magnitude[end + 1] == sorted_magnitude[start]:
            end += 1
        ranks[order[start:end + 1]] = (start + end) / 2 + 1
        start = end + 1
    doubled = np.rint(2 * ranks).astype(np.int64)  # mean ranks are whole or halves
    observed = int(doubled[d > 0].sum())
    # the null: each rank's sign is a fair coin; the distribution of the doubled sum
    distribution = np.zeros(int(doubled.sum()) + 1)
    distribution[0] = 1.0
    for rank in doubled:
        shifted = np.zeros_like(distribution)
        shifted[rank:] = distribution[:-rank]
        distribution = 0.5 * (distribution + shifted)
    return float(min(1.0, distribution[observed:].sum()))


def _walsh_averages(d: np.ndarray) -> np.ndarray:
    i, j = np.triu_indices(d.size)
    return np.sort((d[i] + d[j]) / 2)


def hodges_lehmann(d: np.ndarray) -> float:
    """The median of the Walsh averages ``(d_i + d_j) / 2, i <= j``: the centre that
    Wilcoxon's test tests, robust to a round that a moment of load spoiled."""
    return float(np.median(_walsh_averages(np.asarray(d, dtype=np.float64))))


def _interval(d: np.ndarray, level: float) -> tuple[float, float]:
    """The distribution-free interval of the centre that goes with Wilcoxon's test: order
    statistics of the Walsh averages (normal approximation of the rank count)."""
    walsh, n = _walsh_averages(d), d.size
    z = _NORMAL.inv_cdf(0.5 + level / 2)
    k = math.floor(n * (n + 1) / 4 - z * math.sqrt(n * (n + 1) * (2 * n + 1) / 24))
    k = min(max(k, 0), walsh.size - 1)
    return float(walsh[k]), float(walsh[walsh.size - 1 - k])


def robust_scale(d: np.ndarray) -> float:
    """The standard deviation a normal sample with this median absolute deviation has
    (1.4826 MAD): a round spoiled by a moment of load does not inflate it."""
    d = np.asarray(d, dtype=np.float64)
    return float(1.4826 * np.median(np.abs(d - np.median(d))))


@dataclass(frozen=True)
class PairedVerdict:
    """One benchmark's judgement. Times are medians over the rounds, in seconds per call;
    ``speed_ratio`` is base time over candidate time (above 1: the candidate is faster),
    with its 95% interval; ``detectable`` is the smallest slowdown (a fraction) these
    rounds catch with probability ``POWER``; ``rounds_needed`` is how many would catch
    ``delta`` (``None`` when these did)."""

    name: str
    rounds: int
    base_seconds: float
    candidate_seconds: float
    speed_ratio: float
    speed_low: float
    speed_high: float
    p_slower: float
    p_faster: float
    detectable: float
    rounds_needed: int | None
    verdict: str

    def to_dict(self) -> dict:
        return asdict(self)


def _rounds_needed(sigma: float, bar: float, z_crit: float, effect: float) -> int:
    """The fewest rounds whose rule flags a true slowdown of ``effect`` (log) with
    probability ``POWER``."""
    z_power = _NORMAL.inv_cdf(POWER)
    se_allowed = min((effect - bar) / z_power, effect / (z_crit + z_power))
    if sigma == 0:
        return 2
    return min(MAX_ROUNDS_NEEDED + 1,
               max(2, math.ceil(math.pi / 3 * (sigma / se_allowed) ** 2)))


def judge_pairs(name: str, base: np.ndarray, candidate: np.ndarray, *, delta: float,
                alpha: float) -> PairedVerdict:
    """Judge one benchmark from its rounds' times (``base[i]`` and ``candidate[i]`` timed
    in round ``i``) at level ``alpha`` (already divided among the benchmarks) and minimal
    effect ``delta`` (a fractional slowdown)."""
    base = np.asarray(base, dtype=np.float64)
    candidate = np.asarray(candidate, dtype=np.float64)
    if base.shape != candidate.shape or base.ndim != 1 or base.size < 2:
        raise ValueError("judge_pairs needs two rounds or more, one time of each side each")
    if not (np.all(base > 0) and np.all(candidate > 0)):
        raise ValueError("times must be positive")
    d = np.log(candidate / base)
    n = d.size
    centre = hodges_lehmann(d)
    low, high = _interval(d, 0.95)
    p_slower, p_faster = wilcoxon_greater(d), wilcoxon_greater(-d)
    effect = math.log1p(delta)
    bar = effect / 2
    sigma = robust_scale(d)
    se = sigma * math.sqrt(math.pi / (3 * n))
    z_crit, z_power = _NORMAL.inv_cdf(1 - alpha), _NORMAL.inv_cdf(POWER)
    detectable = max(bar, z_crit * se) + z_power * se
    if p_slower < alpha and centre > bar:
        verdict = "SLOWER"
    elif p_faster < alpha and centre < -bar:
        verdict = "FASTER"
    elif detectable > effect:
        verdict = "NOISY"
    else:
        verdict = "PASS"
    needed = None if detectable <= effect else _rounds_needed(sigma, bar, z_crit, effect)
    return PairedVerdict(
        name=name, rounds=n, base_seconds=float(np.median(base)),
        candidate_seconds=float(np.median(candidate)), speed_ratio=math.exp(-centre),
        speed_low=math.exp(-high), speed_high=math.exp(-low), p_slower=p_slower,
        p_faster=p_faster, detectable=math.expm1(detectable), rounds_needed=needed,
        verdict=verdict)
