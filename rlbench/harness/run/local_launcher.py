"""The local launcher (``launcher=local``): a sweep's runs one after another in this process
(``jobs=1``), or ``jobs`` at a time in worker processes; with ``seeds_per_process=K``, the
seeds of one config K at a time in one process (``seed_batch``), a batch where a run was.

Both call ``execute_batch`` on each batch (``execute_run`` on a batch of one), so a run
gives the same numbers whichever way it runs (seeds and threads come from its config).
The local pool starts one fresh process per run or batch (``spawn``: no state inherited
from the parent or an earlier run) and streams progress back through a pipe of its own. A
run that raises is recorded as failed by ``execute_batch`` itself; a worker process that
dies (a segfault, the OOM killer) has the MLflow runs of its batch marked FAILED here, with
the signal and the traceback Python's faulthandler wrote. Ctrl-C or SIGTERM stops every
worker: each marks its runs KILLED. Workers also stop (and mark their
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
from rlbench.harness.plan.seed_batches import seed_batches
from rlbench.harness.run.launchers import Launcher, Listener, SweepRecord
from rlbench.harness.run.lost_runs import mark_dead, not_started
from rlbench.harness.run.runner import RunResult
from rlbench.harness.run.seed_batch import execute_batch
from rlbench.harness.signals import deliver_deferred_signal, interrupt_worker_once
from rlbench.harness.store.tracking import Tracker
from rlbench.harness.store.uri import StoreLocation

__all__ = ["LocalPool", "Sequential", "local_launcher"]

_JOIN_SECONDS = 30.0


def local_launcher(sweep: SweepConfig) -> Launcher:
    """``jobs=1``: each run (or batch of seeds) in this process; more: that many worker
    processes."""
    seeds = sweep.seeds_per_process
    return Sequential(seeds) if sweep.jobs == 1 else LocalPool(sweep.jobs, seeds)


def _per_process(seeds_per_process: int) -> str:
    return f", {seeds_per_process} seeds a process" if seeds_per_process > 1 else ""


class Sequential:
    """Each run in this process, in order; none after a run that could not be recorded.
    ``seeds_per_process``: the seeds of one config that many at a time."""

    name = "local"

    def __init__(self, seeds_per_process: int = 1):
        self.seeds_per_process = seeds_per_process

    def describe(self) -> str:
        return "sequential" + _per_process(self.seeds_per_process)

    def check(self, store: StoreLocation) -> None:
        """Nothing beyond the sweep's own checks: the runs run here."""

    def run(self, runs: list[RunConfig], record: SweepRecord,
            listener: Listener) -> list[RunResult]:
        results: dict[str, RunResult] = {}
        for batch in seed_batches(runs, self.seeds_per_process):
            for run in batch:
                listener.started(run)
            stop = next((r for r in results.values() if r.unrecorded), None)
            if stop is not None:
                ended = [not_started(run, stop) for run in batch]
            else:
                ended = execute_batch(batch, record.tracker, record.experiment_id,
                                      record.sweep_id, on_update=listener.update)
            for result in ended:
                results[result.config.identity] = result
                listener.finished(result)
            deliver_deferred_signal()  # a Ctrl-C at the end of that batch stops the sweep here
        return [results[run.identity] for run in runs]

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


def _worker(batch: list[RunConfig], store: StoreLocation, experiment_id: str, sweep_id: str,
            messages: mp.connection.Connection) -> None:
    interrupt_worker_once()
    _die_with_parent()

    def send(message: tuple[str, str, Any]) -> None:
        # a closed pipe: the sweep died, and the parent watch stops this run (KILLED) at once
        with contextlib.suppress(OSError):
            messages.send(message)

    try:
        results = execute_batch(
            batch, Tracker(store, prepare=False), experiment_id, sweep_id,
            on_update=lambda run, values: send(("update", run.identity, values)))
    except KeyboardInterrupt:  # execute_batch marked the runs KILLED
        results = [RunResult(config=run, run_id="", status="KILLED", final_return=None,
                             fps=None, frames=0, seconds=0.0, error="stopped by a signal")
                   for run in batch]
    for result in results:
        send(("result", result.config.identity, result))


def _exit_cause(exitcode: int | None) -> str:
    if exitcode is not None and exitcode < 0:
        try:
            name = signal.Signals(-exitcode).name
        except ValueError:
            name = f"signal {-exitcode}"
        return f"worker process died from {name} (exit code {exitcode})"
    return f"worker process died (exit code {exitcode})"


class LocalPool:
    """Up to ``jobs`` runs (or batches of ``seeds_per_process`` seeds) at a time, each in
    its own fresh process. Each worker reports through a pipe of its own: a worker killed
    mid-message (a segfault) takes only its own pipe with it, where a shared queue's lock
    would stay held and stall the others."""

    name = "local"

    def __init__(self, jobs: int, seeds_per_process: int = 1):
        self.jobs, self.seeds_per_process = jobs, seeds_per_process
        # each live worker and its batch, by the batch's first run
        self._active: dict[str, tuple[Any, list[RunConfig]]] = {}

    def describe(self) -> str:
        return f"local pool of {self.jobs}" + _per_process(self.seeds_per_process)

    def check(self, store: StoreLocation) -> None:
        """Nothing beyond the sweep's own checks: the workers run on this machine."""

    def run(self, runs: list[RunConfig], record: SweepRecord,
            listener: Listener) -> list[RunResult]:
        context = mp.get_context("spawn")
        pending = seed_batches(runs, self.seeds_per_process)
        active = self._active
        pipes: dict[str, mp.connection.Connection] = {}  # each live worker's reports
        results: dict[str, RunResult] = {}
        by_identity = {run.identity: run for run in runs}
        while pending or active:
            stop = next((r for r in results.values() if r.unrecorded), None)
            while stop is not None and pending:
                for run in pending.pop(0):
                    listener.started(run)
                    results[run.identity] = not_started(run, stop)
                    listener.finished(results[run.identity])
            while pending and len(active) < self.jobs:
                batch = pending.pop(0)
                receiver, sender = context.Pipe(duplex=False)
                process = context.Process(
                    target=_worker, name=f"rlbench {batch[0].name}",
                    args=(batch, record.tracker.location, record.experiment_id,
                          record.sweep_id, sender))
                process.start()
                sender.close()  # the worker's end: its death closes the pipe
                active[batch[0].identity] = (process, batch)
                pipes[batch[0].identity] = receiver
                for run in batch:
                    listener.started(run)
            _drain(pipes, by_identity, results, listener, timeout=0.2)
            for key, (process, batch) in list(active.items()):
                if process.exitcode is None:
                    continue
                process.join()
                while key in pipes:  # its last words, up to the pipe's end
                    _drain(pipes, by_identity, results, listener, timeout=1.0)
                del active[key]
                for run in batch:
                    if run.identity not in results:  # it died without reporting
                        results[run.identity] = mark_dead(record, run,
                                                          _exit_cause(process.exitcode))
                        listener.finished(results[run.identity])
        return [results[run.identity] for run in runs]

    def cancel(self) -> None:
        """After Ctrl-C (which every worker also received) or SIGTERM (which only this
        process did): SIGTERM to each worker, which marks its runs KILLED, then wait; a
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


def _drain(pipes: dict[str, mp.connection.Connection], runs: dict[str, RunConfig],
           results: dict[str, RunResult], listener: Listener, timeout: float) -> None:
    """Hand every message the workers sent to the listener, waiting up to ``timeout`` for
    the first. A pipe at its end (its worker exited or died, maybe mid-message) is closed
    and dropped."""
    by_pipe = {pipe: key for key, pipe in pipes.items()}
    for pipe in mp.connection.wait(list(by_pipe), timeout=timeout):
        key = by_pipe[pipe]
        try:
            while True:
                kind, identity, payload = pipe.recv()
                if kind == "update" and identity not in results:
                    listener.update(runs[identity], payload)
                elif kind == "result":
                    results[identity] = payload
                    listener.finished(payload)
                if not pipe.poll():
                    break
        except (EOFError, OSError, pickle.UnpicklingError):  # ended, or cut mid-message
            pipe.close()
            del pipes[key]
