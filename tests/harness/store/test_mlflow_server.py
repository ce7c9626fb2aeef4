"""A sweep against a real ``mlflow server`` on loopback: metrics, artifacts, resume, compare.

The server is started the way users start one (``mlflow server`` with a SQLite backend and
proxied artifacts); the sweep reaches it only through ``MLFLOW_TRACKING_URI``.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from mlflow.entities import Metric
from mlflow.tracking import MlflowClient

from rlbench.cli import main
from rlbench.harness.store import server_read

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


def test_metric_histories_come_in_bulk_equal_to_the_clients_run_by_run(
        mlflow_server: str, monkeypatch: pytest.MonkeyPatch) -> None:
    client = MlflowClient(mlflow_server)
    experiment = client.create_experiment("bulk")
    ids = []
    for index in range(3):
        run_id = client.create_run(experiment).info.run_id
        points = [Metric(key, float(step * index), 1000 + step, step)
                  for step in (512, 256, 768) for key in ("eval/return_mean", "other")]
        client.log_batch(run_id, metrics=points)
        ids.append(run_id)
    keys = ("eval/return_mean", "other")
    expected = {(run_id, key): sorted(client.get_metric_history(run_id, key),
                                      key=lambda m: (m.step, m.timestamp))
                for run_id in ids for key in keys}

    def as_tuples(histories):
        return {k: [(m.key, m.value, m.timestamp, m.step) for m in v]
                for k, v in histories.items()}

    assert as_tuples(server_read.metric_histories(mlflow_server, ids, keys)) == as_tuples(
        expected)
    monkeypatch.setattr(server_read, "RUNS_PER_REQUEST", 2)  # several requests a key
    assert as_tuples(server_read.metric_histories(mlflow_server, ids, keys)) == as_tuples(
        expected)
    monkeypatch.setattr(server_read, "POINTS_PER_REQUEST", 3)  # answers at the cap
    assert as_tuples(server_read.metric_histories(mlflow_server, ids, keys)) == as_tuples(
        expected)
    monkeypatch.setattr(server_read, "ENDPOINT", "/ajax-api/2.0/mlflow/metrics/no-such-read")
    assert server_read.metric_histories(mlflow_server, ids, keys) is None
