"""Run locks: a process holds a run's lock file while it runs it.

Locks are OS file locks (``flock``) under ``<out_dir>/locks/``; the OS drops them when their
process dies, SIGKILL included. Two kinds:

- ``<identity>.lock``, one per run, held for the whole run: resume tells another sweep's
  live attempt from a killed one, and two sweeps sharing an out dir never run one config
  at once.
- ``planning.lock``, held while a sweep reads and cleans the store before it starts, and
  for the moment a run takes its own lock: no run starts or ends while a sweep is planned,
  and planners wait for each other instead of refusing each other.
- ``sweep-<sweep record id>.lock``, held by a sweep's process while it lives (taken under
  the planning lock when its record is made): a later sweep marks the record of a sweep
  whose process died KILLED.

At most three lock files are open at a time. The files stay (empty) after their runs; a run
never started has none, which says at once that no process holds it. They are local:
sweeps on other machines, or into other out dirs, see each other through the claims in the
tracking store (``store.claims``).
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from filelock import FileLock, Timeout

from rlbench.harness.plan.run_config import RunConfig

__all__ = ["PLAN_WAIT_S", "RunInProgressError", "SweepLock", "is_running", "is_running_id",
           "is_sweep_alive",
           "planning", "run_lock"]

# How long to wait for another sweep's planning before giving up.
PLAN_WAIT_S = 600.0


class RunInProgressError(RuntimeError):
    """Another live process holds the lock (runs the run, or plans a sweep for too long)."""


def _lock(out_dir: Path, name: str) -> FileLock:
    path = out_dir / "locks" / f"{name}.lock"
    path.parent.mkdir(parents=True, exist_ok=True)
    return FileLock(path)


@contextmanager
def planning(out_dir: Path, timeout: float = PLAN_WAIT_S) -> Iterator[None]:
    """Hold ``out_dir``'s planning lock, waiting up to ``timeout`` s for another planner."""
    lock = _lock(out_dir, "planning")
    try:
        lock.acquire(timeout=timeout)
    except Timeout:
        raise RunInProgressError(f"another sweep has been planning in {out_dir} for "
                                 f"{timeout:.0f} s (lock {lock.lock_file})") from None
    try:
        yield
    finally:
        lock.release()


def is_running(out_dir: Path, config: RunConfig) -> bool:
    """Whether a live process holds ``config``'s run lock. Ask under ``planning``: no run
    can start or end between the answer and the end of the planning."""
    return is_running_id(out_dir, config.identity)


def is_running_id(out_dir: Path, identity: str) -> bool:
    """``is_running`` for the run of config identity ``identity``."""
    if not identity or not (out_dir / "locks" / f"{identity}.lock").exists():
        return False  # a lock file is made as it is first taken, and never removed
    lock = _lock(out_dir, identity)
    try:
        lock.acquire(timeout=0)
    except Timeout:
        return True
    lock.release()
    return False


@contextmanager
def run_lock(out_dir: Path, config: RunConfig, timeout: float) -> Iterator[None]:
    """Hold ``config``'s run lock for the body, waiting up to ``timeout`` s for another
    holder. It is taken under the planning lock, so never while a sweep is planned."""
    lock = _lock(out_dir, config.identity)
    deadline = time.monotonic() + timeout
    while True:
        with planning(out_dir):
            try:
                lock.acquire(timeout=0)
                break
            except Timeout:
                pass
        if time.monotonic() >= deadline:
            raise RunInProgressError(f"{config.name} is being run by another process into "
                                     f"{out_dir} (lock {lock.lock_file})")
        time.sleep(min(0.5, max(deadline - time.monotonic(), 0.0)))
    try:
        yield
    finally:
        lock.release()


class SweepLock:
    """The lock a sweep's process holds while it lives; ``release`` when it ends."""

    def __init__(self, out_dir: Path, sweep_id: str):
        self._lock = _lock(out_dir, f"sweep-{sweep_id}")
        self._lock.acquire(timeout=0)

    def release(self) -> None:
        self._lock.release()
        _remove(self._lock)


def is_sweep_alive(out_dir: Path, sweep_id: str) -> bool:
    """Whether a live process holds the sweep's lock. Ask under ``planning``: sweeps take
    their lock there, together with making their record."""
    lock = _lock(out_dir, f"sweep-{sweep_id}")
    try:
        lock.acquire(timeout=0)
    except Timeout:
        return True
    lock.release()
    _remove(lock)
    return False


def _remove(lock: FileLock) -> None:
    """Remove a released sweep lock's file; one that cannot be removed (a read-only out dir)
    stays, empty and unlocked, which means the same."""
    with contextlib.suppress(OSError):
        Path(lock.lock_file).unlink(missing_ok=True)
