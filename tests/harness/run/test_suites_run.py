"""Every (algorithm, env) pair of the classic and dmc suites runs end to end on a tiny budget.

The suites pair algorithms with envs by action space (``per_env.algos``); this catches a
pairing a recipe cannot take before a user's multi-hour sweep does. Slow: ~40 runs.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from mlflow.tracking import MlflowClient

from rlbench.cli import main
from rlbench.harness.plan.config import resolve_sweep
from rlbench.harness.store.uri import tracking_uri

TINY = ["seeds=1", "frames=400", "eval_every=400", "eval_episodes=1",
        *(f"{algo}.learning_starts=100" for algo in ("dqn", "sac", "td3", "ddpg")),
        "ppo.num_envs=2", "ppo.rollout_steps=32", "ppo.minibatch_size=32", "a2c.num_envs=2"]


@pytest.mark.slow
# dm_control's tasks step slowly even on a tiny budget: nightly; classic in every CI run
@pytest.mark.parametrize("suite", ["classic", pytest.param("dmc", marks=pytest.mark.nightly)])
def test_every_pair_of_the_suite_runs(suite: str, tmp_path: Path) -> None:
    if suite == "dmc":
        pytest.importorskip("dm_control", reason="the rlbench[dmc] extra is needed")
    args = [f"suite={suite}", f"out_dir={tmp_path}", *TINY]
    expected = {run.name for run in resolve_sweep(args).runs}
    assert main(["run", *args]) == 0
    client = MlflowClient(tracking_uri(tmp_path))
    experiment = client.get_experiment_by_name(suite)
    runs = client.search_runs([experiment.experiment_id], "tags.kind = 'run'")
    assert {r.info.run_name for r in runs} == expected
    assert all(r.info.status == "FINISHED" for r in runs)
