"""The paired throughput gate's test on synthetic rounds: its exact p-values against a
float64 enumeration and scipy, its false alarms under a machine that drifts 2-4x, its
catch rate at the minimal effect, the minimal effect itself, and NOISY with its rounds."""

from __future__ import annotations

import itertools
import math

import numpy as np
import pytest
from scipy import stats

from rlbench.harness.regress.throughput.paired_statistics import (
    hodges_lehmann,
    judge_pairs,
    judge_processes,
    robust_scale,
    wilcoxon_greater,
)

ALPHA = 0.05 / 11  # the gate's level per benchmark with its 11 benchmarks
DELTA = 0.10
MIN_EFFECT = DELTA / 2  # the learning gate's convention; the command's defaults differ
JUDGE = {"delta": DELTA, "min_effect": MIN_EFFECT, "alpha": ALPHA}


def _enumerated_p(d: np.ndarray) -> float:
    """P(W+ >= observed) by listing every sign assignment of the ranks (float64)."""
    d = d[d != 0]
    ranks = stats.rankdata(np.abs(d))
    observed = ranks[d > 0].sum()
    sums = [sum(r for r, s in zip(ranks, signs, strict=True) if s)
            for signs in itertools.product((False, True), repeat=d.size)]
    return float(np.mean(np.array(sums) >= observed - 1e-9))


@pytest.mark.parametrize("seed", range(6))
def test_the_exact_p_value_is_the_enumerated_one_ties_and_zeros_included(seed: int) -> None:
    rng = np.random.default_rng(seed)
    d = np.round(rng.normal(0.3, 1.0, size=11), 1)  # rounding makes ties, and some zeros
    assert wilcoxon_greater(d) == pytest.approx(_enumerated_p(d), abs=1e-12)


@pytest.mark.parametrize("n", [5, 12, 25, 40])
def test_without_ties_the_p_value_is_scipys_exact_one(n: int) -> None:
    d = np.random.default_rng(n).normal(0.2, 1.0, size=n)
    expected = stats.wilcoxon(d, alternative="greater", method="exact").pvalue
    assert wilcoxon_greater(d) == pytest.approx(expected, rel=1e-9)
    assert wilcoxon_greater(-d) == pytest.approx(
        stats.wilcoxon(-d, alternative="greater", method="exact").pvalue, rel=1e-9)


def test_the_centre_and_scale_are_the_walsh_median_and_the_scaled_mad() -> None:
    d = np.random.default_rng(0).standard_t(3, size=17)
    walsh = [(d[i] + d[j]) / 2 for i in range(17) for j in range(i, 17)]
    assert hodges_lehmann(d) == pytest.approx(float(np.median(walsh)), abs=1e-15)
    assert robust_scale(d) == pytest.approx(
        1.4826 * float(np.median(np.abs(d - np.median(d)))), abs=1e-15)


def _rounds(rng: np.random.Generator, n: int, effect: float, noise: float
            ) -> tuple[np.ndarray, np.ndarray]:
    """Times of ``n`` rounds on a machine whose speed wanders over 2-4x between rounds
    (a random walk), each side with its own short-term noise; the candidate ``effect``
    slower (a fraction)."""
    drift = np.exp(np.cumsum(rng.normal(0, 0.25, size=n)))
    drift = 1 + 3 * (drift - drift.min()) / max(np.ptp(drift), 1e-12)  # 1x to 4x
    base = 0.01 * drift * np.exp(rng.normal(0, noise, size=n))
    candidate = 0.01 * (1 + effect) * drift * np.exp(rng.normal(0, noise, size=n))
    return base, candidate


def _verdicts(effect: float, noise: float, n: int, trials: int, seed: int = 0) -> list[str]:
    rng = np.random.default_rng(seed)
    return [judge_pairs("b", *_rounds(rng, n, effect, noise), **JUDGE).verdict
            for _ in range(trials)]


def test_unchanged_code_on_a_drifting_machine_is_never_slower() -> None:
    verdicts = _verdicts(effect=0.0, noise=0.04, n=30, trials=400)
    assert verdicts.count("SLOWER") == 0 and verdicts.count("FASTER") == 0
    assert verdicts.count("PASS") >= 396  # 4% noise per side: 30 rounds are enough


def test_a_30_percent_slowdown_beside_the_drift_is_slower_and_a_speedup_faster() -> None:
    assert set(_verdicts(effect=0.30, noise=0.04, n=30, trials=200)) == {"SLOWER"}
    assert set(_verdicts(effect=1 / 1.3 - 1, noise=0.04, n=30, trials=200)) == {"FASTER"}


def test_a_significant_change_under_the_minimal_effect_passes() -> None:
    # 3% slower with 0.5% noise: the test rejects at once, the minimal effect keeps PASS
    rng = np.random.default_rng(1)
    verdict = judge_pairs("b", *_rounds(rng, 60, 0.03, 0.005), **JUDGE)
    assert verdict.p_slower < 1e-10
    assert verdict.verdict == "PASS"
    assert verdict.speed_ratio == pytest.approx(1 / 1.03, abs=0.003)
    assert verdict.speed_low < 1 / 1.03 < verdict.speed_high


def test_too_few_rounds_for_the_noise_are_noisy_and_the_rounds_named_catch_delta() -> None:
    rng = np.random.default_rng(2)
    verdict = judge_pairs("b", *_rounds(rng, 10, 0.0, 0.15), **JUDGE)
    assert verdict.verdict == "NOISY"
    assert verdict.detectable > DELTA and verdict.needed is not None
    assert verdict.needed_unit == "rounds"
    needed = verdict.needed
    assert needed > 10
    # with the rounds it names, a slowdown of delta is caught about POWER of the time
    caught = _verdicts(effect=DELTA, noise=0.15, n=needed, trials=300, seed=3)
    assert 0.7 <= caught.count("SLOWER") / 300 <= 0.97
    # unchanged code at that many rounds is NOISY about half the time (the count is where
    # the power reaches delta), at twice as many rarely
    assert _verdicts(effect=0.0, noise=0.15, n=2 * needed, trials=100, seed=4).count(
        "NOISY") <= 10


def test_the_detectable_slowdown_matches_the_catch_rate() -> None:
    rng = np.random.default_rng(5)
    verdict = judge_pairs("b", *_rounds(rng, 30, 0.0, 0.05), **JUDGE)
    detectable = verdict.detectable
    assert MIN_EFFECT < detectable < DELTA
    caught = _verdicts(effect=detectable, noise=0.05, n=30, trials=300, seed=6)
    assert 0.7 <= caught.count("SLOWER") / 300 <= 0.92


def test_identical_times_pass_and_bad_rounds_are_refused() -> None:
    same = np.full(12, 0.01)
    verdict = judge_pairs("b", same, same, **JUDGE)
    assert (verdict.verdict, verdict.speed_ratio, verdict.p_slower) == ("PASS", 1.0, 1.0)
    assert verdict.detectable == pytest.approx(MIN_EFFECT)
    # 7 rounds: the exact test's p is at least 2^-7 > ALPHA, so even a doubling is not
    # seen; 8 rounds can see it
    doubled = judge_pairs("b", same[:7], 2 * same[:7], **JUDGE)
    assert (doubled.verdict, doubled.detectable, doubled.needed) == ("NOISY", math.inf, 8)
    assert judge_pairs("b", same[:8], 2 * same[:8], **JUDGE).verdict == (
        "SLOWER")
    with pytest.raises(ValueError, match="two rounds or more"):
        judge_pairs("b", same[:1], same[:1], **JUDGE)
    with pytest.raises(ValueError, match="positive"):
        judge_pairs("b", same, -same, **JUDGE)


def _process_rounds(rng: np.random.Generator, pairs: int, rounds: int, effect: float,
                    noise: float, process_sd: float) -> tuple[np.ndarray, ...]:
    """Rounds taken in turn by ``pairs`` pairs of processes, each process with a speed of
    its own for as long as it lives (``process_sd``, log), on a drifting machine."""
    base, candidate = _rounds(rng, rounds, effect, noise)
    pair = np.arange(rounds) % pairs
    base = base * np.exp(rng.normal(0, process_sd, size=pairs))[pair]
    candidate = candidate * np.exp(rng.normal(0, process_sd, size=pairs))[pair]
    return base, candidate, pair


def test_a_processs_own_speed_fools_the_rounds_but_not_the_pairs_of_processes() -> None:
    rng = np.random.default_rng(7)
    by_rounds, by_pairs = [], []
    for _ in range(300):
        base, candidate, _ = _process_rounds(rng, 1, 32, 0.0, 0.02, 0.03)
        by_rounds.append(judge_pairs("b", base, candidate, **JUDGE).verdict)
        base, candidate, pair = _process_rounds(rng, 8, 32, 0.0, 0.02, 0.03)
        by_pairs.append(judge_processes("b", base, candidate, pair, **JUDGE).verdict)
    # one process a side: the rounds, taken as independent, call its luck a change
    assert by_rounds.count("SLOWER") + by_rounds.count("FASTER") >= 15
    assert by_pairs.count("SLOWER") == 0 and by_pairs.count("FASTER") == 0
    assert by_pairs.count("PASS") >= 270


def test_the_pairs_of_processes_catch_30_percent_and_name_the_pairs_a_slowdown_needs(
        ) -> None:
    rng = np.random.default_rng(8)
    covered = 0
    for _ in range(100):
        verdict = judge_processes("b", *_process_rounds(rng, 8, 32, 0.30, 0.02, 0.03),
                                  **JUDGE)
        assert verdict.verdict == "SLOWER" and verdict.processes == 8
        covered += verdict.speed_low < 1 / 1.3 < verdict.speed_high
    assert covered >= 88  # a 95% interval
    noisy = judge_processes("b", *_process_rounds(rng, 3, 12, 0.0, 0.02, 0.08),
                            **JUDGE)
    assert noisy.verdict == "NOISY" and noisy.needed_unit == "process pairs"
    assert noisy.needed > 3
    with pytest.raises(ValueError, match="two pairs of processes or more"):
        judge_processes("b", np.ones(4), np.ones(4), np.zeros(4), **JUDGE)


def test_the_slowdown_to_catch_and_the_minimal_effect_are_separate() -> None:
    """Sized for 20% and flagging over 5%: pairs of processes that disagree by 5% (too
    many to see 10%, enough to see 20%) PASS unchanged code where a gate sized for 10%
    says NOISY, and a clear 10% slowdown is still SLOWER."""
    rng = np.random.default_rng(9)
    sized_for_10, sized_for_20, caught = [], [], []
    for _ in range(200):
        base, candidate, pair = _process_rounds(rng, 8, 32, 0.0, 0.02, 0.05)
        sized_for_10.append(judge_processes("b", base, candidate, pair, **JUDGE).verdict)
        sized_for_20.append(judge_processes("b", base, candidate, pair, delta=0.20,
                                            min_effect=0.05, alpha=ALPHA).verdict)
        caught.append(judge_processes("b", *_process_rounds(rng, 8, 32, 0.10, 0.01, 0.01),
                                      delta=0.20, min_effect=0.05, alpha=ALPHA).verdict)
    assert "SLOWER" not in sized_for_10 + sized_for_20
    assert sized_for_10.count("NOISY") >= 100
    assert sized_for_20.count("NOISY") <= 10
    assert caught.count("SLOWER") >= 190
    with pytest.raises(ValueError, match="min_effect must be above 0 and below delta"):
        judge_processes("b", base, candidate, pair, delta=0.05, min_effect=0.05, alpha=ALPHA)
