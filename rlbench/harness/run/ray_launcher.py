"""The Ray launcher: each run a Ray task with the CPUs (threads) and GPU its config asks for.

``launcher=ray`` connects to ``ray.address`` (``auto``, ``ray://host:10001``...) or, when
none is given, starts a local Ray instance. Tasks call the same ``execute_run`` as the other
launchers, so a run gives the same numbers on Ray as alone. They report to the sweep's
tracking URI: on a cluster, point ``MLFLOW_TRACKING_URI`` at a shared ``mlflow server`` and
install rlbench on every node. Progress flows back through a Ray queue; Ctrl-C cancels the
tasks, which mark their runs KILLED.
"""

from __future__ import annotations

import os
import socket
from pathlib import Path
from typing import Any

from rlbench.errors import ConfigError
from rlbench.harness.plan.config import RunConfig
from rlbench.harness.run.launchers import Listener, mark_dead
from rlbench.harness.run.runner import RunResult, execute_run
from rlbench.harness.store.tracking import Tracker

__all__ = ["connect", "run_on_ray"]


def connect(address: str | None) -> None:
    """Join the Ray cluster at ``address`` (a local instance when None); a clear error if
    it cannot be reached, raised before the sweep starts anything."""
    # deferred: ray is optional, loaded only for launcher=ray
    import ray

    if ray.is_initialized():
        return
    _check_reachable(address)
    try:
        ray.init(address=address, include_dashboard=False, log_to_driver=False)
    except (ConnectionError, RuntimeError, ValueError) as err:
        raise ConfigError(f"cannot reach the Ray cluster at {address!r}: {err}") from err


def _check_reachable(address: str | None, timeout: float = 5.0) -> None:
    """A TCP connect to ``host:port`` first: ``ray.init`` retries an unreachable address
    without end."""
    if address is None or address == "auto":
        return
    host, _, port = address.removeprefix("ray://").rpartition(":")
    if not host or not port.isdigit():
        raise ConfigError(f"ray.address must be auto, host:port or ray://host:port, "
                          f"got {address!r}")
    try:
        socket.create_connection((host, int(port)), timeout=timeout).close()
    except OSError as err:
        raise ConfigError(f"cannot reach the Ray cluster at {address!r}: {err}") from err


DATASET_DIRS = ("D4RL_DATASET_DIR", "MINARI_DATASETS_PATH")


def _task(run: RunConfig, out_dir: Path, uri: str, experiment_id: str, parent_id: str,
          updates: Any, datasets: dict[str, str]) -> RunResult:
    os.environ["MLFLOW_TRACKING_URI"] = uri  # the driver's store, whatever the node's env
    os.environ.update(datasets)  # and the driver's dataset directories

    def report(values: dict[str, float]) -> None:
        updates.put((run.identity, values))

    updates.put((run.identity, None))  # started: Ray may have queued the task until now
    return execute_run(run, Tracker(out_dir, prepare=False), experiment_id, parent_id,
                       on_update=report)


def run_on_ray(runs: list[RunConfig], tracker: Tracker, experiment_id: str, parent_id: str,
               listener: Listener, address: str | None) -> list[RunResult]:
    """Submit every run as a Ray task; report progress and results as they come."""
    # deferred: ray is optional, loaded only for launcher=ray
    import ray
    from ray.util.queue import Queue

    connect(address)
    remote = ray.remote(_task)
    updates = Queue()
    by_ref: dict[Any, RunConfig] = {}
    by_identity = {run.identity: run for run in runs}
    datasets = {name: os.environ[name] for name in DATASET_DIRS if name in os.environ}
    for run in runs:
        options = {"num_cpus": run.threads,
                   "num_gpus": 1 if run.device.startswith("cuda") else 0,
                   "max_retries": 0}
        ref = remote.options(**options).remote(run, tracker.out_dir, tracker.uri,
                                               experiment_id, parent_id, updates,
                                               datasets)
        by_ref[ref] = run
    results: dict[str, RunResult] = {}
    started: set[str] = set()

    def start(run: RunConfig) -> None:
        if run.identity not in started:
            started.add(run.identity)
            listener.started(run)

    pending = list(by_ref)
    try:
        while pending:
            done, pending = ray.wait(pending, num_returns=1, timeout=0.2)
            while not updates.empty():
                identity, values = updates.get()
                start(by_identity[identity])
                if values is not None:
                    listener.update(by_identity[identity], values)
            for ref in done:
                run = by_ref[ref]
                try:
                    result = ray.get(ref)
                except (ray.exceptions.RayTaskError, ray.exceptions.WorkerCrashedError,
                        ray.exceptions.TaskCancelledError) as err:
                    result = mark_dead(tracker, experiment_id, parent_id, run,
                                       f"Ray task failed: {type(err).__name__}")
                results[run.identity] = result
                start(run)  # a task that died before it could say so
                listener.finished(result)
    except KeyboardInterrupt:
        for ref in pending:
            ray.cancel(ref)
        raise
    return [results[run.identity] for run in runs]
