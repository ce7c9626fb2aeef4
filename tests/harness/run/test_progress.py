"""The live sweep view counts runs done, running and failed, and prints each outcome."""

from __future__ import annotations

from rich.console import Console

from rlbench.harness.plan.config import resolve_sweep
from rlbench.harness.run.progress import SweepProgress
from rlbench.harness.run.runner import RunResult


def test_progress_counts_and_reports_each_run() -> None:
    runs = resolve_sweep(["seeds=2"]).runs[:3]
    console = Console(record=True, width=200, force_terminal=False)
    with SweepProgress(runs, console) as progress:
        total = progress._progress.tasks[progress._total]
        for run in runs:
            progress.started(run)
        assert total.fields["status"] == "0 done, 3 running, 0 failed"
        progress.update(runs[0], {"frames": 5000, "train/fps": 1234.0})
        progress.update(runs[0], {"frames": 10000, "eval/return_mean": 87.25})
        line = progress._progress.tasks[progress._tasks[runs[0].name]]
        assert line.completed == 10000 and line.fields["status"] == "1,234 fps  return 87.2"
        progress.finished(RunResult(runs[0], "id0", "FINISHED", 99.5, 1500.0, 100_000, 60.0))
        progress.finished(RunResult(runs[1], "id1", "FAILED", None, None, 0, 1.0,
                                    error="NonFiniteLossError: loss_objective"))
        assert total.fields["status"] == "1 done, 1 running, 1 failed"
        assert total.completed == 2
    text = console.export_text()
    assert f"done {runs[0].name}: return 99.5 at 100,000 frames (1,500 fps, 60 s)" in text
    assert f"failed {runs[1].name}: NonFiniteLossError: loss_objective" in text


def test_errors_and_names_are_printed_as_text_not_markup() -> None:
    runs = resolve_sweep([]).runs[:2]
    console = Console(record=True, width=200, force_terminal=False)
    error = "FloatingPointError: NaN in action [[nan], [nan]] at [bold]frame[/] 128"
    with SweepProgress(runs, console) as progress:
        progress.started(runs[0])
        progress.finished(RunResult(runs[0], "id0", "FAILED", None, None, 0, 1.0, error=error))
    assert f"failed {runs[0].name}: {error}" in console.export_text()


def test_a_run_past_its_budget_shows_the_frames_it_made() -> None:
    """Its last batch overshoots the budget: 10,240 frames of batches of 512 for 10,000."""
    (run,) = resolve_sweep(["algo=ppo", "env=CartPole-v1", "seeds=1", "frames=10000"]).runs
    with SweepProgress([run], Console(record=True, width=200)) as progress:
        progress.started(run)
        progress.update(run, {"frames": 10240})
        line = progress._progress.tasks[progress._tasks[run.name]]
        assert (line.completed, line.total) == (10240, 10240)
        progress.finished(RunResult(run, "id0", "FINISHED", 99.5, 1500.0, 10240, 6.0))
        assert (line.completed, line.total) == (10240, 10240)
