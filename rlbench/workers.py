"""The reply side of the pipe protocol that env and collector worker processes share.

A worker answers each command with ``(kind, payload)``: the expected kind, or ``"error"``
with its formatted traceback. A closed pipe means the worker process died.
"""

from __future__ import annotations

from multiprocessing.connection import Connection
from multiprocessing.process import BaseProcess
from typing import Any

__all__ = ["read_reply"]

# what a worker started by spawn or forkserver does first: import the parent's main module
_MAIN_AGAIN = ("; its own error is above. A worker started by spawn or forkserver imports "
               "the main module again: a script that starts workers at its top level (a "
               "ParallelEnv, a MultiCollector) must start them under "
               "`if __name__ == \"__main__\":`")


def _why(process: BaseProcess) -> str:
    """What likely killed a worker that died while starting: exit code 1 from a child
    started by spawn or forkserver is, most often, the main module run again."""
    method = getattr(process, "_start_method", None) or type(process).__name__.lower()
    return _MAIN_AGAIN if process.exitcode == 1 and (
        "spawn" in method or "forkserver" in method) else ""


def read_reply(conn: Connection, who: str, expect: str, process: BaseProcess) -> Any:
    """The payload of ``who``'s next reply; ``RuntimeError`` for a death (with
    ``process``'s exit code), an error (with the worker's traceback) or an unexpected
    reply."""
    try:
        kind, payload = conn.recv()
    except EOFError:
        process.join(timeout=10)  # its pipe closed as it exited: its exit code follows
        raise RuntimeError(f"{who} died (exit code {process.exitcode}){_why(process)}"
                           ) from None
    if kind == "error":
        raise RuntimeError(f"{who} raised:\n{payload}")
    if kind != expect:
        raise RuntimeError(f"{who} answered {kind!r}, expected {expect!r}")
    return payload
