"""A command resolves its store once (``StoreLocation``) and passes that value down: a worker
opens the store the sweep resolved, whatever its own environment says."""

from __future__ import annotations

from pathlib import Path

import pytest

from rlbench.errors import ConfigError
from rlbench.harness.plan.command_keys import DEFAULT_OUT_DIR
from rlbench.harness.store.tracking import Tracker
from rlbench.harness.store.uri import StoreLocation


def test_the_default_store_is_the_default_out_dirs_database(tmp_path: Path) -> None:
    location = StoreLocation.of()
    assert location.out_dir == DEFAULT_OUT_DIR
    assert location.database == (tmp_path / DEFAULT_OUT_DIR / "mlflow.db").resolve()
    assert location.uri == f"sqlite:///{location.database}"


def test_a_tracking_uri_in_the_environment_names_the_store(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    server = "http://127.0.0.1:5999"
    monkeypatch.setenv("MLFLOW_TRACKING_URI", server)
    location = StoreLocation.of(tmp_path / "runs")
    assert (location.out_dir, location.uri, location.database) == (tmp_path / "runs", server,
                                                                   None)


def test_a_worker_opens_the_store_the_sweep_resolved(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The sweep prepares the store it resolved; a worker whose environment names another
    store still opens the sweep's, given the location rather than the out dir."""
    location = StoreLocation.of(tmp_path / "runs")
    Tracker(location)  # the sweep's own process: makes the store
    monkeypatch.setenv("MLFLOW_TRACKING_URI", f"sqlite:///{tmp_path / 'elsewhere.db'}")
    worker = Tracker(location, prepare=False)
    assert (worker.uri, worker.out_dir) == (location.uri, tmp_path / "runs")
    assert worker.experiment("smoke") == Tracker(location, prepare=False).experiment("smoke")
    assert not (tmp_path / "elsewhere.db").exists()
    assert Tracker(tmp_path / "runs", prepare=False).uri != location.uri  # what it would be


def test_a_location_of_an_unreadable_scheme_is_refused_before_anything_opens(
        tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="MLflow has no store for scheme 'gopher'"):
        StoreLocation.of(tmp_path / "runs", "gopher://x")
    assert not (tmp_path / "runs").exists()
