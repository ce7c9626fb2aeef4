"""The Ray launcher: each run a Ray task with the CPUs (threads) and GPU its config asks for;
with ``seeds_per_process=K``, each batch of K seeds of one config a task.

``launcher=ray`` connects to ``ray.address`` (``auto``, ``ray://host:10001``...) or, when
none is given, starts a local Ray instance. Tasks call the same ``execute_batch`` as the
other launchers (``execute_run`` for one seed), so a run gives the same numbers on Ray as
alone. They report to the sweep's
tracking URI: on a cluster, point ``MLFLOW_TRACKING_URI`` at a shared ``mlflow server`` and
install rlbench on every node. Progress flows back through an actor on the driver's node,
which tasks never wait on (a blocked task would hand its CPUs to another run); Ctrl-C
cancels the tasks, which mark their runs KILLED.
"""

from __future__ import annotations

import contextlib
import os
import socket
import sys
import uuid
from typing import Any

from rlbench.errors import ConfigError
from rlbench.harness.plan.run_config import RunConfig, SweepConfig
from rlbench.harness.plan.seed_batches import seed_batches
from rlbench.harness.run.launchers import Launcher, Listener, SweepRecord
from rlbench.harness.run.lost_runs import mark_dead
from rlbench.harness.run.runner import RunResult, one_line
from rlbench.harness.run.seed_batch import execute_batch
from rlbench.harness.store.tracking import Tracker
from rlbench.harness.store.uri import StoreLocation
from rlbench.numerics_environment import portable_environment

__all__ = ["RETRIES", "RayLauncher", "check_store_shared", "connect", "ray_launcher"]


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


def check_store_shared(store: StoreLocation) -> None:
    """Refuse the embedded SQLite store when the cluster has a node on another machine:
    that file is on this one, and tasks there would each make an empty store of their own.
    Call once connected."""
    # deferred: ray is optional, loaded only for launcher=ray
    import ray

    if store.database is None:
        return
    here = ray.util.get_node_ip_address()
    others = sorted({node["NodeManagerAddress"] for node in ray.nodes()
                     if node["Alive"] and node["NodeManagerAddress"] != here})
    if others:
        raise ConfigError(
            f"launcher=ray with the embedded store ({store.uri}): the cluster has nodes on other "
            f"machines ({', '.join(others[:5])}), which cannot reach this machine's SQLite "
            "file. Start a shared `mlflow server` and point MLFLOW_TRACKING_URI at it")


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

# How many times a run whose Ray worker or node died is started again (Ray's own task
# retries stay off: a retry must first mark the dead attempt, which only the driver can).
RETRIES = 2


class _Progress:
    """What the tasks tell the driver (a run started, its metrics, a line to print), in
    the order each task said it: an actor on the driver's node. A task sends without
    waiting for the answer: a task blocked in ``ray.get`` hands its CPUs back to Ray, which
    starts another run on them, so waiting on progress would run more runs than the node
    has CPUs."""

    def __init__(self) -> None:
        self._items: list[tuple[str, str, Any]] = []

    def put(self, item: tuple[str, str, Any]) -> None:
        self._items.append(item)

    def drain(self) -> list[tuple[str, str, Any]]:
        items, self._items = self._items, []
        return items

    def drain_nothing(self) -> None:
        """Answered once every item a caller sent before it is kept (a caller's calls to
        one actor run in the order it made them)."""


def _task(batch: list[RunConfig], store: StoreLocation, experiment_id: str, sweep_id: str,
          updates: Any, datasets: dict[str, str], token: str,
          dead: tuple[str, ...]) -> list[RunResult]:
    # deferred: ray is optional, loaded only for launcher=ray
    import ray

    os.environ["MLFLOW_TRACKING_URI"] = store.uri  # the driver's store, whatever the node's env
    os.environ.update(datasets)  # and the driver's dataset directories

    def report(run: RunConfig, values: dict[str, float]) -> None:
        updates.put.remote((run.identity, "update", values))

    def say(text: str) -> None:
        updates.put.remote((batch[0].identity, "say", text))

    for run in batch:  # Ray may have queued the task until now
        updates.put.remote((run.identity, "started", None))
    node = ray.get_runtime_context().get_node_id()
    try:
        return execute_batch(batch, Tracker(store, prepare=False), experiment_id, sweep_id,
                             on_update=report, say=say, token=token, dead=dead,
                             tags={"ray_node_id": node})
    finally:  # the runs have ended: what they said reaches the driver before their results
        with contextlib.suppress(ray.exceptions.RayError):  # a driver gone: no one to tell
            ray.get(updates.drain_nothing.remote())


def _death(err: Exception) -> str:
    """Why a task died, in one line (Ray's own messages run to many)."""
    name = type(err).__name__
    causes = {"NodeDiedError": "its node died", "WorkerCrashedError": "its worker died",
              "OutOfMemoryError": "its worker was killed for memory",
              "ActorDiedError": "its worker died", "OwnerDiedError": "its driver died",
              "ObjectLostError": "its result was lost"}
    return f"{causes.get(name, 'Ray lost it')} ({name})"


def ray_launcher(sweep: SweepConfig) -> Launcher:
    """Ray at ``sweep.ray_address`` (a local instance when None)."""
    return RayLauncher(sweep.ray_address, seeds_per_process=sweep.seeds_per_process)


class RayLauncher:
    """Every run (or batch of ``seeds_per_process`` seeds of one config) a Ray task;
    progress and results as they come. The runs of a task whose worker or node dies are
    marked KILLED and started again, up to ``retries`` times (``RunResult.retried`` says
    why, once a retry)."""

    name = "ray"

    def __init__(self, address: str | None, retries: int = RETRIES, seeds_per_process: int = 1):
        self.address, self.retries = address, retries
        self.seeds_per_process = seeds_per_process
        self._in_flight: dict[Any, tuple[list[RunConfig], str]] = {}  # each task's runs, token

    def describe(self) -> str:
        where = f"ray at {self.address or 'a local instance'}"
        if self.seeds_per_process > 1:
            where += f", {self.seeds_per_process} seeds a task"
        return where

    def check(self, store: StoreLocation) -> None:
        """The cluster answers, and its nodes can reach ``store``."""
        connect(self.address)
        check_store_shared(store)

    def cancel(self) -> None:
        """Cancel every task still running: each marks its run KILLED."""
        # deferred: ray is optional, loaded only for launcher=ray
        import ray

        for ref in self._in_flight:
            ray.cancel(ref)
        self._in_flight.clear()

    def run(self, runs: list[RunConfig], record: SweepRecord,
            listener: Listener) -> list[RunResult]:
        # deferred: ray is optional, loaded only for launcher=ray
        import ray
        from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy  # ray's too

        connect(self.address)
        tracker = record.tracker
        remote = ray.remote(_task)
        # on the driver's node: progress must not die with a worker node
        here = NodeAffinitySchedulingStrategy(ray.get_runtime_context().get_node_id(),
                                              soft=False)
        updates = ray.remote(_Progress).options(num_cpus=0, scheduling_strategy=here).remote()
        datasets = {name: os.environ[name] for name in DATASET_DIRS if name in os.environ}
        # a portable run's worker starts with its kernels pinned (numerics_environment)
        pinned = ({"env_vars": portable_environment()}
                  if any(run.numerics == "portable" for run in runs) else None)
        by_ref = self._in_flight
        by_identity = {run.identity: run for run in runs}
        retried: dict[str, list[str]] = {}  # by a batch's first run
        buried: dict[str, tuple[str, ...]] = {}  # the tokens of each batch's dead tasks

        def submit(batch: list[RunConfig], dead: tuple[str, ...] = ()) -> None:
            run = batch[0]  # the seeds of one config: one kind of task
            options = {"num_cpus": run.threads,
                       "num_gpus": 1 if run.device.startswith("cuda") else 0,
                       "max_retries": 0}
            if run.numerics == "portable":
                options["runtime_env"] = pinned
            token = uuid.uuid4().hex
            ref = remote.options(**options).remote(batch, tracker.location,
                                                   record.experiment_id, record.sweep_id,
                                                   updates, datasets, token, dead)
            by_ref[ref] = (batch, token)

        for batch in seed_batches(runs, self.seeds_per_process):
            submit(batch)
        results: dict[str, RunResult] = {}
        started: set[str] = set()

        def start(run: RunConfig) -> None:
            if run.identity not in started:
                started.add(run.identity)
                listener.started(run)

        while by_ref:
            done, _ = ray.wait(list(by_ref), num_returns=1, timeout=0.2)
            for identity, kind, payload in ray.get(updates.drain.remote()):
                start(by_identity[identity])
                if kind == "update":
                    listener.update(by_identity[identity], payload)
                elif kind == "say":
                    print(payload, file=sys.stderr)
            for ref in done:
                batch, token = by_ref.pop(ref)
                key = batch[0].identity
                try:
                    ended = ray.get(ref)
                except ray.exceptions.TaskCancelledError:
                    ended = [mark_dead(record, run, "its Ray task was cancelled",
                                       status="KILLED") for run in batch]
                except ray.exceptions.RayTaskError as err:  # the harness raised in it
                    ended = [mark_dead(record, run, f"its Ray task raised {one_line(err.cause)}")
                             for run in batch]
                except ray.exceptions.RayError as err:  # the worker or its node died
                    why = _death(err)
                    history = retried.setdefault(key, [])
                    if len(history) < self.retries:
                        for run in batch:
                            mark_dead(record, run, f"{why}; started again", status="KILLED")
                        history.append(why)
                        # every earlier task of the runs is dead, whether it claimed or not
                        buried[key] = (*buried.get(key, ()), token)
                        submit(batch, dead=buried[key])
                        continue
                    ended = [mark_dead(record, run, f"{why}, after {len(history)} retries")
                             for run in batch]
                for result in ended:
                    result.retried = list(retried.get(key, []))
                    results[result.config.identity] = result
                    start(result.config)  # a task that died before it could say so
                    listener.finished(result)
        return [results[run.identity] for run in runs]
