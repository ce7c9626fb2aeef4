"""Writes to a shared SQLite store: retried while another writer holds it, never cut short
by a signal."""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from typing import Any

from rlbench.harness.signals import signals_held

__all__ = ["with_retry"]

_LOCK_WAIT_SECONDS = 300.0


class _ReRaisedDatabaseErrors(logging.Filter):
    """Drops MLflow's log record of a database error it re-raises: the SQLite store logs
    "SQLAlchemy database error. The following exception is caught." with the whole
    traceback, then raises it as an ``MlflowException``, which reaches rlbench: retried
    ("database is locked") or reported as one line per run (a full disk). Every other
    MLflow record is kept."""

    def filter(self, record: logging.LogRecord) -> bool:
        return not str(record.msg).startswith("SQLAlchemy database error. The following "
                                              "exception is caught.")


logging.getLogger("mlflow.store.db.utils").addFilter(_ReRaisedDatabaseErrors())


def with_retry(call: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
    """``call(*args, **kwargs)``, retried while SQLite answers "database is locked".

    Concurrent runs share one SQLite store; a writer that finds it busy backs off (50 ms,
    doubling to 1 s) for up to five minutes instead of failing the run. A failed write is
    rolled back by the store, so a retry never duplicates a metric. Each attempt runs with
    Ctrl-C and SIGTERM held (``signals_held``); they stop the back-off at once.
    """
    delay, deadline = 0.05, time.monotonic() + _LOCK_WAIT_SECONDS
    while True:
        try:
            with signals_held():
                return call(*args, **kwargs)
        except Exception as exc:
            if "database is locked" not in str(exc) or time.monotonic() > deadline:
                raise
        time.sleep(delay)
        delay = min(delay * 2, 1.0)
