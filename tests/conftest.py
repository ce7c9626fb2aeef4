"""Shared fixtures: every test gets its own output directory and the embedded MLflow store."""

from __future__ import annotations

import pytest


@pytest.fixture(autouse=True)
def _isolated_tracking(monkeypatch: pytest.MonkeyPatch, tmp_path) -> None:
    """Tests never write to a user's tracking server or to the repository."""
    monkeypatch.delenv("MLFLOW_TRACKING_URI", raising=False)
    monkeypatch.chdir(tmp_path)
