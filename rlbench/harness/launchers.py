"""Launchers: run a sweep's runs one after another, or ``jobs`` at a time in worker processes.

Both call ``execute_run`` on each run, so a run gives the same numbers whichever launcher
runs it (seeds and threads come from its config). The local pool starts one fresh
process per run (``spawn``: no state inherited from the parent or an earlier run) and
streams progress back through a queue. A run that raises is recorded as failed by
``execute_run`` itself; a worker process that dies (a segfault, the OOM killer) has its
MLflow run marked FAILED here. Ctrl-C stops every worker: each marks its run KILLED.
"""

from __future__ import annotations

import multiprocessing as mp
import queue
from pathlib import Path
from typing import Any, Protocol

from rlbench.harness.config import RunConfig
from rlbench.harness.runner import RunResult, execute_run
from rlbench.harness.tracking import Tracker

__all__ = ["Listener", "mark_dead", "run_local_pool", "run_sequential"]

_JOIN_SECONDS = 30.0


class Listener(Protocol):
    """What a launcher reports: a run started, a progress update, a run ended."""

    def started(self, run: RunConfig) -> None: ...

    def update(self, run: RunConfig, values: dict[str, float]) -> None: ...

    def finished(self, result: RunResult) -> None: ...


def run_sequential(runs: list[RunConfig], tracker: Tracker, experiment_id: str,
                   parent_id: str, listener: Listener) -> list[RunResult]:
    """Each run in this process, in order."""
    results = []
    for run in runs:
        listener.started(run)
        result = execute_run(run, tracker, experiment_id, parent_id,
                             on_update=lambda values, run=run: listener.update(run, values))
        results.append(result)
        listener.finished(result)
    return results


def _worker(run: RunConfig, out_dir: Path, experiment_id: str, parent_id: str,
            messages: Any) -> None:
    def report(values: dict[str, float]) -> None:
        messages.put(("update", run.identity, values))

    try:
        result = execute_run(run, Tracker(out_dir), experiment_id, parent_id, on_update=report)
    except KeyboardInterrupt:
        return  # execute_run marked the run KILLED
    messages.put(("result", run.identity, result))


def mark_dead(tracker: Tracker, experiment_id: str, parent_id: str, run: RunConfig,
              error: str) -> RunResult:
    """The MLflow run of a worker that died without reporting is marked FAILED."""
    matches = tracker.runs(experiment_id, f"tags.config_hash = '{run.identity}' "
                                          f"and tags.`mlflow.parentRunId` = '{parent_id}'")
    run_id = ""
    for match in matches:
        if match.info.status == "RUNNING":
            run_id = match.info.run_id
            tracker.set_tags(run_id, {"error": error})
            tracker.finish(run_id, "FAILED")
    return RunResult(config=run, run_id=run_id, status="FAILED", final_return=None, fps=None,
                     frames=0, seconds=0.0, error=error)


def run_local_pool(runs: list[RunConfig], tracker: Tracker, experiment_id: str,
                   parent_id: str, listener: Listener, jobs: int) -> list[RunResult]:
    """Up to ``jobs`` runs at a time, each in its own fresh process."""
    context = mp.get_context("spawn")
    messages = context.Queue()
    pending = list(runs)
    active: dict[str, tuple[Any, RunConfig]] = {}
    results: dict[str, RunResult] = {}
    try:
        while pending or active:
            while pending and len(active) < jobs:
                run = pending.pop(0)
                process = context.Process(
                    target=_worker, name=f"rlbench {run.name}",
                    args=(run, tracker.out_dir, experiment_id, parent_id, messages))
                process.start()
                active[run.identity] = (process, run)
                listener.started(run)
            _drain(messages, active, results, listener, timeout=0.2)
            for identity, (process, run) in list(active.items()):
                if process.exitcode is None:
                    continue
                process.join()
                if identity not in results:  # its last words may still be in the pipe
                    _drain(messages, active, results, listener, timeout=1.0)
                del active[identity]
                if identity not in results:  # it died without reporting
                    error = f"worker process died (exit code {process.exitcode})"
                    results[identity] = mark_dead(tracker, experiment_id, parent_id, run,
                                                  error)
                    listener.finished(results[identity])
    except KeyboardInterrupt:
        _stop(active)
        raise
    return [results[run.identity] for run in runs]


def _drain(messages: Any, active: dict[str, tuple[Any, RunConfig]],
           results: dict[str, RunResult], listener: Listener, timeout: float) -> None:
    """Hand every queued message to the listener, waiting up to ``timeout`` for the first."""
    while True:
        try:
            kind, identity, payload = messages.get(timeout=timeout)
        except queue.Empty:
            return
        timeout = 0.0
        if kind == "update" and identity in active:
            listener.update(active[identity][1], payload)
        elif kind == "result":
            results[identity] = payload
            listener.finished(payload)


def _stop(active: dict[str, tuple[Any, RunConfig]]) -> None:
    """After Ctrl-C (which every worker also received): wait for them, then terminate."""
    for process, _ in active.values():
        process.join(_JOIN_SECONDS)
        if process.is_alive():
            process.terminate()
            process.join()
