"""The paired throughput gate's test: rounds of base and candidate, judged on their ratios.

Each round times a benchmark once on the base and once on the candidate, one right after
the other on one machine, and gives ``d = log(candidate time / base time)``. The machine's
drift over minutes (another process, a clock that changes) moves both times of a round
alike and cancels in ``d``; what is left is the change and the noise of a fraction of a
second. With ``m`` benchmarks judged at the family-wise level ``alpha``, the slowdown
``delta`` the gate is sized to catch and the minimal effect ``min_effect`` (fractions:
0.20 for 20%):

- **SLOWER** when the one-sided exact Wilcoxon signed-rank test finds the ``d`` centred
  above 0 (p < alpha / m, Bonferroni) *and* the Hodges-Lehmann estimate of the slowdown
  (the median of the Walsh averages of ``d``) is more than ``min_effect``: a tiny but
  significant difference (a process's memory layout, many rounds) does not fail a build.
  **FASTER** symmetrically.
- **NOISY** when neither holds and the rounds could not have caught a slowdown of
  ``delta`` with probability ``POWER``; the report gives the rounds that would.
- **PASS** otherwise.

``delta`` and ``min_effect`` are two numbers because a noisy machine separates them: a
slowdown between the two is flagged when the rounds are quiet enough to show it, and a
measurement that could not even show ``delta`` says so instead of passing.

Power is a normal approximation with the ``d``'s robust scale taken as the true one: the
Hodges-Lehmann estimate has standard error ``sigma * sqrt(pi / (3 n))`` for normal ``d``,
the test rejects about where the estimate exceeds ``z(1 - alpha/m) * se``, so a true
slowdown ``D`` is flagged with probability ``POWER`` when
``D >= max(min_effect, z_crit * se) + z(POWER) * se``.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass
from statistics import NormalDist

import numpy as np
from scipy import stats

__all__ = ["MAX_PAIRS_NEEDED", "MAX_ROUNDS_NEEDED", "POWER", "VERDICTS", "PairedVerdict",
           "hodges_lehmann", "judge_pairs", "judge_processes", "robust_scale",
           "wilcoxon_greater"]

POWER = 0.8
VERDICTS = ("SLOWER", "FASTER", "NOISY", "PASS")
MAX_ROUNDS_NEEDED = 100_000  # past this the report says "more than" instead of a count
MAX_PAIRS_NEEDED = 1_000
EXACT_UP_TO = 100  # rounds; beyond, the exact distribution costs more than it tells
_NORMAL = NormalDist()


def wilcoxon_greater(d: np.ndarray) -> float:
    """The one-sided p-value of Wilcoxon's signed-rank test that ``d`` is centred above 0,
    exact up to ``EXACT_UP_TO`` values. Zeros are dropped (Wilcoxon's rule); tied
    magnitudes get their mean rank, and the null distribution is computed for those
    ranks, so ties stay exact."""
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
    if d.size > EXACT_UP_TO:  # the normal approximation, with the ties' correction
        n = d.size
        _, counts = np.unique(magnitude, return_counts=True)
        variance = n * (n + 1) * (2 * n + 1) / 24 - float((counts**3 - counts).sum()) / 48
        statistic = float(ranks[d > 0].sum()) - n * (n + 1) / 4
        return float(_NORMAL.cdf(-(statistic - 0.5) / math.sqrt(variance)))
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
    with its 95% interval; ``detectable`` is the smallest slowdown (a fraction) this
    measurement catches with probability ``POWER``; ``needed`` is how many ``needed_unit``
    (rounds, or pairs of processes) would catch ``delta`` (``None`` when these did).
    ``detectable`` is infinite where too few rounds ran to catch a slowdown of any size."""

    name: str
    rounds: int
    processes: int
    base_seconds: float
    candidate_seconds: float
    speed_ratio: float
    speed_low: float
    speed_high: float
    p_slower: float
    p_faster: float
    detectable: float
    needed: int | None
    needed_unit: str
    verdict: str

    def to_dict(self) -> dict:
        """As JSON holds it, which has no infinity: an infinite ``detectable`` is null."""
        data = asdict(self)
        if math.isinf(self.detectable):
            data["detectable"] = None
        return data


def _effects(delta: float, min_effect: float) -> tuple[float, float]:
    """``delta`` and ``min_effect`` as log-ratios; the minimal effect must be the smaller."""
    if not 0 < min_effect < delta:
        raise ValueError(f"min_effect must be above 0 and below delta ({delta:g}), got "
                         f"{min_effect:g}")
    return math.log1p(delta), math.log1p(min_effect)


def _decide(centre: float, p_slower: float, p_faster: float, alpha: float, bar: float,
            detectable: float, effect: float) -> str:
    if p_slower < alpha and centre > bar:
        return "SLOWER"
    if p_faster < alpha and centre < -bar:
        return "FASTER"
    return "NOISY" if detectable > effect else "PASS"


def _rounds_needed(sigma: float, bar: float, z_crit: float, effect: float) -> int:
    """The fewest rounds whose rule flags a true slowdown of ``effect`` (log) with
    probability ``POWER``."""
    z_power = _NORMAL.inv_cdf(POWER)
    se_allowed = min((effect - bar) / z_power, effect / (z_crit + z_power))
    if sigma == 0:
        return 2
    return min(MAX_ROUNDS_NEEDED + 1,
               max(2, math.ceil(math.pi / 3 * (sigma / se_allowed) ** 2)))


def _times(base: np.ndarray, candidate: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    base = np.asarray(base, dtype=np.float64)
    candidate = np.asarray(candidate, dtype=np.float64)
    if base.shape != candidate.shape or base.ndim != 1 or base.size < 2:
        raise ValueError("the gate needs two rounds or more, one time of each side each")
    if not (np.all(base > 0) and np.all(candidate > 0)):
        raise ValueError("times must be positive")
    return base, candidate


def judge_pairs(name: str, base: np.ndarray, candidate: np.ndarray, *, delta: float,
                min_effect: float, alpha: float) -> PairedVerdict:
    """Judge one benchmark from its rounds' times (``base[i]`` and ``candidate[i]`` timed
    in round ``i``, all in one process per side) at level ``alpha`` (already divided among
    the benchmarks), sized to catch ``delta`` and flagging more than ``min_effect``
    (fractional slowdowns): the rounds are the units, Wilcoxon's test on their
    log-ratios."""
    base, candidate = _times(base, candidate)
    d = np.log(candidate / base)
    n = d.size
    centre = hodges_lehmann(d)
    low, high = _interval(d, 0.95)
    p_slower, p_faster = wilcoxon_greater(d), wilcoxon_greater(-d)
    effect, bar = _effects(delta, min_effect)
    sigma = robust_scale(d)
    se = sigma * math.sqrt(math.pi / (3 * n))
    z_crit, z_power = _NORMAL.inv_cdf(1 - alpha), _NORMAL.inv_cdf(POWER)
    detectable = max(bar, z_crit * se) + z_power * se
    fewest = math.floor(math.log2(1 / alpha)) + 1  # the exact test's p is at least 2^-n
    if n < fewest:
        detectable = math.inf
    needed = None if detectable <= effect else max(
        fewest, _rounds_needed(sigma, bar, z_crit, effect))
    return PairedVerdict(
        name=name, rounds=n, processes=1, base_seconds=float(np.median(base)),
        candidate_seconds=float(np.median(candidate)), speed_ratio=math.exp(-centre),
        speed_low=math.exp(-high), speed_high=math.exp(-low), p_slower=p_slower,
        p_faster=p_faster, detectable=math.expm1(detectable) if detectable < 700 else math.inf,
        needed=needed, needed_unit="rounds",
        verdict=_decide(centre, p_slower, p_faster, alpha, bar, detectable, effect))


def _t_detectable(se: float, pairs: int, alpha: float, bar: float) -> float:
    t_crit = stats.t.ppf(1 - alpha, pairs - 1)
    return max(bar, t_crit * se) + stats.t.ppf(POWER, pairs - 1) * se


def judge_processes(name: str, base: np.ndarray, candidate: np.ndarray, pairs: np.ndarray,
                    *, delta: float, min_effect: float, alpha: float) -> PairedVerdict:
    """Judge one benchmark whose rounds ran in several pairs of processes (``pairs[i]``,
    the pair of round ``i``): the pairs are the units. Each pair's slowdown is the
    Hodges-Lehmann centre of its rounds' log-ratios; a one-sided t-test on the pairs'
    centres (their spread holds each process's own speed, which rounds within one pair
    cannot show) and the minimal effect decide, as in ``judge_pairs``."""
    base, candidate = _times(base, candidate)
    pairs = np.asarray(pairs)
    d = np.log(candidate / base)
    labels = np.unique(pairs)
    k = labels.size
    if k < 2 or pairs.shape != d.shape:
        raise ValueError("judge_processes needs the rounds of two pairs of processes or more")
    centres = np.array([hodges_lehmann(d[pairs == label]) for label in labels])
    centre = float(centres.mean())
    se = float(centres.std(ddof=1) / math.sqrt(k))
    if se > 0:
        t_value = centre / se
        p_slower, p_faster = (float(stats.t.sf(t_value, k - 1)),
                              float(stats.t.cdf(t_value, k - 1)))
    else:
        p_slower, p_faster = float(centre <= 0), float(centre >= 0)
    half_width = stats.t.ppf(0.975, k - 1) * se
    effect, bar = _effects(delta, min_effect)
    detectable = _t_detectable(se, k, alpha, bar)
    needed = None
    if detectable > effect:
        spread = se * math.sqrt(k)
        needed = next((n for n in range(k + 1, MAX_PAIRS_NEEDED + 1)
                       if _t_detectable(spread / math.sqrt(n), n, alpha, bar) <= effect),
                      MAX_PAIRS_NEEDED + 1)
    return PairedVerdict(
        name=name, rounds=d.size, processes=k, base_seconds=float(np.median(base)),
        candidate_seconds=float(np.median(candidate)), speed_ratio=math.exp(-centre),
        speed_low=math.exp(-centre - half_width), speed_high=math.exp(-centre + half_width),
        p_slower=p_slower, p_faster=p_faster, detectable=math.expm1(detectable),
        needed=needed, needed_unit="process pairs",
        verdict=_decide(centre, p_slower, p_faster, alpha, bar, detectable, effect))
