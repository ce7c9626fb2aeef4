"""Resuming into a store an older rlbench wrote: its finished runs are this config's runs
made by other code (rerun, or kept with ``reuse=code``), whichever tags name them."""

from __future__ import annotations

from pathlib import Path

from rlbench.harness.plan.config import resolve_sweep
from rlbench.harness.plan.run_config import RunConfig
from rlbench.harness.run.resume import plan_resume
from rlbench.harness.store.tracking import Tracker


def _finished(tracker: Tracker, experiment_id: str, parent_id: str, config: RunConfig,
              tags: dict[str, str]) -> str:
    run = tracker.client.create_run(experiment_id, run_name=config.name, tags={
        "mlflow.parentRunId": parent_id, "kind": "run", "suite": config.suite, **tags})
    tracker.finish(run.info.run_id, "FINISHED")
    return run.info.run_id


def test_older_tags_name_the_same_config_made_by_other_code(tmp_path: Path) -> None:
    runs = resolve_sweep(["algo=ppo", "env=CartPole-v1", "seeds=4"]).runs
    tracker = Tracker(tmp_path / "out")
    experiment_id = tracker.experiment(runs[0].suite)
    parent_id = tracker.start_sweep(experiment_id, runs[0].suite, {})
    # made before code was fingerprinted: the identity, without code, in config_hash
    _finished(tracker, experiment_id, parent_id, runs[0],
              {"config_hash": runs[0].config_identity})
    # made by other code, tagged as rlbench 0.4.0 tagged runs
    _finished(tracker, experiment_id, parent_id, runs[1],
              {"config_hash": "0" * 16, "config_identity": runs[1].config_identity})
    # made by other code, tagged as now
    _finished(tracker, experiment_id, parent_id, runs[2],
              {"identity": "1" * 16, "config_identity": runs[2].config_identity})
    # made by this code
    done = _finished(tracker, experiment_id, parent_id, runs[3],
                     {"identity": runs[3].identity, "config_identity": runs[3].config_identity})

    plan = plan_resume(tracker, experiment_id, runs)
    assert plan.other_code == [run.name for run in runs[:3]]
    assert plan.to_run == runs[:3]
    assert [r.run_id for r in plan.finished] == [done]

    plan = plan_resume(tracker, experiment_id, runs, reuse_code=True)
    assert plan.to_run == [] and plan.reused == [run.name for run in runs[:3]]
    reused_for = {result.config.name: tracker.client.get_run(result.run_id
                                                             ).data.tags.get("reused_for")
                  for result in plan.finished}
    assert reused_for == {**{run.name: f"{run.identity} (code {run.code}, reuse=code)"
                             for run in runs[:3]}, runs[3].name: None}


def test_the_attempts_of_an_identity_are_found_under_either_tag(tmp_path: Path) -> None:
    """A store of rlbench 0.4.0 holds this identity in ``config_hash``: its attempts (a
    killed one whose checkpoint a run resumes from) are the run's attempts, latest first."""
    config = resolve_sweep(["algo=ppo", "env=CartPole-v1"]).runs[0]
    tracker = Tracker(tmp_path / "out")
    experiment_id = tracker.experiment(config.suite)
    parent_id = tracker.start_sweep(experiment_id, config.suite, {})
    older = _finished(tracker, experiment_id, parent_id, config,
                      {"config_hash": config.identity})
    newer = _finished(tracker, experiment_id, parent_id, config, {"identity": config.identity})
    _finished(tracker, experiment_id, parent_id, config, {"identity": "2" * 16})
    found = tracker.attempts(experiment_id, config)
    assert [run.info.run_id for run in found] == [newer, older]
    assert [run.info.run_id for run in tracker.attempts(
        experiment_id, config, f"attributes.run_id = '{older}'")] == [older]
