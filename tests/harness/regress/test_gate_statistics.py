"""The gate's test against float64 references, scipy's Welch test, and simulation."""

from __future__ import annotations

import math

import numpy as np
import pytest
from scipy import stats

from rlbench.harness.regress.statistics import (
    MAX_SCORE,
    POWER,
    bootstrap_difference_ci,
    judge_task,
    welch,
)


def _welch_reference(c: list[float], r: list[float]) -> tuple[float, float, float]:
    """Welch's statistic in plain Python floats."""
    mc, mr = sum(c) / len(c), sum(r) / len(r)
    vc = sum((x - mc) ** 2 for x in c) / (len(c) - 1) / len(c)
    vr = sum((x - mr) ** 2 for x in r) / (len(r) - 1) / len(r)
    df = (vc + vr) ** 2 / (vc**2 / (len(c) - 1) + vr**2 / (len(r) - 1))
    return mc - mr, math.sqrt(vc + vr), df


@pytest.mark.parametrize("seed", range(20))
def test_welch_matches_a_float64_reference_and_scipy(seed: int) -> None:
    rng = np.random.default_rng(seed)
    c = rng.normal(rng.uniform(-100, 100), rng.uniform(0.1, 50), size=rng.integers(2, 12))
    r = rng.normal(rng.uniform(-100, 100), rng.uniform(0.1, 50), size=rng.integers(2, 30))
    w = welch(c, r)
    difference, se, df = _welch_reference(list(c), list(r))
    assert w.difference == pytest.approx(difference, rel=1e-12, abs=1e-12)
    assert w.se == pytest.approx(se, rel=1e-12)
    assert w.df == pytest.approx(df, rel=1e-12)
    verdict = judge_task(c, r, delta=1.0, alpha=0.05)
    scipy_less = stats.ttest_ind(c, r, equal_var=False, alternative="less").pvalue
    scipy_greater = stats.ttest_ind(c, r, equal_var=False, alternative="greater").pvalue
    assert verdict.p_worse == pytest.approx(scipy_less, rel=1e-9)
    assert verdict.p_better == pytest.approx(scipy_greater, rel=1e-9)


def test_bootstrap_interval_matches_a_plain_resampling_loop() -> None:
    rng = np.random.default_rng(3)
    c, r = rng.normal(0, 1, 6), rng.normal(1, 2, 20)
    low, high = bootstrap_difference_ci(c, r, reps=2000, seed=7)
    draws = np.random.default_rng(7)
    index_c = draws.integers(0, c.size, size=(2000, c.size))
    index_r = draws.integers(0, r.size, size=(2000, r.size))
    differences = sorted(float(np.mean([c[i] for i in ic]) - np.mean([r[i] for i in ir]))
                         for ic, ir in zip(index_c, index_r, strict=True))
    expected = np.quantile(np.array(differences), [0.025, 0.975])
    assert (low, high) == pytest.approx(tuple(expected), rel=1e-12)
    assert low < c.mean() - r.mean() < high


def test_a_clear_drop_past_the_minimal_effect_is_a_regression() -> None:
    reference = np.array([100.0, 102, 98, 101, 99, 100, 103, 97])
    verdict = judge_task(reference - 20, reference, delta=10, alpha=0.01)
    assert verdict.verdict == "REGRESSION"
    assert verdict.difference == pytest.approx(-20)
    assert verdict.ci_high < 0
    improved = judge_task(reference + 20, reference, delta=10, alpha=0.01)
    assert improved.verdict == "IMPROVEMENT"


def test_a_significant_drop_under_half_the_minimal_effect_passes() -> None:
    reference = np.array([100.0, 100.5, 99.5, 100.2, 99.8, 100.1])
    verdict = judge_task(reference - 4, reference, delta=10, alpha=0.01)
    assert verdict.p_worse < 1e-5  # significant ...
    assert verdict.verdict == "PASS"  # ... but it does not matter
    assert judge_task(reference - 6, reference, delta=10, alpha=0.01).verdict == "REGRESSION"


def test_a_large_drop_that_noise_explains_is_underpowered_not_a_regression() -> None:
    rng = np.random.default_rng(0)
    reference = rng.normal(100, 80, 3)
    candidate = reference - 30
    verdict = judge_task(candidate + rng.normal(0, 80, 3), reference, delta=10, alpha=0.05)
    assert verdict.verdict == "UNDERPOWERED"
    assert verdict.power < POWER
    assert verdict.seeds_needed is not None and verdict.seeds_needed > 3


def test_scores_that_do_not_vary_are_judged_exactly() -> None:
    solved = np.full(6, 500.0)
    assert judge_task(solved, solved, delta=50, alpha=0.01).verdict == "PASS"
    assert judge_task(solved - 100, solved, delta=50, alpha=0.01).verdict == "REGRESSION"
    assert judge_task(solved - 20, solved, delta=50, alpha=0.01).verdict == "PASS"
    assert judge_task(solved - 30, solved, delta=50, alpha=0.01).verdict == "REGRESSION"
    assert judge_task(solved, solved, delta=50, alpha=0.01).seeds_needed is None


def test_seeds_needed_is_the_first_count_at_which_the_rule_reaches_the_power() -> None:
    rng = np.random.default_rng(1)
    candidate, reference = rng.normal(0, 20, 6), rng.normal(0, 5, 20)
    delta, alpha = 8.0, 0.05
    verdict = judge_task(candidate, reference, delta=delta, alpha=alpha)
    var_c, var_r = candidate.var(ddof=1), reference.var(ddof=1)

    def power(n: int) -> float:  # the rule's power at delta with n seeds per side
        se = math.sqrt((var_c + var_r) / n)
        a = (var_c + var_r) / n
        df = a**2 / ((var_c / n) ** 2 / (n - 1) + (var_r / n) ** 2 / (n - 1))
        bar = max(delta / 2, stats.t.ppf(1 - alpha, df) * se)
        return float(stats.t.cdf((delta - bar) / se, df))

    n = verdict.seeds_needed
    assert n is not None and power(n) >= POWER > power(n - 1)
    assert verdict.verdict == "UNDERPOWERED" and n > 6


@pytest.mark.slow
def test_power_and_false_alarms_hold_in_simulation() -> None:
    """Normal scores: with no change the gate cries wolf at most alpha of the time; a true
    drop of the minimal effect is caught as often as the reported power says, and one of
    the reported detectable size POWER of the time (the report's numbers taken from samples
    whose std is exactly the true one)."""
    rng = np.random.default_rng(2)
    alpha, delta, std, n_c, n_r = 0.05, 20.0, 15.0, 6, 20

    def exact(n: int) -> np.ndarray:  # a sample with mean 0 and std exactly std
        x = rng.normal(size=n)
        return (x - x.mean()) / x.std(ddof=1) * std

    reported = judge_task(exact(n_c), exact(n_r), delta=delta, alpha=alpha)
    trials = 1000

    def flagged(drop: float) -> float:
        return sum(judge_task(rng.normal(-drop, std, n_c), rng.normal(0, std, n_r),
                              delta=delta, alpha=alpha).verdict == "REGRESSION"
                   for _ in range(trials)) / trials

    assert flagged(0.0) <= alpha
    # the report takes the variances as known; the test estimates them, which costs a
    # little power at these seed counts: within 0.06 over 1000 trials
    assert abs(flagged(delta) - reported.power) < 0.06, reported.power
    assert abs(flagged(reported.detectable_drop) - POWER) < 0.06, reported.detectable_drop


def test_bad_parameters_are_refused() -> None:
    with pytest.raises(ValueError, match="2 seeds on each side"):
        judge_task(np.array([1.0]), np.array([1.0, 2.0]), delta=1, alpha=0.05)
    with pytest.raises(ValueError, match="delta"):
        judge_task(np.ones(3), np.ones(3), delta=0, alpha=0.05)
    with pytest.raises(ValueError, match="alpha"):
        judge_task(np.ones(3), np.ones(3), delta=1, alpha=1.5)
    with pytest.raises(ValueError, match="finite numbers within"):
        judge_task(np.array([1e200, 1.1e200]), np.array([1.0, 2.0]), delta=1, alpha=0.05)


def test_scores_near_the_limit_are_judged_and_the_limit_itself_is_refused() -> None:
    """Scores just inside ±MAX_SCORE have variances near 1e200, whose squares pass a
    float's range: the test still gives a verdict. A score at the limit, which the store
    reads as no score, is refused."""
    verdict = judge_task(np.array([9e99, -9e99, 0.0]), np.array([1.0, 2.0, 3.0]), delta=50,
                         alpha=0.05)
    assert verdict.verdict == "UNDERPOWERED" and math.isfinite(verdict.detectable_drop)
    with pytest.raises(ValueError, match="finite numbers within"):
        judge_task(np.array([MAX_SCORE, 0.0]), np.array([1.0, 2.0]), delta=1, alpha=0.05)
