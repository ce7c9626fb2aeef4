"""A sweep: every run of the grid, each tagged with the sweep's record, then a table."""

from __future__ import annotations

import time
from dataclasses import dataclass, field, replace
from pathlib import Path

from mlflow.exceptions import MlflowException
from rich.console import Console
from rich.text import Text

from rlbench.errors import ConfigError
from rlbench.harness.plan.numerics_mode import check_process_numerics
from rlbench.harness.plan.run_config import SweepConfig
from rlbench.harness.render import TextTable, counted, render, to_rich
from rlbench.harness.run.launcher_registry import launcher_for
from rlbench.harness.run.launchers import Launcher, Listener, Listeners, SweepRecord
from rlbench.harness.run.locks import SweepLock, planning
from rlbench.harness.run.progress import SweepProgress
from rlbench.harness.run.resume import ResumePlan, plan_resume
from rlbench.harness.run.run_dirs import run_dir_for
from rlbench.harness.run.runner import ELSEWHERE, FATAL_ERROR_FILE, RunResult, one_line
from rlbench.harness.run.summary import SummaryRow, summarize, summary_table, write_csv
from rlbench.harness.signals import sigterm_stops_sweep
from rlbench.harness.store.bookkeeping import of_sweep
from rlbench.harness.store.provenance import environment_tags
from rlbench.harness.store.tracking import Tracker
from rlbench.harness.store.uri import StoreLocation, check_reachable
from rlbench.owned_files import write_file

__all__ = ["SweepResult", "planned_counts", "run_sweep"]


@dataclass
class SweepResult:
    sweep_run_id: str
    results: list[RunResult]
    summary_dir: Path
    tracking_uri: str
    not_recorded: list[str] = field(default_factory=list)  # what could not be written

    @property
    def failed(self) -> list[RunResult]:
        """The runs that did not finish here, but those another live process holds."""
        return [r for r in self.results if r.status not in ("FINISHED", ELSEWHERE)]


def _mark_stopped_runs_killed(tracker: Tracker, experiment_id: str, sweep_id: str) -> None:
    """Runs of this sweep still RUNNING after an interrupt become KILLED: one stopped while
    it was being set up or logged, outside the part of a run that marks itself."""
    for run in tracker.runs(experiment_id, of_sweep(sweep_id)):
        if run.info.status == "RUNNING":
            tracker.finish(run.info.run_id, "KILLED")


def planned_counts(total: int, finished: int, elsewhere: int, to_run: int,
                   launcher: str) -> str:
    """The sweep header's counts: ``2,000 runs (2,000 finished earlier, 0 to run, launcher
    sequential)``."""
    away = f"{elsewhere:,} run elsewhere, " if elsewhere else ""
    return (f"{counted(total, 'run')} ({finished:,} finished earlier, {away}{to_run:,} to run, "
            f"launcher {launcher})")


def run_sweep(sweep: SweepConfig, console: Console | None = None,
              listener: Listener | None = None, *, part: bool = False) -> SweepResult:
    """Run every run of ``sweep`` not finished earlier; failed runs are recorded, the rest
    go on. ``sweep.launcher`` picks the launcher (``launcher_registry``): ``local`` runs
    ``sweep.jobs`` at a time (more than one: each in its own process), ``ray`` makes each
    run a Ray task, ``slurm`` a Slurm array task. Bad input (a device this machine lacks,
    an out dir that cannot be written, a damaged store, an unreachable server, an unknown
    partition or launcher) raises ``ConfigError`` before anything is written. Ctrl-C and
    SIGTERM mark the runs in progress KILLED, write the summary and raise
    ``KeyboardInterrupt`` (``Terminated``). ``listener`` hears what the progress display
    hears (``rlbench tune`` reads the evaluations as they come). ``part``: the sweep is a
    step of a larger command (a tune trial's seeds), which says what it planned and how it
    ended: no header, summary table or totals are printed (the summary is still recorded)."""
    console = console or Console()
    check_process_numerics(sweep.runs)
    # absolute before a worker sees it: Ray tasks start in their raylet's directory
    sweep = replace(sweep, out_dir=sweep.out_dir.absolute())
    suite = sweep.suite.name
    store = StoreLocation.of(sweep.out_dir)
    launcher = launcher_for(sweep)
    launcher.check(store)
    check_reachable(store.uri)
    with sigterm_stops_sweep():
        tracker = Tracker(store)
        try:
            experiment_id = tracker.experiment(suite)  # before any worker opens the store
            plan = plan_resume(tracker, experiment_id, sweep.runs,
                               reuse_code=sweep.reuse_code)
            devices = sorted({run.device for run in sweep.runs})
            with planning(sweep.out_dir):  # the record and its lock appear together
                sweep_id = tracker.start_sweep(
                    experiment_id, suite, {**environment_tags(",".join(devices)),
                                           "out_dir": str(sweep.out_dir.resolve())})
                lock = SweepLock(sweep.out_dir, sweep_id)
        except (MlflowException, OSError) as err:  # a full disk, a store that fails
            raise ConfigError(f"the sweep could not start: the store at {tracker.uri} could "
                              f"not be written ({one_line(err)})") from err
        for death in plan.deaths:
            console.print(Text.assemble(("died earlier", "red"), f": {death}"))
        try:
            return _run_planned(sweep, launcher, plan,
                                SweepRecord(tracker, experiment_id, sweep_id), console,
                                listener, part)
        finally:
            lock.release()


def _run_planned(sweep: SweepConfig, launcher: Launcher, plan: ResumePlan,
                 record: SweepRecord, console: Console,
                 listener: Listener | None, part: bool) -> SweepResult:
    suite = sweep.suite.name
    tracker, experiment_id, sweep_id = record.tracker, record.experiment_id, record.sweep_id
    tracker.log_params(sweep_id, {"runs": len(sweep.runs), "suite_file": str(sweep.suite.path),
                                   "jobs": sweep.jobs})
    counts = planned_counts(len(sweep.runs), len(plan.finished), len(plan.elsewhere),
                            len(plan.to_run), launcher.describe())
    if not part:
        console.print(Text.assemble("rlbench: suite ", (suite, "bold"),
                                    f", {counts}, tracking at {tracker.uri}"))
    elsewhere = [RunResult(config=config, run_id="", status=ELSEWHERE, final_return=None,
                           fps=None, frames=0, seconds=0.0,
                           error=f"being run by {claim.describe()}")
                 for config, claim in plan.elsewhere]
    if plan.other_code:
        shown = ", ".join(plan.other_code[:5]) + (f" and {len(plan.other_code) - 5} more"
                                                 if len(plan.other_code) > 5 else "")
        console.print(Text(f"run again from the start, finished earlier with other code: "
                           f"{shown} (a run's identity includes its code; reuse=code keeps "
                           "them when the change leaves the numbers alone)"))
    if plan.reused:
        shown = ", ".join(plan.reused[:5]) + (f" and {len(plan.reused) - 5} more"
                                             if len(plan.reused) > 5 else "")
        console.print(Text(f"reuse=code: {len(plan.reused)} finished runs made by other code "
                           f"count as done ({shown}); each is tagged reused_for"))
    progress = SweepProgress(plan.to_run, console)
    hears = progress if listener is None else Listeners(progress, listener)
    order = {run.identity: index for index, run in enumerate(plan.to_run)}
    status = "KILLED"
    try:
        with progress:
            try:
                launcher.run(plan.to_run, record, hears)
            except KeyboardInterrupt:  # Ctrl-C or SIGTERM: the runs in flight stop KILLED
                launcher.cancel()
                raise
        status = ("FINISHED" if all(r.status in ("FINISHED", ELSEWHERE)
                                    for r in progress.results) else "FAILED")
    finally:  # after Ctrl-C and SIGTERM too: the summary has every run that ended
        results = [*plan.finished, *elsewhere,
                   *sorted(progress.results, key=lambda r: order[r.config.identity])]
        rows = summarize(results)
        table = summary_table(rows, f"{suite}: final deterministic eval return over seeds")
        stamp = time.strftime("%Y%m%d-%H%M%S")
        summary_dir = sweep.out_dir / "sweeps" / f"{suite}-{stamp}-{sweep_id}"
        problems = _record_sweep(tracker, experiment_id, sweep_id, status, table, rows,
                                 summary_dir)
        if not part:
            console.print(to_rich(table))
            console.print(Text(_made_where(progress.results, len(plan.finished))))
        for result in results:
            for why in result.retried:
                console.print(Text.assemble(("retried", "yellow"),
                                            f" {result.config.name}: {why}"))
            if result.status == ELSEWHERE:
                console.print(Text.assemble(("elsewhere", "yellow"),
                                            f" {result.config.name}: {result.error}"))
            elif result.status != "FINISHED":
                where = _failure_files(sweep.out_dir, result)
                console.print(Text.assemble((result.status.lower(), "red"),
                                            f" {result.config.name}: {result.error}{where}"),
                              soft_wrap=True)  # one line: its path is copied
        for problem in problems:
            console.print(Text.assemble(("not recorded", "red"), f": {problem}"))
    return SweepResult(sweep_id, results, summary_dir, tracker.uri, problems)


def _failure_files(out_dir: Path, result: RunResult) -> str:
    """Where a run that did not finish left what it said when it stopped: its run
    directory's traceback (or fatal error) file, which its MLflow run keeps too."""
    run_dir = run_dir_for(out_dir, result.config)
    files = [run_dir / name for name in ("traceback.txt", FATAL_ERROR_FILE)
             if (run_dir / name).is_file()]
    kept = f", kept in MLflow run {result.run_id}" if result.run_id else ""
    if files:
        return f" (traceback: {', '.join(map(str, files))}{kept})"
    return f" (MLflow run {result.run_id})" if result.run_id else ""


def _made_where(results: list[RunResult], finished_earlier: int) -> str:
    """Which finished runs this driver made, and which another process finished while this
    one waited for them (their numbers are that process's)."""
    made = sum(r.status == "FINISHED" and r.finished_by is None for r in results)
    elsewhere = sum(r.status == "FINISHED" and r.finished_by is not None for r in results)
    return (f"rlbench: {counted(made, 'run')} made here, {elsewhere} finished elsewhere "
            f"during the sweep, {finished_earlier} finished earlier")


def _record_sweep(tracker: Tracker, experiment_id: str, sweep_id: str, status: str,
                  table: TextTable, rows: list[SummaryRow], summary_dir: Path) -> list[str]:
    """Mark runs a stop left RUNNING KILLED, write the summary, end the sweep's record. Each
    step that fails (a full disk, a read-only out dir) is said, not raised, and the next
    is tried; returns what could not be recorded."""
    problems = []
    steps = [("the summary", lambda: _write_summary(tracker, sweep_id, table, rows,
                                                    summary_dir)),
             (f"the sweep's end ({status})", lambda: tracker.finish(sweep_id, status))]
    if status == "KILLED":
        steps.insert(0, ("the stopped runs' end (KILLED)", lambda: _mark_stopped_runs_killed(
            tracker, experiment_id, sweep_id)))
    for what, step in steps:
        try:
            step()
        except Exception as err:
            problems.append(f"{what}: {one_line(err)}")
    return problems


def _write_summary(tracker: Tracker, sweep_id: str, table: TextTable,
                   rows: list[SummaryRow], summary_dir: Path) -> None:
    write_file(summary_dir / "summary.md", render([table], "markdown"), "summary file")
    write_csv(rows, summary_dir / "summary.csv")
    tracker.log_artifacts(sweep_id, [summary_dir / "summary.md", summary_dir / "summary.csv"])
