"""A sweep: every run of the grid, tracked under one MLflow parent run, then a table."""

from __future__ import annotations

import time
from dataclasses import dataclass
from pathlib import Path

from rich.console import Console

from rlbench.harness.config import SweepConfig, check_devices_here
from rlbench.harness.launchers import run_local_pool, run_sequential
from rlbench.harness.progress import SweepProgress
from rlbench.harness.ray_launcher import connect, run_on_ray
from rlbench.harness.render import render, to_rich
from rlbench.harness.resume import plan_resume
from rlbench.harness.runner import RunResult
from rlbench.harness.table import summarize, summary_table, write_csv
from rlbench.harness.tracking import Tracker, environment_tags

__all__ = ["SweepResult", "run_sweep"]


@dataclass
class SweepResult:
    parent_run_id: str
    results: list[RunResult]
    summary_dir: Path
    tracking_uri: str

    @property
    def failed(self) -> list[RunResult]:
        return [r for r in self.results if r.status != "FINISHED"]


def _mark_stopped_runs_killed(tracker: Tracker, experiment_id: str, parent_id: str) -> None:
    """Runs of this sweep still RUNNING after an interrupt become KILLED: one stopped while
    it was being set up or logged, outside the part of a run that marks itself."""
    for run in tracker.runs(experiment_id, f"tags.`mlflow.parentRunId` = '{parent_id}'"):
        if run.info.status == "RUNNING":
            tracker.finish(run.info.run_id, "KILLED")


def _launcher_name(sweep: SweepConfig) -> str:
    if sweep.launcher == "ray":
        return f"ray at {sweep.ray_address or 'a local instance'}"
    return "sequential" if sweep.jobs == 1 else f"local pool of {sweep.jobs}"


def run_sweep(sweep: SweepConfig, console: Console | None = None) -> SweepResult:
    """Run every run of ``sweep`` not finished earlier; failed runs are recorded, the rest
    go on. ``sweep.jobs > 1`` runs that many at a time, each in its own process;
    ``launcher=ray`` makes each run a Ray task."""
    console = console or Console()
    suite = sweep.suite.name
    if sweep.launcher == "ray":
        connect(sweep.ray_address)
    else:
        check_devices_here(sweep)
    tracker = Tracker(sweep.out_dir)
    tracker.check_reachable()
    experiment_id = tracker.experiment(suite)  # the store and experiment exist before workers
    plan = plan_resume(tracker, experiment_id, sweep.runs)
    devices = sorted({run.device for run in sweep.runs})
    parent_id = tracker.start_sweep(experiment_id, suite, environment_tags(",".join(devices)))
    tracker.log_params(parent_id, {"runs": len(sweep.runs), "suite_file": str(sweep.suite.path),
                                   "jobs": sweep.jobs})
    console.print(f"rlbench: suite [bold]{suite}[/], {len(sweep.runs)} runs "
                  f"({len(plan.finished)} finished earlier, {len(plan.to_run)} to run, "
                  f"launcher {_launcher_name(sweep)}), tracking at {tracker.uri}")
    progress = SweepProgress(plan.to_run, console)
    order = {run.identity: index for index, run in enumerate(plan.to_run)}
    status = "KILLED"
    try:
        with progress:
            if sweep.launcher == "ray":
                run_on_ray(plan.to_run, tracker, experiment_id, parent_id, progress,
                           sweep.ray_address)
            elif sweep.jobs == 1:
                run_sequential(plan.to_run, tracker, experiment_id, parent_id, progress)
            else:
                run_local_pool(plan.to_run, tracker, experiment_id, parent_id, progress,
                               sweep.jobs)
        status = ("FINISHED" if all(r.status == "FINISHED" for r in progress.results)
                  else "FAILED")
    finally:  # after Ctrl-C too: the summary has every run that ended
        if status == "KILLED":
            _mark_stopped_runs_killed(tracker, experiment_id, parent_id)
        results = [*plan.finished, *sorted(progress.results,
                                           key=lambda r: order[r.config.identity])]
        rows = summarize(results)
        table = summary_table(rows, f"{suite}: final deterministic eval return over seeds")
        summary_dir = sweep.out_dir / "sweeps" / f"{suite}-{time.strftime('%Y%m%d-%H%M%S')}"
        summary_dir.mkdir(parents=True, exist_ok=True)
        (summary_dir / "summary.md").write_text(render([table], "markdown"))
        write_csv(rows, summary_dir / "summary.csv")
        tracker.log_artifacts(parent_id, [summary_dir / "summary.md", summary_dir / "summary.csv"])
        tracker.finish(parent_id, status)
    console.print(to_rich(table))
    for result in results:
        if result.status != "FINISHED":
            where = f" (traceback in MLflow run {result.run_id})" if result.run_id else ""
            console.print(f"[red]failed[/] {result.config.name}: {result.error}{where}")
    return SweepResult(parent_id, results, summary_dir, tracker.uri)
