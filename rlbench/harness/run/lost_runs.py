"""The results of runs a launcher lost: a worker that died before it reported, a run not
started because an earlier one could not be recorded. Each says why, and the store says it
too, so nothing a sweep started is left RUNNING or unaccounted for."""

from __future__ import annotations

from pathlib import Path

from rlbench.harness.plan.run_config import RunConfig
from rlbench.harness.run.launchers import SweepRecord
from rlbench.harness.run.runner import (
    FATAL_ERROR_DIR_TAG,
    FATAL_ERROR_FILE,
    RunResult,
    one_line,
)
from rlbench.harness.store.bookkeeping import of_sweep

__all__ = ["mark_dead", "not_started"]


def not_started(run: RunConfig, cause: RunResult) -> RunResult:
    """The result of a run a launcher did not start because ``cause`` could not be
    recorded: running it would lose its results the same way."""
    return RunResult(config=run, run_id="", status="KILLED", final_return=None, fps=None,
                     frames=0, seconds=0.0,
                     error=f"not started: {cause.config.name} {cause.error}")


def mark_dead(record: SweepRecord, run: RunConfig, error: str,
              status: str = "FAILED") -> RunResult:
    """The MLflow run of a worker that died without reporting is marked ``status`` with
    ``error``, and what its run dir holds (the config, a fatal error's traceback) is
    logged. If the store cannot be written, the result says so instead of raising."""
    tracker, run_id = record.tracker, ""
    try:
        matches = tracker.attempts(record.experiment_id, run,
                                   of_sweep(record.sweep_id))
        for match in matches:
            if match.info.status == "RUNNING":
                run_id = match.info.run_id
                tags = match.data.tags
                run_dir = Path(tags.get("run_dir", ""))
                # several seeds in one process: the traceback is in the first seed's run dir
                fatal = Path(tags.get(FATAL_ERROR_DIR_TAG) or run_dir) / FATAL_ERROR_FILE
                if tags.get("run_dir") and fatal.is_file() and fatal.stat().st_size:
                    error += f"; its traceback is in {FATAL_ERROR_FILE}"
                    tracker.log_artifacts(run_id, [run_dir / "config.yaml", fatal])
                tracker.set_tags(run_id, {"error": error})
                tracker.finish(run_id, status)
    except Exception as err:
        error += f"; its MLflow run could not be marked {status} ({one_line(err)})"
    return RunResult(config=run, run_id=run_id, status=status, final_return=None, fps=None,
                     frames=0, seconds=0.0, error=error)
