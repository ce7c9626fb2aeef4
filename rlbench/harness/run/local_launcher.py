"""The local launcher (``launcher=local``): a sweep's runs one after another in this process
(``jobs=1``), or ``jobs`` at a time in worker processes.

Both call ``execute_run`` on each run, so a run gives the same numbers whichever way it
runs (seeds and threads come from its config). The local pool starts one fresh process per
run (``spawn``: no state inherited from the parent or an earlier run) and streams progress
back through a pipe of its own. A run that raises is recorded as failed by ``execute_run``
itself; a worker process that dies (a segfault, the OOM killer) has its MLflow run marked
FAILED here, with the signal and the traceback Python's faulthandler wrote. Ctrl-C or
SIGTERM stops every worker: each marks its run KILLED. Workers also stop (and mark their
runs KILLED) when the sweep's process dies, SIGKILL included. After a run that could not
be recorded (a full disk), no further run starts.
"""

from __future__ import annotations

import contextlib
import multiprocessing as mp
import multiprocessing.connection
import os
import pickle
import signal
import threading
from typing import Any

from rlbench.harness.plan.run_config import RunConfig, SweepConfig
from rlbench.harness.run.launchers import Launcher, Listener, SweepRecord
from rlbench.harness.run.lost_runs import mark_dead, not_started
from rlbench.harness.run.runner import RunResult, execute_run
from rlbench.harness.signals import deliver_deferred_signal, interrupt_worker_once
from rlbench.harness.store.tracking import Tracker
from rlbench.harness.store.uri import StoreLocation

__all__ = ["LocalPool", "Sequential", "local_launcher"]

_JOIN_SECONDS = 30.0


def local_launcher(sweep: SweepConfig) -> Launcher:
    """``jobs=1``: each run in this process; more: that many worker processes."""
    return Sequential() if sweep.jobs == 1 else LocalPool(sweep.jobs)


class Sequential:
    """Each run in this process, in order; none after a run that could not be recorded."""

    name = "local"

    def describe(self) -> str:
        return "sequential"

    def check(self, store: StoreLocation) -> None:
        """Nothing beyond the sweep's own checks: the runs run here."""

    def run(self, runs: list[RunConfig], record: SweepRecord,
            listener: Listener) -> list[RunResult]:
        results: list[RunResult] = []
        for run in runs:
            listener.started(run)
            stop = next((r for r in results if r.unrecorded), None)
            if stop is not None:
                result = not_started(run, stop)
            else:
                result = execute_run(
                    run, record.tracker, record.experiment_id, record.sweep_id,
                    on_update=lambda values, run=run: listener.update(run, values))
            results.append(result)
            listener.finished(result)
            deliver_deferred_signal()  # a Ctrl-C at the end of that run stops the sweep here
        return results

    def cancel(self) -> None:
        """Nothing to stop: the run in progress took the signal and marked itself KILLED."""


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


def _worker(run: RunConfig, store: StoreLocation, experiment_id: str, sweep_id: str,
            messages: mp.connection.Connection) -> None:
    interrupt_worker_once()
    _die_with_parent()

    def send(message: tuple[str, str, Any]) -> None:
        # a closed pipe: the sweep died, and the parent watch stops this run (KILLED) at once
        with contextlib.suppress(OSError):
            messages.send(message)

    try:
        result = execute_run(run, Tracker(store, prepare=False), experiment_id, sweep_id,
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


class LocalPool:
    """Up to ``jobs`` runs at a time, each in its own fresh process. Each worker reports
    through a pipe of its own: a worker killed mid-message (a segfault) takes only its own
    pipe with it, where a shared queue's lock would stay held and stall the others."""

    name = "local"

    def __init__(self, jobs: int):
        self.jobs = jobs
        self._active: dict[str, tuple[Any, RunConfig]] = {}  # each live worker and its run

    def describe(self) -> str:
        return f"local pool of {self.jobs}"

    def check(self, store: StoreLocation) -> None:
        """Nothing beyond the sweep's own checks: the workers run on this machine."""

    def run(self, runs: list[RunConfig], record: SweepRecord,
            listener: Listener) -> list[RunResult]:
        context = mp.get_context("spawn")
        pending = list(runs)
        active = self._active
        pipes: dict[str, mp.connection.Connection] = {}  # each live worker's reports
        results: dict[str, RunResult] = {}
        while pending or active:
            stop = next((r for r in results.values() if r.unrecorded), None)
            while stop is not None and pending:
                run = pending.pop(0)
                listener.started(run)
                results[run.identity] = not_started(run, stop)
                listener.finished(results[run.identity])
            while pending and len(active) < self.jobs:
                run = pending.pop(0)
                receiver, sender = context.Pipe(duplex=False)
                process = context.Process(
                    target=_worker, name=f"rlbench {run.name}",
                    args=(run, record.tracker.location, record.experiment_id,
                          record.sweep_id, sender))
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
                    results[identity] = mark_dead(record, run, _exit_cause(process.exitcode))
                    listener.finished(results[identity])
        return [results[run.identity] for run in runs]

    def cancel(self) -> None:
        """After Ctrl-C (which every worker also received) or SIGTERM (which only this
        process did): SIGTERM to each worker, which marks its run KILLED, then wait; a
        worker still alive after ``_JOIN_SECONDS`` is killed."""
        for process, _ in self._active.values():
            if process.is_alive():
                with contextlib.suppress(ProcessLookupError):
                    os.kill(process.pid, signal.SIGTERM)
        for process, _ in self._active.values():
            process.join(_JOIN_SECONDS)
            if process.is_alive():
                process.kill()
                process.join()
        self._active.clear()


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
