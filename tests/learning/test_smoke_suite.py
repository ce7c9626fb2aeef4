"""The smoke suite end to end, as `rlbench run suite=smoke jobs=2` runs it (the command's own
process, which pins its kernels for the suite's numerics=auto): PPO must solve CartPole."""

from __future__ import annotations

import csv
import subprocess
import sys
from pathlib import Path

import pytest
from mlflow.tracking import MlflowClient

from rlbench.harness.store.uri import tracking_uri
from rlbench.numerics_environment import host_cannot_be_portable


@pytest.mark.slow
def test_smoke_suite_learns(tmp_path: Path) -> None:
    out = tmp_path / "smoke"
    done = subprocess.run([sys.executable, "-m", "rlbench.cli", "run", "suite=smoke", "jobs=2",
                           f"out_dir={out}"], capture_output=True, text=True, timeout=1200)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]

    client = MlflowClient(tracking_uri(out))
    experiment = client.get_experiment_by_name("smoke")
    runs = client.search_runs([experiment.experiment_id], "tags.kind = 'run'")
    mode = "native" if host_cannot_be_portable() else "portable"  # the command's numerics=auto
    final = {}
    for run in runs:
        assert run.info.status == "FINISHED"
        assert run.data.params.get("numerics", "native") == mode  # native records none
        history = sorted(client.get_metric_history(run.info.run_id, "eval/return_mean"),
                         key=lambda m: m.step)
        assert len(history) >= 5, "the eval curve is a metric series"
        final[run.info.run_name] = history[-1].value
    assert set(final) == {f"ppo/{env}/seed{i}" for env in ("CartPole-v1", "InvertedPendulum-v5")
                          for i in (0, 1)}
    for seed in (0, 1):
        assert final[f"ppo/CartPole-v1/seed{seed}"] >= 475
        assert final[f"ppo/InvertedPendulum-v5/seed{seed}"] >= 900

    (summary,) = (out / "sweeps").glob("smoke-*/summary.csv")
    with summary.open() as handle:
        rows = {row["env"]: row for row in csv.DictReader(handle)}
    assert float(rows["CartPole-v1"]["return_mean"]) >= 475
    assert int(rows["CartPole-v1"]["seeds"]) == 2
