"""The done index: which runs of a suite finished, and their results, in a few reads.

A planner must know which of a sweep's runs finished earlier. Reading every run of the
suite does it, and an ``mlflow server`` answers that search at a few hundred runs a second
(each run's params, tags and latest metrics): 10,000 runs take most of a minute. So each
finished run also leaves an entry on its identity's ledger run (``store.claims``): the
param ``done.<identity>.<run id>``, valued with what a plan takes from the run (its config
identity, final return, frames/s, frames and seconds). The planner reads the suite's 16
ledger runs, which hold its claims too, and no run.

MLflow never changes a param, so the key names the run: an identity finished again (its
run deleted by a user and run anew) adds a second entry. What the index cannot see
itself, the planner reads beside it, both small: the suite's deleted FINISHED runs and its
unfinished runs (attempts to supersede). An entry of either is void: a run deleted, or
marked as ended otherwise, since it finished (a run restored to the active view counts
again). A run whose entry was never written (its process killed between finishing and
writing, the store refusing the write) still carries ``done_entry=pending``, and one
search finds every such run; a claim with neither an entry nor an attempt (an entry
damaged since) is searched for by its identity.

A suite's index is complete when its experiment carries the tag ``rlbench.done_index``:
set when this rlbench makes the experiment, and set on a store written before the index by
the first planner that reads it, once it has read every run and written the entries of
the finished ones. A run purged by ``mlflow gc`` before any planner saw it deleted stays
counted as done: purge after a plan, or run it again by another out dir.
"""

from __future__ import annotations

import json
import math
from collections.abc import Iterable
from dataclasses import asdict, dataclass

from mlflow.entities import Param, Run
from mlflow.tracking import MlflowClient

from rlbench.harness.store.identity_tags import config_identity_of, identity_of
from rlbench.harness.store.retry import with_retry

__all__ = ["ENTRY_TAG", "INDEX_TAG", "DoneEntry", "done_entries", "entry_of", "write_entries"]

INDEX_TAG = "rlbench.done_index"
# Each run's own word on its entry: "pending" from its start, "written" once its entry is
# on the ledger. A plan searches for the FINISHED runs still pending: a process killed
# between finishing and writing, or a store that refused the write.
ENTRY_TAG = "done_entry"
_PREFIX = "done."
_BATCH = 100  # params a write: MLflow's limit for one log_batch


@dataclass(frozen=True)
class DoneEntry:
    """Run ``run_id`` of identity ``identity`` finished, with these results."""

    identity: str
    run_id: str
    config_identity: str
    started: int  # the run's start, milliseconds since the epoch: the latest of a config
    final_return: float | None
    fps: float | None
    frames: int
    seconds: float

    @property
    def key(self) -> str:
        return f"{_PREFIX}{self.identity}.{self.run_id}"

    def value(self) -> str:
        fields = asdict(self)
        del fields["identity"], fields["run_id"]
        return json.dumps(fields, sort_keys=True)

    @classmethod
    def parse(cls, key: str, value: str) -> DoneEntry | None:
        """The entry logged as ``key: value``; None for anything else (the store is
        untrusted: a damaged entry counts as none, and its run is found by a search)."""
        identity, _, run_id = key.removeprefix(_PREFIX).partition(".")
        if not (identity.isalnum() and _is_run_id(run_id)):
            return None
        try:
            fields = json.loads(value)
        except (ValueError, RecursionError):
            return None
        if not isinstance(fields, dict) or set(fields) != {
                "config_identity", "started", "final_return", "fps", "frames", "seconds"}:
            return None
        if not (isinstance(fields["config_identity"], str)
                and all(_number(fields[name]) or fields[name] is None
                        for name in ("final_return", "fps"))
                and _number(fields["seconds"]) and math.isfinite(fields["seconds"])
                and _integer(fields["frames"]) and _integer(fields["started"])):
            return None
        return cls(identity=identity, run_id=run_id, **fields)


def _is_run_id(text: str) -> bool:
    """Whether ``text`` is an MLflow run id: 32 lower-case hex digits."""
    return len(text) == 32 and all(c in "0123456789abcdef" for c in text)


def _number(value: object) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def _integer(value: object) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def entry_of(run: Run) -> DoneEntry | None:
    """The entry of the FINISHED ``run`` as searched: its latest ``eval/return_mean`` (the
    store keeps each metric's value at its last step) is its final return and that step
    its frames; its throughput is ``train/fps`` online, ``train/steps_per_s`` offline.
    None for a run of no identity."""
    tags = run.data.tags
    identity = identity_of(tags)
    if not identity.isalnum():
        return None
    last = next((metric for metric in run.data.to_proto().metrics
                 if metric.key == "eval/return_mean"), None)
    started = run.info.start_time or 0
    metrics = run.data.metrics
    return DoneEntry(
        identity=identity, run_id=run.info.run_id,
        config_identity=config_identity_of(tags), started=started,
        final_return=last.value if last else None,
        fps=metrics.get("train/fps", metrics.get("train/steps_per_s")),
        frames=int(last.step) if last else 0,
        seconds=((run.info.end_time or started) - started) / 1000)


def done_entries(ledgers: Iterable[Run]) -> dict[str, list[DoneEntry]]:
    """Each identity's entries in ``ledgers`` (the suite's ledger runs)."""
    found: dict[str, list[DoneEntry]] = {}
    for run in ledgers:
        for key, value in run.data.params.items():
            if key.startswith(_PREFIX) and (entry := DoneEntry.parse(key, value)) is not None:
                found.setdefault(entry.identity, []).append(entry)
    return found


def write_entries(client: MlflowClient, ledger_run_id: str,
                  entries: Iterable[DoneEntry]) -> None:
    """Log ``entries`` on the ledger run ``ledger_run_id``, a hundred a write. An entry
    already there is written again as a no-op (the same key and value)."""
    params = [Param(entry.key, entry.value()) for entry in entries]
    for first in range(0, len(params), _BATCH):
        with_retry(client.log_batch, ledger_run_id, params=params[first:first + _BATCH])
