"""The plots of ``rlbench compare``: the bands' numbers against plain references, and the
files written (PNG magic, SVG text, byte-identical reruns, input errors)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from rlbench.harness.analysis.plots import (
    curve_band,
    performance_profile_band,
    plot_aggregate_intervals,
    plot_learning_curves,
    plot_performance_profiles,
)
from rlbench.harness.analysis.statistics import (
    Interval,
    performance_profile,
    stratified_bootstrap_ci,
)

REPS = 200


def _curves() -> dict[str, dict[str, tuple[np.ndarray, np.ndarray]]]:
    rng = np.random.default_rng(1)
    frames = np.linspace(0, 10_000, 6)
    return {
        "Pong-v5": {"dqn": (frames, rng.normal(size=(3, 6))),
                    "ppo": (frames, rng.normal(size=(2, 6)))},
        "CartPole-v1": {"ppo": (frames, rng.normal(size=(1, 6)))},
        "Acrobot-v1": {"dqn": (frames, rng.normal(size=(4, 6)))},
        "Hopper-v4": {"sac": (frames, rng.normal(size=(3, 6)))},
    }


def _scores() -> dict[str, np.ndarray]:
    rng = np.random.default_rng(2)
    return {"dqn": rng.uniform(-0.2, 1.3, size=(5, 3)), "ppo": rng.uniform(0, 1, size=(4, 3))}


def _intervals() -> dict[str, dict[str, Interval]]:
    return {
        "dqn": {"iqm": Interval(0.6, 0.5, 0.7), "median": Interval(0.55, 0.4, 0.7),
                "mean": Interval(0.65, 0.5, 0.8), "optimality_gap": Interval(0.4, 0.3, 0.5)},
        "ppo": {"iqm": Interval(0.9, 0.8, 1.0), "median": Interval(0.85, 0.7, 1.0),
                "mean": Interval(0.95, 0.8, 1.1), "optimality_gap": Interval(0.1, 0.05, 0.2)},
    }


# ---------------------------------------------------------------- numbers


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

    scores = _scores()["dqn"]
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


# ---------------------------------------------------------------- files


def _assert_written(paths: list[Path], stem: Path) -> str:
    assert paths == [stem.with_suffix(".png"), stem.with_suffix(".svg")]
    assert paths[0].read_bytes()[:4] == b"\x89PNG"
    svg = paths[1].read_text()
    assert svg.lstrip().startswith("<?xml") and "<svg" in svg
    return svg


def test_learning_curves_files_text_and_determinism(tmp_path: Path) -> None:
    stem = tmp_path / "new" / "dir" / "curves"  # the parent is created
    svg = _assert_written(plot_learning_curves(_curves(), stem, reps=REPS, title="Runs"), stem)
    for text in ("Pong-v5", "CartPole-v1", "Acrobot-v1", "Hopper-v4", "dqn", "ppo", "sac",
                 "frames", "eval return", "Runs"):
        assert text in svg
    again = tmp_path / "again"
    plot_learning_curves(_curves(), again, reps=REPS, title="Runs")
    assert again.with_suffix(".svg").read_bytes() == stem.with_suffix(".svg").read_bytes()
    assert again.with_suffix(".png").read_bytes() == stem.with_suffix(".png").read_bytes()
    other = tmp_path / "other"
    plot_learning_curves(_curves(), other, reps=REPS, seed=1, title="Runs")
    assert other.with_suffix(".svg").read_bytes() != stem.with_suffix(".svg").read_bytes()


def test_learning_curves_reject_bad_input(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="no envs"):
        plot_learning_curves({}, tmp_path / "x")
    with pytest.raises(ValueError, match=r"'Pong-v5'.*no algorithms"):
        plot_learning_curves({"Pong-v5": {}}, tmp_path / "x")
    bad = {"Pong-v5": {"dqn": (np.arange(5), np.zeros((2, 6)))}}
    with pytest.raises(ValueError, match="'Pong-v5', algorithm 'dqn'"):
        plot_learning_curves(bad, tmp_path / "x")
    assert not list(tmp_path.iterdir())


def test_aggregate_intervals_files_text_and_determinism(tmp_path: Path) -> None:
    stem = tmp_path / "aggregates"
    svg = _assert_written(plot_aggregate_intervals(_intervals(), stem, title="Suite"), stem)
    for text in ("iqm", "median", "mean", "optimality_gap", "dqn", "ppo", "normalized score",
                 "lower is better", "Suite"):
        assert text in svg
    # known metrics in AGGREGATES order, whatever order they come in
    assert svg.index("iqm") < svg.index("median") < svg.index("optimality_gap")
    again = tmp_path / "again"
    plot_aggregate_intervals(_intervals(), again, title="Suite")
    assert again.with_suffix(".svg").read_bytes() == stem.with_suffix(".svg").read_bytes()


def test_aggregate_intervals_reject_bad_input(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="no algorithms"):
        plot_aggregate_intervals({}, tmp_path / "x")
    with pytest.raises(ValueError, match="no metrics"):
        plot_aggregate_intervals({"dqn": {}}, tmp_path / "x")
    partial = {"dqn": {"iqm": Interval(0.5, 0.4, 0.6)}, "ppo": {}}
    with pytest.raises(ValueError, match=r"'ppo' lacks the metrics \['iqm'\]"):
        plot_aggregate_intervals(partial, tmp_path / "x")


def test_performance_profiles_files_text_and_determinism(tmp_path: Path) -> None:
    stem = tmp_path / "profiles"
    svg = _assert_written(plot_performance_profiles(_scores(), stem, reps=REPS), stem)
    for text in ("dqn", "ppo", "normalized score", "fraction of runs"):
        assert text in svg
    again = tmp_path / "again"
    plot_performance_profiles(_scores(), again, reps=REPS)
    assert again.with_suffix(".svg").read_bytes() == stem.with_suffix(".svg").read_bytes()
    given = tmp_path / "given"
    plot_performance_profiles(_scores(), given, thresholds=np.linspace(0, 1, 5), reps=REPS)
    assert given.with_suffix(".svg").read_bytes() != stem.with_suffix(".svg").read_bytes()


def test_performance_profiles_reject_bad_input(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="no algorithms"):
        plot_performance_profiles({}, tmp_path / "x")
    with pytest.raises(ValueError, match=r"'ppo'.*non-empty"):
        plot_performance_profiles({"ppo": np.zeros((0, 3))}, tmp_path / "x")
