"""Claims: which process runs which run, kept in the tracking store for every host to see.

Drivers on different hosts share a tracking store (an ``mlflow server``), not a filesystem,
so who runs what is written there. A run of config identity ``I`` is claimed by logging the
param ``claim.I.<epoch>`` on the suite's ledger run. MLflow never changes a logged param:
the store's primary key on (run, key) refuses a second value, in SQLite as in the SQL
database behind an ``mlflow server``, and a write of the same value again is a no-op (so a
retried write is safe). Of two processes that claim the same epoch at once, exactly one
wins; the other is told it lost and starts nothing.

A claim is live while its attempt (the MLflow run tagged with the claim's token) is
RUNNING and beats: the process running it sets its ``heartbeat`` tag every
``heartbeat_seconds()``. A claim whose attempt ended, or whose heartbeat is older than
``stale_seconds()``, is dead, and the next claimant takes the next epoch. Hosts compare
heartbeats with their own clocks: keep them within a minute of each other (NTP).

A suite's ledger is 16 runs (``kind=ledger``, one per first hex digit of the identities,
tagged ``ledger_of`` with the suite's experiment id) in the store's bookkeeping experiment
(``bookkeeping``), out of the way of the suite's runs. Each one's id is the tag of an
experiment named ``rlbench-ledger:<experiment id>:<digit>``: experiment names are unique,
so one creator wins and every driver finds the same ledger. That experiment is deleted as
soon as it is made: a deleted experiment keeps its name and tags, and stays out of the
experiment list. A store written before the bookkeeping experiment has its ledger runs in
the suite's experiment, where their pointers lead: they go on being used there.
"""

from __future__ import annotations

import contextlib
import json
import math
import os
import re
import sys
import threading
import time
import uuid
from collections.abc import Iterable, Iterator
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from mlflow.entities import Run
from mlflow.exceptions import MlflowException
from mlflow.tracking import MlflowClient

from rlbench.harness.store.bookkeeping import bookkeeping_experiment
from rlbench.harness.store.provenance import host_id
from rlbench.harness.store.retry import with_retry

__all__ = ["UNREADABLE_HOST", "Claim", "ClaimLost", "Ledger", "heartbeat",
           "heartbeat_seconds", "host_id", "latest_claims", "stale_seconds"]

LEDGER_POINTER = "rlbench-ledger:{experiment_id}:{shard}"
LEDGER_TAG = "rlbench.ledger_run"
_PREFIX = "claim."
# the host of a claim whose stored value cannot be read: no process holds it
UNREADABLE_HOST = "(a claim the store holds damaged)"
_FIELD_TYPES: dict[str, type | tuple[type, ...]] = {
    "token": str, "host": str, "out_dir": str, "pid": int, "at": (int, float), "place": str}
_REQUIRED_FIELDS = frozenset(_FIELD_TYPES) - {"place"}
_TOKEN = re.compile(r"[0-9A-Za-z_-]{1,64}")  # uuid4().hex, as ``Claim.new`` makes it
_LATEST = 1e11  # seconds since the epoch: the year 5138
NO_ATTEMPT_LIFETIMES = 5


def stale_seconds() -> float:
    """How long a heartbeat may be silent before its claim is dead:
    ``RLBENCH_CLAIM_TIMEOUT_S`` (120 by default)."""
    return float(os.environ.get("RLBENCH_CLAIM_TIMEOUT_S", "120"))


def heartbeat_seconds() -> float:
    """How often a claimed run beats: a quarter of ``stale_seconds()``."""
    return stale_seconds() / 4


def _place(out_dir: Path) -> str:
    """``out_dir``'s device and inode ("" while it does not exist)."""
    try:
        stat = out_dir.stat()
    except OSError:
        return ""
    return f"{stat.st_dev}:{stat.st_ino}"


class ClaimLost(RuntimeError):
    """Another process holds the run: a live claim, or the epoch it just claimed first."""

    def __init__(self, holder: Claim):
        self.holder = holder
        super().__init__(f"being run by {holder.describe()}")


@dataclass(frozen=True)
class Claim:
    """Epoch ``epoch`` of the run of config identity ``identity``, taken by the process
    whose attempt carries ``token``."""

    identity: str
    epoch: int
    token: str
    host: str
    out_dir: str
    pid: int
    at: float  # when it was taken, seconds since the epoch, the claimant's clock
    # the out dir's device and inode: one path on two volumes (two containers) differs
    place: str = ""

    @property
    def key(self) -> str:
        return f"{_PREFIX}{self.identity}.{self.epoch}"

    def value(self) -> str:
        fields = asdict(self)
        del fields["identity"], fields["epoch"]
        return json.dumps(fields, sort_keys=True)

    def tags(self) -> dict[str, str]:
        """What its attempt run is tagged with: the claim, and a first heartbeat."""
        return {"claim": self.key, "claimant": self.token, "heartbeat": repr(time.time())}

    def describe(self) -> str:
        name = self.host.split("/", 1)[0]
        return f"process {self.pid} on {name} (out_dir {self.out_dir})"

    def is_local(self, out_dir: Path) -> bool:
        """Taken on this machine, into ``out_dir``: the run's lock file there says whether
        its process lives, at once and without a heartbeat."""
        return (self.host == host_id() and self.out_dir == str(out_dir.resolve())
                and self.place == _place(out_dir))

    def alive(self, attempt: Run | None, now: float | None = None) -> bool:
        """Whether its process still runs it, by its attempt's status and heartbeat (an
        attempt deleted from the active view is dead); a claim whose attempt is not made
        yet (its process reads the run's checkpoint first, which may take minutes on a slow
        disk) lives ``NO_ATTEMPT_LIFETIMES`` times as long from when it was taken.
        ``now``: when the attempt was read, not later (a judgment made a minute after the
        read must not count that minute against the heartbeat)."""
        now = time.time() if now is None else now
        if attempt is None:
            return now - self.at < NO_ATTEMPT_LIFETIMES * stale_seconds()
        if attempt.info.status != "RUNNING" or attempt.info.lifecycle_stage != "active":
            return False  # ended, or deleted by a process that judged it dead
        beat = _finite_time(attempt.data.tags.get("heartbeat", self.at))
        return beat is not None and now - beat < stale_seconds()

    @classmethod
    def new(cls, identity: str, epoch: int, out_dir: Path, *,
            token: str | None = None) -> Claim:
        return cls(identity=identity, epoch=epoch, token=token or uuid.uuid4().hex,
                   host=host_id(), out_dir=str(out_dir.resolve()), pid=os.getpid(),
                   at=time.time(), place=_place(out_dir))

    @classmethod
    def parse(cls, key: str, value: str) -> Claim:
        """The claim logged as ``key: value``. The store is untrusted: a value that is not
        a claim's fields reads as a claim of no live process (``UNREADABLE_HOST``), so the
        run is claimed anew and goes on; a key whose epoch is no number is a ``ValueError``
        (the ledger cannot order it)."""
        identity, _, epoch = key.removeprefix(_PREFIX).rpartition(".")
        if not identity or not (epoch.isascii() and epoch.isdigit()) or len(epoch) > 18:
            raise ValueError(f"claim key {key!r} has no epoch")
        fields = _claim_fields(value)
        if fields is None:
            return cls(identity=identity, epoch=int(epoch), token="", host=UNREADABLE_HOST,
                       out_dir="?", pid=0, at=0.0)
        return cls(identity=identity, epoch=int(epoch), **fields)


def _claim_fields(value: str) -> dict[str, Any] | None:
    """A claim's stored fields, each of its type; None for anything else."""
    try:
        fields = json.loads(value)
    except (ValueError, RecursionError):
        return None
    if not isinstance(fields, dict) or set(fields) - _FIELD_TYPES.keys() \
            or not set(fields) >= _REQUIRED_FIELDS:
        return None
    for name, kind in _FIELD_TYPES.items():
        if name in fields and (isinstance(fields[name], bool)
                               or not isinstance(fields[name], kind)):
            return None
    if not _TOKEN.fullmatch(fields["token"]) or _finite_time(fields["at"]) is None:
        return None  # a token goes into a search filter; a time into differences
    return fields


def _finite_time(value: object) -> float | None:
    """``value`` as seconds since the epoch, when it reads as a time a clock gives (a
    finite number of at most ``_LATEST``); None for anything else (a stored heartbeat or
    claim time of another kind, ``inf``, a number of 400 digits)."""
    try:
        seconds = float(value)
    except (TypeError, ValueError, OverflowError):
        return None
    return seconds if math.isfinite(seconds) and 0 <= seconds <= _LATEST else None


class Ledger:
    """The claims of the runs whose identity starts as ``identity`` does (one of 16
    shards: a ledger run holds a sixteenth of a suite's claims, so reading one stays
    cheap at 10,000 runs), on that shard's ledger run."""

    def __init__(self, client: MlflowClient, experiment_id: str, identity: str):
        self.client, self.identity = client, identity
        self.run_id = _ledger_run(client, experiment_id, identity[:1])

    def latest(self) -> Claim | None:
        """The identity's latest claim, None if it was never claimed (one read)."""
        run = with_retry(self.client.get_run, self.run_id)
        return latest_claims([run]).get(self.identity)

    def claim(self, key: str) -> Claim | None:
        """The claim logged under ``key`` (an attempt's ``claim`` tag), None if there is
        none (one read)."""
        value = with_retry(self.client.get_run, self.run_id).data.params.get(key)
        return None if value is None else Claim.parse(key, value)

    def take(self, after: Claim | None, out_dir: Path, *, token: str | None = None) -> Claim:
        """Claim the epoch after ``after`` (the first when None), as ``token`` (a new one
        when None); ``ClaimLost`` with the holder when another process took it first."""
        claim = Claim.new(self.identity, 0 if after is None else after.epoch + 1, out_dir,
                          token=token)
        try:
            with_retry(self.client.log_param, self.run_id, claim.key, claim.value())
        except MlflowException:  # refused, or failed: the ledger says which
            run = with_retry(self.client.get_run, self.run_id)
            held = run.data.params.get(claim.key)
            if held is None:
                raise
            if held != claim.value():
                raise ClaimLost(Claim.parse(claim.key, held)) from None
        return claim


def latest_claims(ledgers: Iterable[Run]) -> dict[str, Claim]:
    """Each identity's latest claim in ``ledgers`` (the suite's ledger runs, as a planner
    reads them all at once: ``Tracker.ledgers``); a key of no epoch is passed over."""
    latest: dict[str, Claim] = {}
    for run in ledgers:
        for key, value in run.data.params.items():
            if key.startswith(_PREFIX):
                try:
                    claim = Claim.parse(key, value)
                except ValueError:
                    continue
                current = latest.get(claim.identity)
                if current is None or claim.epoch > current.epoch:
                    latest[claim.identity] = claim
    return latest


def _ledger_run(client: MlflowClient, experiment_id: str, shard: str) -> str:
    """The id of the experiment's ledger run of ``shard``, made by the first process that
    asks."""
    name = LEDGER_POINTER.format(experiment_id=experiment_id, shard=shard)
    pointer = with_retry(client.get_experiment_by_name, name)
    if pointer is None:
        candidate = with_retry(client.create_run, bookkeeping_experiment(client),
                               run_name=f"rlbench claims {shard}",
                               tags={"kind": "ledger", "ledger_of": experiment_id,
                                     "shard": shard}).info.run_id
        try:
            with_retry(client.create_experiment, name, tags={LEDGER_TAG: candidate})
        except MlflowException as err:  # made first by another process, or by this one
            if err.error_code != "RESOURCE_ALREADY_EXISTS":  # when an answer was lost and
                raise                                         # the client asked again
        pointer = with_retry(client.get_experiment_by_name, name)
        if pointer.tags[LEDGER_TAG] != candidate:  # another process's ledger holds
            with_retry(client.delete_run, candidate)
            return pointer.tags[LEDGER_TAG]
        if pointer.lifecycle_stage == "active":
            with_retry(client.delete_experiment, pointer.experiment_id)
        with_retry(client.set_terminated, candidate, "FINISHED")  # not a run in progress
    return pointer.tags[LEDGER_TAG]


@contextlib.contextmanager
def heartbeat(client: MlflowClient, run_id: str) -> Iterator[None]:
    """While the body runs, a thread sets ``run_id``'s ``heartbeat`` tag every
    ``heartbeat_seconds()``. A beat that cannot be written (the server away for a moment)
    is said on stderr once and tried again at the next beat."""
    stop = threading.Event()
    every = heartbeat_seconds()

    def beat() -> None:
        said = False
        while not stop.wait(every):
            try:
                with_retry(client.set_tag, run_id, "heartbeat", repr(time.time()))
            except Exception as err:
                if not said:
                    print(f"rlbench: the heartbeat of run {run_id} could not be written "
                          f"({type(err).__name__}: {err}); trying again", file=sys.stderr)
                    said = True

    thread = threading.Thread(target=beat, name=f"rlbench heartbeat {run_id}", daemon=True)
    thread.start()
    try:
        yield
    finally:
        stop.set()
        # a beat waiting on a server that does not answer must not hold the run's end:
        # the thread is a daemon, and a late beat on an ended run is harmless
        thread.join(timeout=5.0)
