"""The false-alarm estimate of the gate, on synthetic pools of the regress suite's tasks."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from rlbench.harness.plan.config import resolve_sweep
from rlbench.harness.regress.reference import Reference, ReferenceTask, write_reference
from tools.reference.gate_false_alarms import false_alarms


def _write(path: Path, scores: dict[tuple[str, str, int], np.ndarray]) -> Path:
    tasks = [ReferenceTask(algo, task, {"budget": budget}, {}, 0, list(range(len(s))),
                           [float(v) for v in s]) for (algo, task, budget), s in scores.items()]
    write_reference(Reference("regress", tasks, {}), path)
    return path


@pytest.fixture
def keys(tmp_path: Path, monkeypatch) -> list[tuple[str, str, int]]:
    monkeypatch.setenv("MINARI_DATASETS_PATH", str(tmp_path / "minari"))  # nothing made
    sweep = resolve_sweep(["suite=regress"])
    return sorted({(run.algo, run.task, run.budget) for run in sweep.runs})


def test_a_pool_like_the_reference_rarely_alarms_and_a_worse_one_does(
        tmp_path: Path, keys: list[tuple[str, str, int]]) -> None:
    rng = np.random.default_rng(0)
    reference = _write(tmp_path / "reference.json",
                       {key: rng.normal(0, 20, 20) for key in keys})
    same = _write(tmp_path / "same.json", {key: rng.normal(0, 20, 30) for key in keys})
    result = false_alarms("regress", reference, same, sets=100, seed=0)
    assert result["candidate_seeds"] == 6 and len(result["tasks"]) == len(keys) == 3
    assert result["false_alarm_rate"] <= 0.05
    worse_key = keys[0]
    worse = _write(tmp_path / "worse.json", {
        key: rng.normal(-400 if key == worse_key else 0, 20, 30) for key in keys})
    result = false_alarms("regress", reference, worse, sets=50, seed=0)
    assert result["false_alarm_rate"] == 1.0
    name = f"{worse_key[0]} on {worse_key[1]}"
    assert result["tasks"][name]["verdicts"] == {"REGRESSION": 50}


def test_a_pool_that_cannot_serve_the_reference_is_refused(
        tmp_path: Path, keys: list[tuple[str, str, int]]) -> None:
    rng = np.random.default_rng(0)
    reference = _write(tmp_path / "reference.json", {key: rng.normal(0, 1, 20) for key in keys})
    small = _write(tmp_path / "small.json", {key: rng.normal(0, 1, 6) for key in keys})
    with pytest.raises(ValueError, match="the pool needs more than 6 seeds"):
        false_alarms("regress", reference, small, sets=1, seed=0)
    partial = _write(tmp_path / "partial.json", {key: rng.normal(0, 1, 30) for key in keys[1:]})
    with pytest.raises(ValueError, match="it has 0"):
        false_alarms("regress", reference, partial, sets=1, seed=0)
