"""Aggregate statistics against values worked out by hand on small score matrices."""

from __future__ import annotations

import numpy as np
import pytest

from rlbench.harness.analysis.statistics import (
    AGGREGATES,
    _improvement_of_each,
    curve_band,
    expanded_confidence,
    iqm,
    mean_ci_t,
    mean_score,
    median_of_task_means,
    normalize,
    optimality_gap,
    performance_profile,
    performance_profile_band,
    probability_of_improvement,
    probability_of_improvement_ci,
    seeds_to_detect,
    statistic_of_each,
    stratified_bootstrap_ci,
)


def test_iqm_cuts_a_quarter_from_each_end() -> None:
    assert iqm(np.arange(1, 9)) == 4.5  # mean of 3, 4, 5, 6
    # 6 values 0, 1, 2, 3, 10, 100: one cut from each end -> mean(1, 2, 3, 10)
    assert iqm(np.array([[0, 10], [1, 2], [3, 100]])) == 4.0
    assert iqm(np.array([7.0])) == 7.0


def test_optimality_gap_and_normalize() -> None:
    assert optimality_gap(np.array([0.5, 1.2, 0.9])) == pytest.approx((0.5 + 0.0 + 0.1) / 3)
    assert optimality_gap(np.array([50.0, 150.0]), threshold=100.0) == 25.0
    np.testing.assert_allclose(normalize(np.array([50.0, -100.0]), -100.0, 100.0), [0.75, 0.0])
    with pytest.raises(ValueError, match="must differ"):
        normalize(1.0, 2.0, 2.0)
    # rliable's median: of the per-task means (1.5 and 7), not of all four scores.
    assert AGGREGATES["median"](np.array([[1, 5], [2, 9]])) == 4.25


def test_performance_profile_counts_strictly_above() -> None:
    profile = performance_profile(np.array([[0.1, 0.5], [0.9, 1.5]]), np.array([0, 0.5, 1.0]))
    np.testing.assert_allclose(profile, [1.0, 0.5, 0.25])


def test_probability_of_improvement_by_hand() -> None:
    # task 0: x in {1, 3} vs y in {2, 2}: x wins 2 of 4 pairs; task 1: all ties -> 1/2
    x = np.array([[1.0, 5.0], [3.0, 5.0]])
    y = np.array([[2.0, 5.0], [2.0, 5.0]])
    assert probability_of_improvement(x, y) == pytest.approx(0.5)
    # task 0 only x > y everywhere -> 1; task 1 x < y everywhere -> 0
    assert probability_of_improvement(np.array([[3.0, 0.0]]), np.array([[1.0, 1.0]])) == 0.5
    assert probability_of_improvement(np.array([[3.0]]), np.array([[1.0], [2.0]])) == 1.0
    with pytest.raises(ValueError, match="different numbers of tasks"):
        probability_of_improvement(np.zeros((2, 2)), np.zeros((2, 3)))


def test_bootstrap_ci_on_an_exact_small_case() -> None:
    # one task, runs {0, 1}: bootstrap means are 0, 1/2, 1 w.p. 1/4, 1/2, 1/4
    ci = stratified_bootstrap_ci(np.array([0.0, 1.0]), AGGREGATES["mean"],
                                 rng=np.random.default_rng(0), reps=4000)
    assert (ci.value, ci.low, ci.high) == (0.5, 0.0, 1.0)
    # one run per task: nothing to resample, so no interval rather than a zero-width one
    ci = stratified_bootstrap_ci(np.array([[0.2, 0.4, 0.9]]), iqm,
                                 rng=np.random.default_rng(1), reps=200)
    assert ci.value == pytest.approx(0.5)
    assert np.isnan(ci.low) and np.isnan(ci.high) and not ci.has_bounds


def test_bootstrap_ci_matches_the_normal_approximation_and_is_seeded() -> None:
    sample = np.random.default_rng(2).normal(10.0, 2.0, size=400)
    ci = stratified_bootstrap_ci(sample, AGGREGATES["mean"], rng=np.random.default_rng(3))
    half_width = 1.96 * sample.std(ddof=1) / np.sqrt(400)
    assert ci.low == pytest.approx(sample.mean() - half_width, abs=0.1 * half_width)
    assert ci.high == pytest.approx(sample.mean() + half_width, abs=0.1 * half_width)
    again = stratified_bootstrap_ci(sample, AGGREGATES["mean"], rng=np.random.default_rng(3))
    assert again == ci


def test_bootstrap_resamples_within_tasks() -> None:
    # every run averages 5 over the two tasks, so resampling whole runs would always give 5;
    # resampling each task's runs on its own does not
    scores = np.array([[0.0, 10.0], [10.0, 0.0]])
    ci = stratified_bootstrap_ci(scores, AGGREGATES["mean"], rng=np.random.default_rng(4),
                                 reps=1000)
    assert ci.value == 5.0 and ci.low == 0.0 and ci.high == 10.0


def test_probability_of_improvement_ci_resamples_each_side_within_tasks() -> None:
    x = np.array([[3.0, 0.1], [1.0, 0.4], [2.0, 0.2]])
    y = np.array([[2.0, 0.3], [0.0, 0.3]])
    reps = 300
    got = probability_of_improvement_ci(x, y, rng=np.random.default_rng(5), reps=reps)
    rng = np.random.default_rng(5)
    x_index = rng.integers(0, 3, size=(reps, 3, 2))
    y_index = rng.integers(0, 2, size=(reps, 2, 2))
    values = []
    for xi, yi in zip(x_index, y_index, strict=True):
        xs = np.take_along_axis(x, xi, axis=0)
        ys = np.take_along_axis(y, yi, axis=0)
        per_task = [np.mean([(a > b) + 0.5 * (a == b) for a in xs[:, t] for b in ys[:, t]])
                    for t in range(2)]
        values.append(np.mean(per_task))
    # By hand: task 0 has 4 wins and a tie (2 vs 2) in 6 pairs; in task 1 only 0.4 wins,
    # against both 0.3s.
    assert got.value == pytest.approx((4.5 / 6 + 2 / 6) / 2)
    assert (got.low, got.high) == tuple(np.percentile(values, [2.5, 97.5]))
    certain = probability_of_improvement_ci(x + 10, y, rng=np.random.default_rng(0), reps=50)
    assert (certain.value, certain.low, certain.high) == (1.0, 1.0, 1.0)
    single = probability_of_improvement_ci(np.array([1.0]), np.array([1.0, 2.0]),
                                           rng=np.random.default_rng(0), reps=50)
    assert single.value == 0.25 and not single.has_bounds


def test_iqm_of_scores_with_nan_is_nan() -> None:
    assert np.isnan(iqm(np.array([1.0, 2.0, 3.0, np.nan])))
    assert iqm(np.array([1.0, 2.0, 3.0, np.inf])) == 2.5  # an infinite score is an outlier


def test_mean_ci_t_by_hand() -> None:
    # n = 4, mean 5, sample std sqrt(16 / 3): half-width t(0.975, 3) * std / sqrt(4).
    interval = mean_ci_t(np.array([3.0, 7.0, 3.0, 7.0]))
    std = np.sqrt(16 / 3)
    assert interval.value == 5.0
    assert interval.high - 5.0 == pytest.approx(3.182446305284263 * std / 2, rel=1e-12)
    assert interval.low == pytest.approx(10.0 - interval.high, rel=1e-12)
    assert mean_ci_t(np.array([1.0])) is None


# Ragged scores: tasks that ran different numbers of seeds. Every run is used and each task
# weighs the same; with equal counts a list gives what the matrix gives.

def _ragged(rng: np.random.Generator) -> list[np.ndarray]:
    return [rng.normal(size=n) for n in (3, 1, 5)]


def _expanded(tasks: list[np.ndarray]) -> np.ndarray:
    """Each task's runs repeated to one common count divisible by 4 per task: plain,
    equally weighted statistics of it are the task-weighted statistics of ``tasks``."""
    common = 4 * int(np.lcm.reduce([t.size for t in tasks]))
    return np.stack([np.repeat(t, common // t.size) for t in tasks], axis=1)


@pytest.mark.parametrize("seed", range(5))
def test_ragged_aggregates_weigh_each_task_equally(seed: int) -> None:
    tasks = _ragged(np.random.default_rng(seed))
    reference = _expanded(tasks)
    for name in ("iqm", "mean", "optimality_gap", "median"):
        assert AGGREGATES[name](tasks) == pytest.approx(AGGREGATES[name](reference),
                                                        abs=1e-12), name
    taus = np.linspace(-2, 2, 9)
    np.testing.assert_allclose(performance_profile(tasks, taus),
                               performance_profile(reference, taus), atol=1e-12)


def test_equal_counts_as_a_list_give_the_matrix_bit_for_bit() -> None:
    matrix = np.random.default_rng(7).normal(size=(5, 3))
    tasks = [matrix[:, i] for i in range(3)]
    for statistic in AGGREGATES.values():
        assert statistic(tasks) == statistic(matrix)
        from_list = stratified_bootstrap_ci(tasks, statistic, rng=np.random.default_rng(1),
                                            reps=300)
        from_matrix = stratified_bootstrap_ci(matrix, statistic,
                                              rng=np.random.default_rng(1), reps=300)
        assert from_list == from_matrix


def test_ragged_probability_of_improvement_by_hand() -> None:
    x = [np.array([1.0, 3.0]), np.array([5.0])]
    y = [np.array([2.0]), np.array([5.0, 4.0, 6.0])]
    # task 1: 3 > 2 wins, 1 < 2 loses -> 0.5; task 2: 5 vs 5 tie, > 4 win, < 6 loss -> 0.5
    assert probability_of_improvement(x, y) == 0.5
    ci = probability_of_improvement_ci([np.array([1.0, 3.0, 2.5]), np.array([5.0, 7.0])],
                                       [np.array([2.0, 0.0]), np.array([5.0, 4.0, 6.0])],
                                       rng=np.random.default_rng(0), reps=500)
    assert ci.has_bounds and 0.0 <= ci.low <= ci.value <= ci.high <= 1.0
    # a task with one run leaves no interval
    assert not probability_of_improvement_ci(x, y, rng=np.random.default_rng(0)).has_bounds


def test_ragged_bootstrap_resamples_each_task_alone() -> None:
    tasks = [np.array([0.0, 0.0, 0.0, 0.0]), np.array([1.0, 3.0])]
    # the first task never varies: every replicate's mean is (0 + mean of 2 draws) / 2
    ci = stratified_bootstrap_ci(tasks, AGGREGATES["mean"], rng=np.random.default_rng(0),
                                 reps=2000)
    assert ci.value == 1.0 and (ci.low, ci.high) == (0.5, 1.5)


def test_a_nan_score_gives_a_nan_probability_not_a_loss() -> None:
    x, y = np.array([[1.0], [np.nan]]), np.array([[0.0], [0.5]])
    assert np.isnan(probability_of_improvement(x, y))
    ci = probability_of_improvement_ci(x, y, rng=np.random.default_rng(0), reps=100)
    assert np.isnan(ci.value) and not ci.has_bounds


def _coverage(n: int, interval, trials: int = 600) -> float:
    """The share of ``trials`` samples of ``n`` standard normal scores whose ``interval``
    holds the true value 0 (the mean, and the interquartile mean, of a symmetric law)."""
    rng = np.random.default_rng(n)
    return float(np.mean([(lambda i: i.low <= 0.0 <= i.high)(interval(rng.normal(size=n), rng))
                          for _ in range(trials)]))


@pytest.mark.parametrize("n", [2, 3, 5, 10])
def test_the_t_interval_covers_95_percent_at_every_seed_count_compare_shows(n: int) -> None:
    assert abs(_coverage(n, lambda x, rng: mean_ci_t(x)) - 0.95) < 0.03


@pytest.mark.parametrize("n", [8, 12])
def test_the_bootstrap_iqm_interval_covers_from_the_seed_count_compare_shows_it(n: int) -> None:
    from rlbench.harness.analysis.comparison import MIN_BOOTSTRAP_SEEDS

    assert n >= MIN_BOOTSTRAP_SEEDS
    coverage = _coverage(n, lambda x, rng: stratified_bootstrap_ci(x, iqm, rng=rng, reps=500))
    assert abs(coverage - 0.95) < 0.04


def test_below_that_seed_count_the_bootstrap_would_not_cover() -> None:
    """Why compare shows no bootstrap CI under ``MIN_BOOTSTRAP_SEEDS`` seeds."""
    coverage = _coverage(3, lambda x, rng: stratified_bootstrap_ci(x, iqm, rng=rng, reps=500))
    assert coverage < 0.85


def test_seeds_to_detect_by_hand() -> None:
    """d = (1 - 0) / sqrt(2) on one task: 2 (1.959964 + 0.841621)^2 / 0.5 = 31.4 -> 32;
    the same difference on two tasks halves it (16); no difference: inf."""
    a, b = np.array([0.0, 2.0]), np.array([-1.0, 1.0])
    assert seeds_to_detect(a[:, None], b[:, None]) == 32
    assert seeds_to_detect([a, a], [b, b]) == 16
    assert seeds_to_detect([a, a + 5], [b, b + 5]) == 16  # each task standardized alone
    assert seeds_to_detect(a[:, None], a[:, None]) == float("inf")
    assert seeds_to_detect([a], [b[:1]]) is None  # a single seed has no spread
    assert seeds_to_detect([np.ones(3)], [np.ones(3)]) is None
    assert seeds_to_detect([np.array([1.0, np.nan])], [b]) is None


def test_seeds_to_detect_gives_the_stated_power_in_simulation() -> None:
    """With the count it gives for a true standardized difference of 1, a two-sample
    t-test at 5% finds the difference close to 80% of the time."""
    from scipy import stats

    rng = np.random.default_rng(0)
    observed_x, observed_y = rng.normal(1.0, 1.0, 2000), rng.normal(0.0, 1.0, 2000)
    seeds = int(seeds_to_detect(observed_x[:, None], observed_y[:, None]))
    assert 14 <= seeds <= 18  # 2 (1.96 + 0.84)^2 = 15.7 for a difference of exactly 1
    trials = 4000
    x = rng.normal(1.0, 1.0, (trials, seeds))
    y = rng.normal(0.0, 1.0, (trials, seeds))
    power = (stats.ttest_ind(x, y, axis=1).pvalue < 0.05).mean()
    assert 0.74 <= power <= 0.86


def _aggregate_coverage(n: int, interval, truth: float, trials: int = 400,
                        tasks: int = 5) -> float:
    """The share of ``trials`` [n, tasks] samples of standard normal scores whose interval
    holds ``truth``."""
    rng = np.random.default_rng(1000 + n)
    hits = 0
    for _ in range(trials):
        found = interval(rng.normal(size=(n, tasks)), rng)
        hits += found.low <= truth <= found.high
    return hits / trials


@pytest.mark.slow  # tens of thousands of bootstrap replicates
@pytest.mark.parametrize("n", [3, 5, 10])
def test_the_expanded_aggregate_and_improvement_intervals_cover_95_percent(n: int) -> None:
    """compare's aggregate CIs (IQM, mean, median over 5 envs) and its probability of
    improvement CI, at the seed counts runs have, hold about 95% (the median's errs wide)."""
    for statistic, low, high in ((iqm, 0.905, 0.99), (mean_score, 0.905, 0.99),
                                 (median_of_task_means, 0.905, 1.0)):
        coverage = _aggregate_coverage(n, lambda s, rng, f=statistic: stratified_bootstrap_ci(
            s, f, rng=rng, reps=400, expand=True), truth=0.0)
        assert low <= coverage <= high, (statistic.__name__, coverage)
    coverage = _aggregate_coverage(
        n, lambda s, rng: probability_of_improvement_ci(
            s, rng.normal(size=s.shape), rng=rng, reps=300, expand=True), truth=0.5,
        trials=200)
    assert 0.905 <= coverage <= 0.99, coverage


@pytest.mark.slow
def test_the_plain_percentile_aggregate_interval_covers_less() -> None:
    """Why compare expands them: rliable's plain percentile interval of the mean over 5
    envs at 3 seeds covers well under 95%."""
    coverage = _aggregate_coverage(3, lambda s, rng: stratified_bootstrap_ci(
        s, mean_score, rng=rng, reps=400), truth=0.0)
    assert coverage < 0.9


def test_expanded_confidence_by_hand() -> None:
    """3 runs in each of 5 tasks: z = sqrt(3/2) * t_0.975(10) = 2.7289, two-sided level
    1 - 2 * Phi(-2.7289) = 0.99365; a task with one run leaves the level as it is."""
    assert expanded_confidence([3] * 5) == pytest.approx(0.993646, abs=1e-6)
    assert expanded_confidence([3, 1]) == 0.95


@pytest.mark.parametrize("shape", [(3, 1), (5, 4), (10, 7), (4, 200)])
def test_batched_statistics_equal_one_replicate_at_a_time_bit_for_bit(shape) -> None:
    """The bootstrap evaluates each aggregate over all replicates at once; it must give the
    numbers a call per replicate gives, exactly, ties and a NaN included."""
    rng = np.random.default_rng(shape[0] * 1000 + shape[1])
    samples = rng.normal(0.5, 0.4, size=(64, *shape)).round(1)  # rounding makes ties
    samples[3, 0, 0] = np.nan
    for name, statistic in AGGREGATES.items():
        looped = np.array([statistic(sample) for sample in samples])
        np.testing.assert_array_equal(statistic_of_each(statistic, samples), looped,
                                      err_msg=name)
    other = rng.normal(0.4, 0.4, size=(64, shape[0] + 1, shape[1])).round(1)
    looped = np.array([probability_of_improvement(a, b)
                       for a, b in zip(samples, other, strict=True)])
    np.testing.assert_array_equal(_improvement_of_each(samples, other), looped)


def test_the_batched_bootstrap_gives_the_per_replicate_bootstrap() -> None:
    """stratified_bootstrap_ci and probability_of_improvement_ci, against the loop they
    replaced (the same generator draws), on a matrix with ties."""
    rng = np.random.default_rng(7)
    x = rng.integers(0, 5, size=(6, 3)).astype(np.float64)
    y = rng.integers(0, 5, size=(5, 3)).astype(np.float64)
    for name, statistic in AGGREGATES.items():
        got = stratified_bootstrap_ci(x, statistic, rng=np.random.default_rng(1), reps=300)
        draws = np.random.default_rng(1).integers(0, 6, size=(300, 6, 3))
        values = [statistic(s) for s in np.take_along_axis(x[None], draws, axis=1)]
        low, high = np.percentile(values, [2.5, 97.5])
        assert (got.low, got.high) == (low, high), name
    got = probability_of_improvement_ci(x, y, rng=np.random.default_rng(2), reps=300)
    draws = np.random.default_rng(2)
    xi, yi = draws.integers(0, 6, size=(300, 6, 3)), draws.integers(0, 5, size=(300, 5, 3))
    values = [probability_of_improvement(np.take_along_axis(x, a, axis=0),
                                         np.take_along_axis(y, b, axis=0))
              for a, b in zip(xi, yi, strict=True)]
    low, high = np.percentile(values, [2.5, 97.5])
    assert (got.low, got.high) == (low, high)


REPS = 200  # replicates of the bands of learning curves and performance profiles


def test_curve_band_matches_a_per_frame_bootstrap_reference() -> None:
    returns = np.random.default_rng(3).normal(size=(5, 7))
    mean, low, high = curve_band(returns, rng=np.random.default_rng(4), reps=REPS)
    assert mean.shape == low.shape == high.shape == (7,)
    np.testing.assert_array_equal(mean, returns.mean(axis=0))
    for t in range(returns.shape[1]):
        # the documented draw: one [reps, seeds] draw from a fresh generator, whole seeds
        ci = stratified_bootstrap_ci(returns[:, t], np.mean, rng=np.random.default_rng(4),
                                     reps=REPS)
        assert (low[t], high[t]) == pytest.approx((ci.low, ci.high), rel=1e-12, abs=1e-12)
        # and the same by hand: resample seeds, take means, read the 2.5/97.5 percentiles
        index = np.random.default_rng(4).integers(0, 5, size=(REPS, 5))
        values = returns[index, t].mean(axis=1)
        np.testing.assert_allclose([low[t], high[t]], np.percentile(values, [2.5, 97.5]),
                                   rtol=1e-12)
    assert np.all(low <= mean) and np.all(mean <= high)
    assert np.all(low < high)


def test_curve_band_one_seed_is_flat_and_confidence_widens() -> None:
    returns = np.array([[1.0, 2.5, -3.0]])
    mean, low, high = curve_band(returns, rng=np.random.default_rng(0), reps=REPS)
    np.testing.assert_array_equal(mean, returns[0])
    np.testing.assert_array_equal(low, returns[0])
    np.testing.assert_array_equal(high, returns[0])

    many = np.random.default_rng(5).normal(size=(6, 4))
    _, low90, high90 = curve_band(many, rng=np.random.default_rng(6), reps=REPS, confidence=0.9)
    _, low99, high99 = curve_band(many, rng=np.random.default_rng(6), reps=REPS, confidence=0.99)
    assert np.all(low99 <= low90) and np.all(high90 <= high99)
    with pytest.raises(ValueError, match="seeds, frames"):
        curve_band(np.zeros(3), rng=np.random.default_rng(0))


def test_performance_profile_band_by_hand_and_against_the_bootstrap() -> None:
    tiny = np.array([[0.2], [0.6], [1.0]])
    profile, low, high = performance_profile_band(tiny, np.array([0, 0.5, 0.9]),
                                                  rng=np.random.default_rng(0), reps=REPS)
    np.testing.assert_allclose(profile, [1.0, 2 / 3, 1 / 3])
    assert np.all(low <= profile) and np.all(profile <= high)
    assert low[0] == high[0] == 1.0  # every resample lies above 0

    scores = np.random.default_rng(2).uniform(-0.2, 1.3, size=(5, 3))
    taus = np.linspace(-0.2, 1.3, 11)
    profile, low, high = performance_profile_band(scores, taus, rng=np.random.default_rng(7),
                                                  reps=REPS)
    np.testing.assert_array_equal(profile, performance_profile(scores, taus))
    assert np.all(low <= profile) and np.all(profile <= high)
    for k in (2, 5, 8):
        ci = stratified_bootstrap_ci(
            scores, lambda x, k=k: float(performance_profile(x, taus[k : k + 1])[0]),
            rng=np.random.default_rng(7), reps=REPS,
        )
        assert (low[k], high[k]) == (ci.low, ci.high)
