"""A sweep against a real ``mlflow server`` on loopback: metrics, artifacts, resume, compare.

The server is started the way users start one (``mlflow server`` with a SQLite backend and
proxied artifacts); the sweep reaches it only through ``MLFLOW_TRACKING_URI``.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from mlflow.tracking import MlflowClient

from rlbench.cli import main

SUITE = """
algos: [ppo]
envs: [CartPole-v1]
seeds: 2
frames: 1024
eval_every: 256
eval_episodes: 2
per_algo:
  ppo: {num_envs: 4, rollout_steps: 64, epochs: 2, minibatch_size: 128}
"""


@pytest.mark.slow
def test_sweep_resume_and_compare_through_a_tracking_server(
        mlflow_server: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
        capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.setenv("MLFLOW_TRACKING_URI", mlflow_server)
    suite = tmp_path / "served.yaml"
    suite.write_text(SUITE)
    out = tmp_path / "out"
    assert main(["run", f"suite={suite}", f"out_dir={out}", "jobs=2"]) == 0
    assert not (out / "mlflow.db").exists(), "nothing may go to the embedded store"

    client = MlflowClient(mlflow_server)
    experiment = client.get_experiment_by_name("served")
    runs = client.search_runs([experiment.experiment_id], "tags.kind = 'run'")
    assert sorted(r.info.run_name for r in runs) == ["ppo/CartPole-v1/seed0",
                                                     "ppo/CartPole-v1/seed1"]
    for run in runs:
        assert run.info.status == "FINISHED"
        steps = [m.step for m in client.get_metric_history(run.info.run_id,
                                                           "eval/return_mean")]
        assert sorted(steps) == [256, 512, 768, 1024], "every eval point arrives"
        artifacts = {a.path for a in client.list_artifacts(run.info.run_id)}
        assert {"config.yaml", "curve.csv", "policy.pt"} <= artifacts
        curve = Path(client.download_artifacts(run.info.run_id, "curve.csv", str(tmp_path)))
        assert len(curve.read_text().splitlines()) == 1 + 4

    capsys.readouterr()
    assert main(["run", f"suite={suite}", f"out_dir={out}"]) == 0
    assert "2 finished earlier, 0 to run" in capsys.readouterr().out
    assert len(client.search_runs([experiment.experiment_id], "tags.kind = 'run'")) == 2

    assert main(["compare", "suite=served", f"out_dir={out}", "format=markdown",
                 "reps=100"]) == 0
    assert "| CartPole-v1 | ppo | 1,024 | 2 |" in capsys.readouterr().out
