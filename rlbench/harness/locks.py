"""Run locks: a process holds a run's lock file while it runs it.

The lock is an OS file lock (``flock``) on ``<out_dir>/locks/<identity>.lock``: the OS drops
it when its process dies, SIGKILL included. So resume can tell another sweep's live attempt
from a killed one, and two sweeps sharing an out dir never run one config at once. The lock
files stay (empty) after their runs. They are local files: sweeps on two machines sharing
one tracking server, or Ray tasks on other nodes, do not see each other's.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from contextlib import ExitStack, contextmanager
from pathlib import Path

from filelock import FileLock, Timeout

from rlbench.errors import ConfigError
from rlbench.harness.config import RunConfig

__all__ = ["RunInProgressError", "hold_all", "run_lock"]


class RunInProgressError(RuntimeError):
    """Another live process holds the run's lock (runs it, or plans a sweep with it)."""


@contextmanager
def run_lock(out_dir: Path, config: RunConfig, timeout: float = 0.0) -> Iterator[None]:
    """Hold ``config``'s lock, waiting up to ``timeout`` seconds for another holder."""
    path = out_dir / "locks" / f"{config.identity}.lock"
    path.parent.mkdir(parents=True, exist_ok=True)
    lock = FileLock(path)
    try:
        lock.acquire(timeout=timeout)
    except Timeout:
        raise RunInProgressError(f"{config.name} is being run by another process into "
                                 f"{out_dir} (lock {path})") from None
    try:
        yield
    finally:
        lock.release()


@contextmanager
def hold_all(out_dir: Path, configs: Iterable[RunConfig]) -> Iterator[None]:
    """Hold every run's lock, so that none starts or ends while a sweep is planned; refuse
    (ConfigError, nothing started) if a live process holds any of them."""
    with ExitStack() as stack:
        live = []
        for config in configs:
            try:
                stack.enter_context(run_lock(out_dir, config))
            except RunInProgressError:
                live.append(config.name)
        if live:
            raise ConfigError(f"another process is running {', '.join(live)} into {out_dir} "
                              "now: let it finish, or give another out_dir")
        yield
