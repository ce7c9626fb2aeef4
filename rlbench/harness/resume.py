"""Resuming a sweep: runs already finished with the same identity are not run again.

A run's identity is the hash of its resolved config and the rlbench version
(``RunConfig.identity``), stored as the ``config_hash`` tag of its MLflow run. Before a
sweep starts, finished runs are taken from the store as they are; failed, killed or
interrupted attempts (a run still marked RUNNING after its process was killed) are deleted
from the active view and run again, so each identity ends with exactly one run. A run
that a live process is running into the same out dir (it holds the run's lock,
``runner.run_lock``) is another sweep's work in progress: the sweep is refused before
anything starts, and that attempt is left alone.
"""

from __future__ import annotations

from dataclasses import dataclass

from mlflow.entities import Run

from rlbench.errors import ConfigError
from rlbench.harness.config import RunConfig
from rlbench.harness.runner import RunResult, run_is_live
from rlbench.harness.tracking import Tracker, with_retry

__all__ = ["ResumePlan", "plan_resume"]


@dataclass
class ResumePlan:
    to_run: list[RunConfig]
    finished: list[RunResult]
    superseded: list[str]  # run ids of earlier unfinished attempts, deleted


def _result_from_store(tracker: Tracker, config: RunConfig, run: Run) -> RunResult:
    history = with_retry(tracker.client.get_metric_history, run.info.run_id,
                         "eval/return_mean")
    last = max(history, key=lambda m: m.step) if history else None
    seconds = ((run.info.end_time or run.info.start_time) - run.info.start_time) / 1000
    return RunResult(
        config=config,
        run_id=run.info.run_id,
        status="FINISHED",
        final_return=last.value if last else None,
        fps=run.data.metrics.get("train/fps"),
        frames=int(last.step) if last else 0,
        seconds=seconds,
    )


def plan_resume(tracker: Tracker, experiment_id: str, runs: list[RunConfig]) -> ResumePlan:
    """Split ``runs`` into those to run and those finished earlier; delete stale attempts."""
    by_identity: dict[str, list[Run]] = {}
    for run in tracker.runs(experiment_id, "tags.kind = 'run'"):
        by_identity.setdefault(run.data.tags.get("config_hash", ""), []).append(run)
    live = [config.name for config in runs if run_is_live(tracker.out_dir, config)]
    if live:
        raise ConfigError(f"another process is running {', '.join(live)} into "
                          f"{tracker.out_dir} now: let it finish, or give another out_dir")
    plan = ResumePlan([], [], [])
    for config in runs:
        attempts = by_identity.get(config.identity, [])
        finished = [r for r in attempts if r.info.status == "FINISHED"]
        if finished:
            plan.finished.append(_result_from_store(tracker, config, finished[0]))
            continue
        for stale in attempts:
            tracker.delete(stale.info.run_id)
            plan.superseded.append(stale.info.run_id)
        plan.to_run.append(config)
    return plan
