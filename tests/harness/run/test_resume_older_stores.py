"""Resuming into a store an older rlbench wrote: its finished runs are this config's runs
made by other code (rerun, or kept with ``reuse=code``), whichever tags name them; its
sweeps and ledgers, kept in the suites' experiments, are read where they are."""

from __future__ import annotations

import dataclasses
from pathlib import Path

from mlflow.tracking import MlflowClient

from rlbench.harness.plan.config import resolve_sweep
from rlbench.harness.plan.run_config import RunConfig
from rlbench.harness.run.resume import plan_resume
from rlbench.harness.store.claims import LEDGER_POINTER, LEDGER_TAG, Claim, Ledger
from rlbench.harness.store.provenance import host_id
from rlbench.harness.store.tracking import Tracker
from rlbench.harness.store.uri import tracking_uri


def _older_experiment(tracker: Tracker, suite: str) -> str:
    """A suite's experiment as an older rlbench made it: no done index."""
    return tracker.client.create_experiment(suite)


def _finished(tracker: Tracker, experiment_id: str, parent_id: str, config: RunConfig,
              tags: dict[str, str]) -> str:
    run = tracker.client.create_run(experiment_id, run_name=config.name, tags={
        "mlflow.parentRunId": parent_id, "kind": "run", "suite": config.suite, **tags})
    tracker.finish(run.info.run_id, "FINISHED")
    return run.info.run_id


def test_older_tags_name_the_same_config_made_by_other_code(tmp_path: Path) -> None:
    runs = resolve_sweep(["algo=ppo", "env=CartPole-v1", "seeds=4"]).runs
    tracker = Tracker(tmp_path / "out")
    experiment_id = _older_experiment(tracker, runs[0].suite)
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
    assert tracker.indexed(experiment_id), "the first plan wrote the done index"
    assert plan_resume(tracker, experiment_id, runs) == plan, "the index plans alike"

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
    experiment_id = _older_experiment(tracker, config.suite)
    parent_id = tracker.start_sweep(experiment_id, config.suite, {})
    older = _finished(tracker, experiment_id, parent_id, config,
                      {"config_hash": config.identity})
    newer = _finished(tracker, experiment_id, parent_id, config, {"identity": config.identity})
    _finished(tracker, experiment_id, parent_id, config, {"identity": "2" * 16})
    found = tracker.attempts(experiment_id, config)
    assert [run.info.run_id for run in found] == [newer, older]
    assert [run.info.run_id for run in tracker.attempts(
        experiment_id, config, f"attributes.run_id = '{older}'")] == [older]


def _older_ledger(tracker: Tracker, experiment_id: str, shard: str) -> str:
    """A ledger run where an older rlbench made it: in the suite's experiment, found by its
    pointer experiment."""
    run_id = tracker.client.create_run(experiment_id, run_name=f"rlbench claims {shard}",
                                       tags={"kind": "ledger"}).info.run_id
    pointer = tracker.client.create_experiment(
        LEDGER_POINTER.format(experiment_id=experiment_id, shard=shard),
        tags={LEDGER_TAG: run_id})
    tracker.client.delete_experiment(pointer)
    tracker.finish(run_id, "FINISHED")
    return run_id


def test_an_older_layout_keeps_its_ledger_and_its_dead_sweeps_are_closed(
        tmp_path: Path) -> None:
    """A store whose sweeps were parent runs and whose ledgers were runs in the suite's
    experiment: a live claim there is honoured, new claims go on in that ledger, and a
    dead sweep's parent run and its RUNNING child are closed."""
    live, free = resolve_sweep(["algo=ppo", "env=CartPole-v1", "seeds=2", "frames=256",
                                "eval_every=256", "eval_episodes=1", "ppo.num_envs=4",
                                "ppo.rollout_steps=64"]).runs
    out = tmp_path / "out"
    client = MlflowClient(tracking_uri(out))  # the store, before any Tracker opened it
    experiment_id = client.create_experiment(live.suite)
    tracker = Tracker(out)
    ledger = _older_ledger(tracker, experiment_id, live.identity[0])
    elsewhere = dataclasses.replace(Claim.new(live.identity, 0, Path("/elsewhere")),
                                    host="other-host/boot")
    client.log_param(ledger, elsewhere.key, elsewhere.value())
    client.create_run(experiment_id, tags={**elsewhere.tags(), "kind": "run",
                                           "identity": live.identity})
    dead_sweep = client.create_run(experiment_id, tags={
        "kind": "sweep", "suite": live.suite, "out_dir": str(out.resolve()),
        "host_id": host_id()}).info.run_id
    orphan = client.create_run(experiment_id, tags={
        "mlflow.parentRunId": dead_sweep, "kind": "run", "identity": "3" * 16}).info.run_id

    experiment = tracker.experiment(live.suite)
    assert experiment == experiment_id
    plan = plan_resume(tracker, experiment, [live, free])
    assert plan.elsewhere == [(live, elsewhere)] and plan.to_run == [free]
    assert client.get_run(dead_sweep).info.status == "KILLED"
    assert client.get_run(orphan).info.status == "KILLED"
    if free.identity[0] == live.identity[0]:
        assert Ledger(client, experiment, free.identity).run_id == ledger
    assert Ledger(client, experiment, live.identity).latest() == elsewhere
