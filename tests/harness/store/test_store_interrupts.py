"""Ctrl-C and SIGTERM during a store call: held until the call ends, never left half-done."""

from __future__ import annotations

import signal
from collections.abc import Iterator
from pathlib import Path

import pytest
from mlflow.exceptions import MlflowException
from sqlalchemy import event

import rlbench.harness.store.retry as retry
from rlbench.checkpoint import stop_requested
from rlbench.harness.signals import checkpoint_on_signals, deliver_deferred_signal, signals_held
from rlbench.harness.store.retry import with_retry
from rlbench.harness.store.tracking import Tracker


@pytest.fixture(autouse=True)
def ctrl_c_raises() -> Iterator[None]:
    """Ctrl-C raises KeyboardInterrupt, as at a terminal: a shell that runs the tests in
    the background (CI) ignores SIGINT, and its children inherit that."""
    previous = signal.signal(signal.SIGINT, signal.default_int_handler)
    yield
    signal.signal(signal.SIGINT, previous)


@pytest.fixture
def sigterm_calls() -> Iterator[list[int]]:
    """SIGTERM handled by recording it, for the test's length."""
    calls: list[int] = []
    previous = signal.signal(signal.SIGTERM, lambda signum, frame: calls.append(signum))
    yield calls
    signal.signal(signal.SIGTERM, previous)


def test_a_ctrl_c_inside_a_commit_lets_it_finish_and_the_store_stays_writable(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # Cut short there, SQLAlchemy's connection keeps SQLite's write lock and every later
    # write waits on it: with this short deadline the second write fails instead.
    monkeypatch.setattr(retry, "_LOCK_WAIT_SECONDS", 1.0)
    tracker = Tracker(tmp_path / "out")
    experiment = tracker.experiment("suite")
    parent = tracker.start_sweep(experiment, "suite", {})
    engine = tracker.client._tracking_client.store.engine
    commits = []

    def ctrl_c_on_the_first_commit(connection: object) -> None:
        commits.append(connection)
        if len(commits) == 1:
            signal.raise_signal(signal.SIGINT)

    event.listen(engine, "commit", ctrl_c_on_the_first_commit)
    try:
        with pytest.raises(KeyboardInterrupt):
            tracker.finish(parent, "KILLED")
    finally:
        event.remove(engine, "commit", ctrl_c_on_the_first_commit)
    assert tracker.client.get_run(parent).info.status == "KILLED"

    tracker.set_tags(parent, {"after": "the interrupt"})
    assert tracker.client.get_run(parent).data.tags["after"] == "the interrupt"
    assert signal.getsignal(signal.SIGINT) is signal.default_int_handler


def test_a_sigterm_is_held_until_the_body_ends_then_handled_once(
        sigterm_calls: list[int]) -> None:
    with signals_held():
        signal.raise_signal(signal.SIGTERM)
        signal.raise_signal(signal.SIGTERM)
        assert sigterm_calls == []
    assert sigterm_calls == [signal.SIGTERM]
    signal.raise_signal(signal.SIGTERM)  # the handler is back
    assert sigterm_calls == [signal.SIGTERM] * 2


def test_the_first_signal_held_is_the_one_delivered(sigterm_calls: list[int]) -> None:
    with pytest.raises(KeyboardInterrupt), signals_held():
        signal.raise_signal(signal.SIGINT)
        signal.raise_signal(signal.SIGTERM)
    assert sigterm_calls == []
    assert signal.getsignal(signal.SIGINT) is signal.default_int_handler


def test_a_second_ctrl_c_stops_at_once_and_only_once() -> None:
    reached = []
    with pytest.raises(KeyboardInterrupt), signals_held():
        signal.raise_signal(signal.SIGINT)
        reached.append("after the first")
        signal.raise_signal(signal.SIGINT)
        reached.append("after the second")
    assert reached == ["after the first"]
    assert signal.getsignal(signal.SIGINT) is signal.default_int_handler


def test_an_ignored_ctrl_c_stays_ignored() -> None:
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    with signals_held():
        signal.raise_signal(signal.SIGINT)
        signal.raise_signal(signal.SIGINT)
    assert signal.getsignal(signal.SIGINT) is signal.SIG_IGN


def test_a_body_that_raises_still_gets_its_handlers_back(sigterm_calls: list[int]) -> None:
    with pytest.raises(ValueError), signals_held():
        raise ValueError("the call failed")
    assert signal.getsignal(signal.SIGINT) is signal.default_int_handler
    signal.raise_signal(signal.SIGTERM)
    assert sigterm_calls == [signal.SIGTERM]


def test_a_ctrl_c_during_a_locked_attempt_stops_the_back_off() -> None:
    attempts = []

    def locked() -> None:
        attempts.append(1)
        signal.raise_signal(signal.SIGINT)
        raise MlflowException("(sqlite3.OperationalError) database is locked")

    with pytest.raises(KeyboardInterrupt):
        with_retry(locked)
    assert len(attempts) == 1


def test_a_ctrl_c_held_while_a_run_trains_becomes_its_checkpoint_request() -> None:
    def write() -> str:
        signal.raise_signal(signal.SIGINT)
        return "written"

    with checkpoint_on_signals():
        assert with_retry(write) == "written"
        assert stop_requested()
    assert not stop_requested()
    with pytest.raises(KeyboardInterrupt):  # the run is over: the sweep takes the Ctrl-C
        deliver_deferred_signal()
