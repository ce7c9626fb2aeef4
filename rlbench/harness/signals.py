"""What signals do to the harness: every handler of SIGINT (Ctrl-C), SIGTERM and Slurm's
SIGUSR2, and where a fatal signal's traceback goes.

- A sweep: SIGTERM raises ``Terminated``, a ``KeyboardInterrupt``, so it stops as Ctrl-C
  does (``sigterm_stops_sweep``); the CLI exits 143 for it and 130 for Ctrl-C. An outside
  trainer's sweep takes SIGTERM as Ctrl-C (``sigterm_as_interrupt``).
- A worker process of the local pool: SIGINT and SIGTERM raise ``KeyboardInterrupt`` once
  (``interrupt_worker_once``), and the run in it is recorded KILLED.
- A run's training: either asks its loop to checkpoint and stop (``checkpoint_on_signals``);
  one that comes after the loop stopped looking waits until the run is recorded
  (``deliver_deferred_signal``).
- A Slurm task: SIGUSR2 (the time limit is near) and SIGTERM (preemption, ``scancel``) ask
  the run to checkpoint and stop (``stop_run_on``), and the task is requeued.
- A store call: both wait for it to end (``signals_held``), so no write is cut in half.
- A fatal signal (a segfault, an abort): faulthandler writes the traceback into the run's
  file (``fatal_errors_into``).

Python runs signal handlers in the main thread only: outside it, a sweep, a run's training
and a store call leave the handlers as they are.
"""

from __future__ import annotations

import faulthandler
import os
import signal
import sys
import tempfile
import threading
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from pathlib import Path
from typing import Any, TextIO

from rlbench.checkpoint import RunStopped, clear_stop, request_stop, stop_pending
from rlbench.owned_files import check_target, new_file_mode

__all__ = ["Terminated", "checkpoint_on_signals", "deliver_deferred_signal",
           "fatal_errors_into", "interrupt_worker_once", "signals_held", "sigterm_as_interrupt",
           "sigterm_stops_sweep", "stop_run_on"]


class Terminated(KeyboardInterrupt):
    """SIGTERM (what schedulers send before they kill): stops a sweep as Ctrl-C does."""


def _in_main_thread() -> bool:
    return threading.current_thread() is threading.main_thread()


@contextmanager
def sigterm_stops_sweep() -> Iterator[None]:
    """While the body runs, SIGTERM raises ``Terminated`` in the main thread (once; a
    second SIGTERM is ignored so the cleanup finishes). Elsewhere a no-op."""
    if not _in_main_thread():
        yield
        return

    def terminate(signum: int, frame: Any) -> None:
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
        raise Terminated

    previous = signal.signal(signal.SIGTERM, terminate)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, previous)


def _interrupt(signum: int, frame: object) -> None:
    raise KeyboardInterrupt(f"signal {signum}")


@contextmanager
def sigterm_as_interrupt() -> Iterator[None]:
    """SIGTERM raised as KeyboardInterrupt while the body runs, so the run in progress is
    recorded KILLED; the previous handler is back afterwards."""
    previous = signal.signal(signal.SIGTERM, _interrupt)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, previous)


def _interrupt_once(signum: int, frame: Any) -> None:
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    raise KeyboardInterrupt


def interrupt_worker_once() -> None:
    """For the rest of a worker process: SIGINT or SIGTERM raises KeyboardInterrupt once
    (``execute_run`` marks the run KILLED); later signals are ignored so that marking is
    not cut short."""
    signal.signal(signal.SIGINT, _interrupt_once)
    signal.signal(signal.SIGTERM, _interrupt_once)


@contextmanager
def checkpoint_on_signals() -> Iterator[None]:
    """SIGTERM or Ctrl-C while the recipe trains: its loop checkpoints at the end of the
    iteration and stops (``RunStopped``), and what the signal meant before (a sweep's
    SIGTERM handler, say) takes it from there. While that stop is pending, SIGTERM is
    ignored (Ctrl-C reaches a sweep and its workers, and the sweep passes it on as SIGTERM)
    and a second Ctrl-C stops at once. Outside the main thread (where Python takes no
    handlers) signals keep their handlers."""
    if not _in_main_thread():
        yield
        return
    received: list[int] = []

    def stop(signum: int, frame: object) -> None:
        if not stop_pending():
            received.append(signum)
            request_stop()
        elif signum == signal.SIGINT:
            raise KeyboardInterrupt

    global _deferred_signal
    # a stop asked before (a launcher's handler, while the run was set up) stands: the
    # loop stops before its first iteration
    previous = {sig: signal.signal(sig, stop) for sig in (signal.SIGINT, signal.SIGTERM)}
    try:
        yield
    except RunStopped:
        for sig, handler in previous.items():
            signal.signal(sig, handler)
        handler = previous[received[0]] if received else None
        if callable(handler):
            handler(received[0], None)  # raises what that signal raises there
        raise
    else:
        if received:  # it came after the loop last looked (the final evaluation, say)
            _deferred_signal = received[0]
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)
        clear_stop()


# A signal that reached a run after its loop stopped looking: the run ends and is recorded
# as it is, and the sweep then takes the signal (``deliver_deferred_signal``).
_deferred_signal: int | None = None


def deliver_deferred_signal() -> None:
    """What a Ctrl-C or SIGTERM that came at the very end of the last run does, now that
    the run is recorded: the process's own handling of it (a sweep stops there)."""
    global _deferred_signal
    signum, _deferred_signal = _deferred_signal, None
    if signum is not None:
        signal.raise_signal(signum)


@contextmanager
def stop_run_on(*signums: int) -> Iterator[list[int]]:
    """While the body runs, each of ``signums`` asks the run to checkpoint and stop; the
    list it yields holds the signals that came."""
    received: list[int] = []

    def stop(number: int, frame: object) -> None:
        received.append(number)
        request_stop()

    previous = {signum: signal.signal(signum, stop) for signum in signums}
    try:
        yield received
    finally:
        for signum, handler in previous.items():
            signal.signal(signum, handler)


@contextmanager
def signals_held() -> Iterator[None]:
    """Ctrl-C and SIGTERM wait for the body to end, then take their course as if they had
    just come (a KeyboardInterrupt, a checkpoint request, the default action).

    A store call must not be cut short: a KeyboardInterrupt raised inside SQLAlchemy's
    commit leaves the SQLite write lock with a connection nobody closes, and every later
    write of the process (the stopped run's KILLED, the sweep's end) then waits on it.
    SQLite bounds a call's wait for a busy store (20 s a session); a second Ctrl-C, for a
    tracking server that does not answer, stops at once and risks that lock. A signal
    that is ignored, or handled outside Python, is left alone; outside the main thread,
    where Python delivers no signals, this is a no-op."""
    if not _in_main_thread():
        yield
        return
    received: list[int] = []

    def hold(signum: int, frame: object) -> None:
        if signum == signal.SIGINT and signal.SIGINT in received:
            received.clear()
            raise KeyboardInterrupt
        received.append(signum)

    previous: dict[int, Any] = {}
    try:
        for sig in (signal.SIGINT, signal.SIGTERM):
            handler = signal.getsignal(sig)
            if handler is not None and handler is not signal.SIG_IGN:
                previous[sig] = handler
                signal.signal(sig, hold)
        yield
    finally:
        _restore_handlers(previous)
        if received:
            signal.raise_signal(received[0])


def _restore_handlers(handlers: Mapping[int, Any]) -> None:
    """Put each handler back. ``signal.signal`` first runs the Python handlers of signals
    already pending, and one may raise (a Ctrl-C that came just now): the swap is then
    tried again, so no handler is left behind, and the first error raised after all."""
    error: BaseException | None = None
    for sig, handler in handlers.items():
        for _ in range(8):  # each pending signal runs once: the next try finds none
            try:
                signal.signal(sig, handler)
                break
            except BaseException as err:
                error = error or err
    if error is not None:
        raise error


@contextmanager
def fatal_errors_into(path: Path) -> Iterator[None]:
    """Python's faulthandler writes the traceback of a fatal signal to ``path`` while the
    body runs; an empty file is removed afterwards. Whatever handled fatal errors before
    (pytest's handler on stderr) handles them again afterwards. The file is made new and
    renamed into place (``_new_file``): a link at ``path`` is refused, never written
    through."""
    was_enabled = faulthandler.is_enabled()
    with _new_file(path, "fatal error file") as handle:
        faulthandler.enable(file=handle)
        try:
            yield
        finally:
            faulthandler.disable()
            if was_enabled:
                faulthandler.enable(file=sys.__stderr__)
            if handle.tell() == 0 and _still_at(path, handle):
                path.unlink(missing_ok=True)


def _new_file(path: Path, what: str) -> TextIO:
    """A new empty file at ``path``, open for writing: made beside it (``mkstemp``, so no
    link is opened) and renamed over it, once ``check_target`` found the place one a
    ``what`` may take (a ``ConfigError`` for a link, a directory, a store)."""
    check_target(path, what)
    fd, name = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".partial")
    try:
        os.fchmod(fd, new_file_mode())  # as a plain open, not mkstemp's 0600
        os.replace(name, path)
    except BaseException:
        os.close(fd)
        Path(name).unlink(missing_ok=True)
        raise
    return os.fdopen(fd, "w")


def _still_at(path: Path, handle: TextIO) -> bool:
    """Whether ``path`` still names the file ``handle`` writes (not one put there since)."""
    try:
        return os.path.samestat(os.fstat(handle.fileno()), os.lstat(path))
    except OSError:
        return False
