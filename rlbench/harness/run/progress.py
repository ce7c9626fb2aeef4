"""Live view of a sweep: one line per run (frames, fps, latest return, ETA) and a total."""

from __future__ import annotations

from types import TracebackType

from rich.console import Console
from rich.progress import (
    BarColumn,
    MofNCompleteColumn,
    Progress,
    TaskID,
    TextColumn,
    TimeElapsedColumn,
    TimeRemainingColumn,
)
from rich.text import Text

from rlbench.harness.plan.run_config import RunConfig
from rlbench.harness.run.runner import ELSEWHERE, RunResult

__all__ = ["SweepProgress"]


class SweepProgress:
    """Context manager that renders the sweep's progress on ``console``.

    ``results`` keeps every run's result as it arrives, so a sweep stopped by Ctrl-C still
    knows the runs that ended before.
    """

    def __init__(self, runs: list[RunConfig], console: Console):
        self.console = console
        self._progress = Progress(
            TextColumn("{task.description}", markup=False),
            BarColumn(bar_width=24),
            MofNCompleteColumn(),
            TextColumn("{task.fields[status]}"),
            TimeElapsedColumn(),
            TimeRemainingColumn(),
            console=console,
        )
        self._total = self._progress.add_task("sweep", total=len(runs), status="")
        self._tasks: dict[str, TaskID] = {
            run.name: self._progress.add_task(f"  {run.name}", total=run.budget,
                                              status="pending", start=False)
            for run in runs
        }
        self._done = self._failed = self._running = self._finished_elsewhere = 0
        self.results: list[RunResult] = []

    def __enter__(self) -> SweepProgress:
        self._progress.__enter__()
        return self

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        self._progress.__exit__(exc_type, exc, tb)

    def _count(self) -> None:
        elsewhere = (f", {self._finished_elsewhere} finished elsewhere"
                     if self._finished_elsewhere else "")
        self._progress.update(self._total, status=f"{self._done} done{elsewhere}, "
                                                  f"{self._running} running, "
                                                  f"{self._failed} failed")

    def started(self, run: RunConfig) -> None:
        self._progress.start_task(self._tasks[run.name])
        self._progress.update(self._tasks[run.name], status="running")
        self._running += 1
        self._count()

    def update(self, run: RunConfig, values: dict[str, float]) -> None:
        task = self._tasks[run.name]
        fields = self._progress.tasks[task].fields
        status = fields.get("status", "")
        if run.throughput_metric in values:
            fields["fps"] = values[run.throughput_metric]
        if "eval/return_mean" in values:
            fields["ret"] = values["eval/return_mean"]
        if "fps" in fields:
            status = f"{fields['fps']:,.0f} " + ("steps/s" if run.offline else "fps")
        if "ret" in fields:
            status += f"  return {fields['ret']:.1f}"
        self._progress.update(task, **_done_of(values["frames"], run.budget), status=status)

    def finished(self, result: RunResult) -> None:
        self.results.append(result)
        task = self._tasks[result.config.name]
        if result.status == "FINISHED" and result.finished_by is not None:
            self._finished_elsewhere += 1
            ret = "—" if result.final_return is None else f"{result.final_return:.1f}"
            line = Text.assemble(("finished elsewhere", "yellow"),
                                 f" {result.config.name}: return {ret} at {result.frames:,} "
                                 f"{result.config.unit} (by {result.finished_by})")
            self._progress.update(task, **_done_of(result.frames, result.config.budget))
        elif result.status == "FINISHED":
            self._done += 1
            ret = "—" if result.final_return is None else f"{result.final_return:.1f}"
            line = Text.assemble(("done", "green"), f" {result.config.name}: return {ret} at "
                                 f"{result.frames:,} {result.config.unit} ({result.fps or 0:,.0f}"
                                 f" {'steps/s' if result.config.offline else 'fps'}, "
                                 f"{result.seconds:.0f} s)")
            self._progress.update(task, **_done_of(result.frames, result.config.budget))
        else:  # errors quote user data: printed as text, never read as markup
            colour = "yellow" if result.status == ELSEWHERE else "red"
            self._failed += result.status != ELSEWHERE
            word = result.status.lower()
            line = Text.assemble((word, colour), f" {result.config.name}: {result.error}")
            self._progress.update(task, status=f"[{colour}]{word}[/]")
        self._progress.stop_task(task)
        self._running -= 1
        self._progress.update(self._total, advance=1)
        self._count()
        self._progress.console.print(line)


def _done_of(progress: float, budget: int) -> dict[str, float]:
    """A run's bar at ``progress`` frames or steps: a run that ends past its budget (its
    last batch overshoots it: 10,240 frames of 512 for a budget of 10,000) shows what it
    did, 10,240/10,240."""
    return {"completed": progress, "total": max(progress, budget)}
