"""Launchers: run a sweep's runs one after another, or ``jobs`` at a time in worker processes.

Both call ``execute_run`` on each run, so a run gives the same numbers whichever launcher
runs it (seeds and threads come from its config). The local pool starts one fresh
process per run (``spawn``: no state inherited from the parent or an earlier run) and
streams progress back through a pipe of its own. A run that raises is recorded as failed by
``execute_run`` itself; a worker process that dies (a segfault, the OOM killer) has its
MLflow run marked FAILED here, with the signal and the traceback Python's faulthandler
wrote. Ctrl-C or SIGTERM stops every worker: each marks its run KILLED. Workers also stop
(and mark their runs KILLED) when the sweep's process dies, SIGKILL included. After a run
that could not be recorded (a full disk), no further run starts.
"""

from __future__ import annotations

import contextlib
import multiprocessing as mp
import multiprocessing.connection
import os
import pickle
import signal
import threading
from pathlib import Path
from typing import Any, Protocol

from rlbench.harness.plan.config import RunConfig
from rlbench.harness.run.runner import FATAL_ERROR_FILE, RunResult, execute_run, one_line
from rlbench.harness.signals import deliver_deferred_signal, interrupt_worker_once
from rlbench.harness.store.tracking import Tracker

__all__ = ["Listener", "Listeners", "mark_dead", "not_started", "run_local_pool", "run_sequential"]

_JOIN_SECONDS = 30.0


class Listener(Protocol):
    """What a launcher reports: a run started, a progress update, a run ended."""

    def started(self, run: RunConfig) -> None: ...

    def update(self, run: RunConfig, values: dict[str, float]) -> None: ...

    def finished(self, result: RunResult) -> None: ...


class Listeners:
    """Several listeners heard as one, in order."""

    def __init__(self, *listeners: Listener):
        self._listeners = listeners

    def started(self, run: RunConfig) -> None:
        for listener in self._listeners:
            listener.started(run)

    def update(self, run: RunConfig, values: dict[str, float]) -> None:
        for listener in self._listeners:
            listener.update(run, values)

    def finished(self, result: RunResult) -> None:
        for listener in self._listeners:
            listener.finished(result)


def not_started(run: RunConfig, cause: RunResult) -> RunResult:
    """The result of a run a launcher did not start because ``cause`` could not be
    recorded: running it would lose its results the same way."""
    return RunResult(config=run, run_id="", status="KILLED", final_return=None, fps=None,
                     frames=0, seconds=0.0,
                     error=f"not started: {cause.config.name} {cause.error}")


def run_sequential(runs: list[RunConfig], tracker: Tracker, experiment_id: str,
                   parent_id: str, listener: Listener) -> list[RunResult]:
    """Each run in this process, in order; none after a run that could not be recorded."""
    results: list[RunResult] = []
    for run in runs:
        listener.started(run)
        stop = next((r for r in results if r.unrecorded), None)
        if stop is not None:
            result = not_started(run, stop)
        else:
            result = execute_run(run, tracker, experiment_id, parent_id,
                                 on_update=lambda values, run=run: listener.update(run, values))
        results.append(result)
        listener.finished(result)
        deliver_deferred_signal()  # a Ctrl-C at the end of that run stops the sweep here
    return results


def _die_with_parent() -> None:
    """SIGTERM to this worker when the sweep's process ends, however it ends (SIGKILL
    included): a worker never goes on running a run under a dead sweep."""
    parent = mp.parent_process()
    if parent is None:
        return

    def watch() -> None:
        mp.connection.wait([parent.sentinel])
        os.kill(os.getpid(), signal.SIGTERM)

    threading.Thread(target=watch, name="rlbench parent watch", daemon=True).start()


def _worker(run: RunConfig, out_dir: Path, experiment_id: str, parent_id: str,
            messages: mp.connection.Connection) -> None:
    interrupt_worker_once()
    _die_with_parent()

    def send(message: tuple[str, str, Any]) -> None:
        # a closed pipe: the sweep died, and the parent watch stops this run (KILLED) at once
        with contextlib.suppress(OSError):
            messages.send(message)

    try:
        result = execute_run(run, Tracker(out_dir, prepare=False), experiment_id, parent_id,
                             on_update=lambda values: send(("update", run.identity, values)))
    except KeyboardInterrupt:  # execute_run marked the run KILLED
        result = RunResult(config=run, run_id="", status="KILLED", final_return=None,
                           fps=None, frames=0, seconds=0.0, error="stopped by a signal")
    send(("result", run.identity, result))


def _exit_cause(exitcode: int | None) -> str:
    if exitcode is not None and exitcode < 0:
        try:
            name = signal.Signals(-exitcode).name
        except ValueError:
            name = f"signal {-exitcode}"
        return f"worker process died from {name} (exit code {exitcode})"
    return f"worker process died (exit code {exitcode})"


def mark_dead(tracker: Tracker, experiment_id: str, parent_id: str, run: RunConfig,
              error: str, status: str = "FAILED") -> RunResult:
    """The MLflow run of a worker that died without reporting is marked ``status`` with
    ``error``, and what its run dir holds (the config, a fatal error's traceback) is
    logged. If the store cannot be written, the result says so instead of raising."""
    run_id = ""
    try:
        matches = tracker.attempts(experiment_id, run,
                                   f"tags.`mlflow.parentRunId` = '{parent_id}'")
        for match in matches:
            if match.info.status == "RUNNING":
                run_id = match.info.run_id
                run_dir = Path(match.data.tags.get("run_dir", ""))
                fatal = run_dir / FATAL_ERROR_FILE
                if match.data.tags.get("run_dir") and fatal.is_file() and fatal.stat().st_size:
                    error += f"; its traceback is in {FATAL_ERROR_FILE}"
                    tracker.log_artifacts(run_id, [run_dir / "config.yaml", fatal])
                tracker.set_tags(run_id, {"error": error})
                tracker.finish(run_id, status)
    except Exception as err:
        error += f"; its MLflow run could not be marked {status} ({one_line(err)})"
    return RunResult(config=run, run_id=run_id, status=status, final_return=None, fps=None,
                     frames=0, seconds=0.0, error=error)


def run_local_pool(runs: list[RunConfig], tracker: Tracker, experiment_id: str,
                   parent_id: str, listener: Listener, jobs: int) -> list[RunResult]:
    """Up to ``jobs`` runs at a time, each in its own fresh process. Each worker reports
    through a pipe of its own: a worker killed mid-message (a segfault) takes only its own
    pipe with it, where a shared queue's lock would stay held and stall the others."""
    context = mp.get_context("spawn")
    pending = list(runs)
    active: dict[str, tuple[Any, RunConfig]] = {}
    pipes: dict[str, mp.connection.Connection] = {}  # each live worker's reports
    results: dict[str, RunResult] = {}
    try:
        while pending or active:
            stop = next((r for r in results.values() if r.unrecorded), None)
            while stop is not None and pending:
                run = pending.pop(0)
                listener.started(run)
                results[run.identity] = not_started(run, stop)
                listener.finished(results[run.identity])
            while pending and len(active) < jobs:
                run = pending.pop(0)
                receiver, sender = context.Pipe(duplex=False)
                process = context.Process(
                    target=_worker, name=f"rlbench {run.name}",
                    args=(run, tracker.out_dir, experiment_id, parent_id, sender))
                process.start()
                sender.close()  # the worker's end: its death closes the pipe
                active[run.identity] = (process, run)
                pipes[run.identity] = receiver
                listener.started(run)
            _drain(pipes, active, results, listener, timeout=0.2)
            for identity, (process, run) in list(active.items()):
                if process.exitcode is None:
                    continue
                process.join()
                while identity in pipes:  # its last words, up to the pipe's end
                    _drain(pipes, active, results, listener, timeout=1.0)
                del active[identity]
                if identity not in results:  # it died without reporting
                    results[identity] = mark_dead(tracker, experiment_id, parent_id, run,
                                                  _exit_cause(process.exitcode))
                    listener.finished(results[identity])
    except KeyboardInterrupt:
        _stop(active)
        raise
    return [results[run.identity] for run in runs]


def _drain(pipes: dict[str, mp.connection.Connection],
           active: dict[str, tuple[Any, RunConfig]], results: dict[str, RunResult],
           listener: Listener, timeout: float) -> None:
    """Hand every message the workers sent to the listener, waiting up to ``timeout`` for
    the first. A pipe at its end (its worker exited or died, maybe mid-message) is closed
    and dropped."""
    by_pipe = {pipe: identity for identity, pipe in pipes.items()}
    for pipe in mp.connection.wait(list(by_pipe), timeout=timeout):
        identity = by_pipe[pipe]
        try:
            while True:
                kind, _, payload = pipe.recv()
                if kind == "update" and identity in active:
                    listener.update(active[identity][1], payload)
                elif kind == "result":
                    results[identity] = payload
                    listener.finished(payload)
                if not pipe.poll():
                    break
        except (EOFError, OSError, pickle.UnpicklingError):  # ended, or cut mid-message
            pipe.close()
            del pipes[identity]


def _stop(active: dict[str, tuple[Any, RunConfig]]) -> None:
    """After Ctrl-C (which every worker also received) or SIGTERM (which only this process
    did): SIGTERM to each worker, which marks its run KILLED, then wait; a worker still
    alive after ``_JOIN_SECONDS`` is killed."""
    for process, _ in active.values():
        if process.is_alive():
            with contextlib.suppress(ProcessLookupError):
                os.kill(process.pid, signal.SIGTERM)
    for process, _ in active.values():
        process.join(_JOIN_SECONDS)
        if process.is_alive():
            process.kill()
            process.join()
