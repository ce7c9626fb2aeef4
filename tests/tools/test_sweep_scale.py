"""The sweep-scale measurement runs on a small store: every run reads as finished, and the
figures it reports are there and positive."""

from __future__ import annotations

from pathlib import Path

from tools.bench.sweep_scale import measure


def test_a_small_store_is_measured(tmp_path: Path) -> None:
    report = measure(tmp_path / "out", runs=3, new=2)
    assert set(report) == {"runs", "fill_s_per_run", "plan_rerun_s", "harness_s_per_run",
                           "store_mb"}
    assert report["runs"] == 3
    assert all(value > 0 for value in report.values())
    again = measure(tmp_path / "out", runs=3, new=2)  # the store is reused, not refilled
    assert "fill_s_per_run" not in again
