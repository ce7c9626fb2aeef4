"""Resuming a sweep: runs already finished with the same identity are not run again.

A run's identity is the hash of its resolved config and the rlbench version
(``RunConfig.identity``), stored as the ``config_hash`` tag of its MLflow run. Before a
sweep starts, finished runs are taken from the store as they are; failed, killed or
interrupted attempts (a run still marked RUNNING after its process was killed) are deleted
from the active view and run again, so each identity ends with exactly one run. A run
that a live process is running into the same out dir (it holds the run's lock,
``locks.run_lock``) is another sweep's work in progress: the sweep is refused before
anything starts, and that attempt is left alone.
"""

from __future__ import annotations

from dataclasses import dataclass

from mlflow.entities import Run

from rlbench.harness.config import RunConfig
from rlbench.harness.locks import hold_all
from rlbench.harness.runner import RunResult, stored_result
from rlbench.harness.tracking import Tracker

__all__ = ["ResumePlan", "plan_resume"]


@dataclass
class ResumePlan:
    to_run: list[RunConfig]
    finished: list[RunResult]
    superseded: list[str]  # run ids of earlier unfinished attempts, deleted


def plan_resume(tracker: Tracker, experiment_id: str, runs: list[RunConfig]) -> ResumePlan:
    """Split ``runs`` into those to run and those finished earlier; delete stale attempts.

    Every run's lock is held while the store is read and stale attempts are deleted, so no
    run of another sweep starts or ends in between; a run a live process holds refuses
    the sweep (ConfigError) and its attempt is left alone.
    """
    plan = ResumePlan([], [], [])
    finished: list[tuple[RunConfig, Run]] = []
    with hold_all(tracker.out_dir, runs):
        by_identity: dict[str, list[Run]] = {}
        for run in tracker.runs(experiment_id, "tags.kind = 'run'"):
            by_identity.setdefault(run.data.tags.get("config_hash", ""), []).append(run)
        for config in runs:
            attempts = by_identity.get(config.identity, [])
            done = [r for r in attempts if r.info.status == "FINISHED"]
            if done:
                finished.append((config, done[0]))
                continue
            for stale in attempts:
                tracker.delete(stale.info.run_id)
                plan.superseded.append(stale.info.run_id)
            plan.to_run.append(config)
    plan.finished = [stored_result(tracker, config, run) for config, run in finished]
    return plan
