"""What a launcher is: the ``Launcher`` protocol a sweep runs its runs through, the sweep
record it records them under and the ``Listener`` it reports to.

A sweep builds one launcher per sweep from its ``SweepConfig`` (``launcher_registry``),
checks it before anything is written, says what it is in its first line, runs the runs
still to run through it, and cancels it when Ctrl-C or SIGTERM stops the sweep.
``docs/guide/write-a-launcher.md`` says what each method owes the sweep.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Protocol, runtime_checkable

from rlbench.harness.plan.run_config import RunConfig, SweepConfig
from rlbench.harness.run.runner import RunResult
from rlbench.harness.store.tracking import Tracker
from rlbench.harness.store.uri import StoreLocation

__all__ = ["Launcher", "LauncherFactory", "Listener", "Listeners", "SweepRecord"]


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


@dataclass(frozen=True)
class SweepRecord:
    """Where every run of a sweep is recorded: the store, the suite's experiment and the
    id of the sweep's record in the store's bookkeeping experiment (what ``execute_run``
    takes besides the run)."""

    tracker: Tracker
    experiment_id: str
    sweep_id: str


@runtime_checkable
class Launcher(Protocol):
    """Where and how a sweep's runs run.

    ``check`` comes first, before the sweep writes anything; ``run`` runs every run and
    reports each start, progress and end to the listener; ``cancel`` stops what ``run``
    left in flight when Ctrl-C or SIGTERM (``KeyboardInterrupt``) stopped it."""

    name: str  # the value of ``launcher=`` that picks it

    def describe(self) -> str:
        """What it is, for the sweep's first line (``local pool of 4``, ``ray at auto``)."""
        ...

    def check(self, store: StoreLocation) -> None:
        """Raise ``ConfigError`` with one line (Ray not reachable, Slurm missing, a store
        the workers cannot reach: ``store.database`` is the embedded one's file) before
        anything is started or written."""
        ...

    def run(self, runs: list[RunConfig], record: SweepRecord,
            listener: Listener) -> list[RunResult]:
        """Run each of ``runs`` once (``execute_run`` where it runs) and return their
        results in the order of ``runs``. Each run's start and end go to ``listener`` as
        they happen; a run that raises, a worker that dies and a run never started each
        end with a result saying why, recorded in the store (``lost_runs``); after a
        result that could not be recorded, no further run starts."""
        ...

    def cancel(self) -> None:
        """Stop every run ``run`` left in flight, each recorded KILLED, and return once they
        are stopped; nothing when none is. The sweep calls it after ``run`` raised
        ``KeyboardInterrupt``, then raises that on."""
        ...


# A launcher for one sweep, made from its settings (``jobs``, ``ray_address``, ``slurm``).
LauncherFactory = Callable[[SweepConfig], Launcher]
