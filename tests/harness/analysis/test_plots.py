"""The plots of ``rlbench compare``: the files written (PNG magic, SVG text, byte-identical
reruns, input errors). The bands' numbers are tested with the statistics."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from rlbench.harness.analysis.plots import (
    is_plot_file,
    plot_aggregate_intervals,
    plot_learning_curves,
    plot_performance_profiles,
)
from rlbench.harness.analysis.statistics import Interval

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


_STAMPED_SVG = (b"<metadata>\n  <rdf:RDF>\n   <cc:Work>\n    <dc:creator>\n     <cc:Agent>\n"
                b"      <dc:title>rlbench compare</dc:title>")


@pytest.mark.parametrize(("head", "plot"), [
    (b"\x89PNG\r\n\x1a\n\x00\x00\x00\rIHDR" + bytes(17) + b"\x00\x00\x00\x18"
     b"tEXtSoftware\x00rlbench compare", True),
    (b'<?xml version="1.0"?>\n<!DOCTYPE svg PUBLIC "-//W3C//DTD SVG 1.1//EN"\n  "x.dtd">\n'
     b'<svg xmlns="http://www.w3.org/2000/svg">\n' + _STAMPED_SVG, True),
    (b"\xef\xbb\xbf<!-- drawn -->\n<svg width='1'>" + _STAMPED_SVG, True),
    (b"\x89PNG\r\n\x1a\n\x00\x00", False),  # a user's own PNG
    (b"\x89PNG\r\n\x1a\n\x00\x00\x00\x18tEXtSoftware\x00GIMP 2.10", False),
    (b'<?xml version="1.0"?>\n<svg xmlns="http://www.w3.org/2000/svg"><g/></svg>', False),
    (b'<?xml version="1.0"?>\n<notes>my own XML</notes>\n', False),
    (b"<!DOCTYPE html><html><body><svg width='1'>" + _STAMPED_SVG, False),
    (b"my notes mention <svg tags\n", False),
])
def test_only_a_plot_rlbench_drew_is_a_plot_file(tmp_path: Path, head: bytes,
                                                 plot: bool) -> None:
    """A plot replaces (or removes as stale) only a PNG or an SVG document that rlbench
    drew: a user's own image of the name, any XML, an HTML page with an inline SVG is
    someone else's file."""
    path = tmp_path / "curves.svg"
    path.write_bytes(head)
    assert is_plot_file(path) is plot


def test_what_is_drawn_is_known_as_drawn(tmp_path: Path) -> None:
    stem = tmp_path / "curves"
    for path in plot_learning_curves(_curves(), stem, reps=REPS, title="Runs"):
        assert is_plot_file(path), path


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
