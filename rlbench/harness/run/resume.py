"""Resuming a sweep: runs already finished with the same identity are not run again.

A run's identity is the hash of its resolved config, the fingerprint of the code it runs
and the rlbench version (``RunConfig.identity``), stored as the ``identity`` tag of its
MLflow run: a run made by other code is not this run. With ``reuse=code`` the user says a
code change left the numbers alone: a finished run of the same config made by other code
(the same ``config_identity``, read as ``store.identity_tags`` reads it from stores of
every version) counts as done, and is tagged ``reused_for`` with the identity and code it
stands for. Before a sweep starts, finished runs are taken from the store as they are;
failed, killed or interrupted attempts (a run still marked RUNNING after its process was
killed) are deleted from the active view and run again, so each identity ends with exactly
one run. A run that a live process is running into the same out dir (it holds the run's
lock, see ``locks``) is another sweep's work in progress: the sweep is refused before
anything starts, and that attempt is left alone. A run a live process of another host (or
of this host, into another out dir) has claimed in the tracking store (``store.claims``)
is that process's: it is left out of the sweep (``ResumePlan.elsewhere``) and its attempt
is left alone; a claim whose heartbeat stopped is dead, and its run is run again. Sweeps
of this host into the same out dir whose process died are closed first, with their runs
(``reap_dead_sweeps``).
"""

from __future__ import annotations

import socket
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

from mlflow.entities import Run
from mlflow.exceptions import MlflowException

from rlbench.errors import ConfigError
from rlbench.harness.plan.run_config import RunConfig
from rlbench.harness.run.locks import (
    RunInProgressError,
    is_running,
    is_running_id,
    is_sweep_alive,
    planning,
)
from rlbench.harness.run.runner import FATAL_ERROR_FILE, RunResult, one_line
from rlbench.harness.store.bookkeeping import runs_of
from rlbench.harness.store.claims import Claim, latest_claims, stale_seconds
from rlbench.harness.store.done_index import ENTRY_TAG, DoneEntry, done_entries, entry_of
from rlbench.harness.store.identity_tags import identity_of
from rlbench.harness.store.provenance import host_id
from rlbench.harness.store.retry import with_retry
from rlbench.harness.store.tracking import Tracker, all_experiments

__all__ = ["ResumePlan", "plan_resume", "reap_dead_sweeps"]


@dataclass
class ResumePlan:
    to_run: list[RunConfig]
    finished: list[RunResult]
    superseded: list[str]  # run ids of earlier unfinished attempts, deleted
    reused: list[str] = field(default_factory=list)  # names of runs other code made
    # names of runs to run again because their finished run was made by other code
    other_code: list[str] = field(default_factory=list)
    deaths: list[str] = field(default_factory=list)  # runs found dead of a fatal error
    # runs a live process elsewhere holds (another host, another out dir), with its claim
    elsewhere: list[tuple[RunConfig, Claim]] = field(default_factory=list)


def plan_resume(tracker: Tracker, experiment_id: str, runs: list[RunConfig], *,
                reuse_code: bool = False) -> ResumePlan:
    """Split ``runs`` into those to run and those finished earlier; delete stale attempts.

    Done under the out dir's planning lock, so no run starts or ends meanwhile. A run a
    live process holds refuses the sweep (ConfigError) and its attempt is left alone.
    """
    try:
        with planning(tracker.out_dir):
            read_at = time.time()  # heartbeats are judged as of the read
            stored = _read_store(tracker, experiment_id)
            live = [config.name for config in runs if config.identity not in stored.finished
                    and is_running(tracker.out_dir, config)]
            if live:
                shown = ", ".join(live[:5]) + (f" and {len(live) - 5} more" if len(live) > 5
                                               else "")
                raise ConfigError(f"another process is running {shown} into "
                                  f"{tracker.out_dir} now: let it finish, or give another "
                                  "out_dir")
            deaths = reap_dead_sweeps(tracker)
            plan = _plan(tracker, experiment_id, runs, stored, read_at, reuse_code)
            if stored.to_index or not stored.indexed:
                _write_index(tracker, experiment_id, stored)
            plan.deaths = deaths
            return plan
    except RunInProgressError as err:
        raise ConfigError(str(err)) from None


@dataclass
class _Stored:
    """What a plan reads of a suite's runs."""

    finished: dict[str, list[DoneEntry]]  # by identity, latest first
    unfinished: dict[str, list[Run]]  # the active attempts that did not finish, by identity
    claims: dict[str, Claim]  # each identity's latest claim
    indexed: bool  # read from the done index; else every run was read
    to_index: list[DoneEntry]  # finished runs the index lacks
    pending: list[str]  # the finished runs among them still tagged as waiting for it


def _read_store(tracker: Tracker, experiment_id: str) -> _Stored:
    """The suite's finished runs from its done index (``store.done_index``), beside its
    unfinished attempts, its deleted runs and its finished runs whose entries were never
    written; from every run where the index is not complete (a store written before it),
    whose entries are then to be written. Attempts are read before the ledgers: every
    attempt seen has its claim there."""
    indexed = tracker.indexed(experiment_id)
    if indexed:
        attempts = tracker.runs(experiment_id, "tags.kind = 'run' and "
                                               "attributes.status != 'FINISHED'")
        ledgers = tracker.ledgers(experiment_id)
        # an entry of a run deleted since, or marked as ended otherwise, is void
        void = {run.info.run_id for run in tracker.runs(
            experiment_id, "tags.kind = 'run'", only_deleted=True)} | {
            run.info.run_id for run in attempts}
        entries = [entry for listed in done_entries(ledgers).values() for entry in listed
                   if entry.run_id not in void]
        listed = {entry.run_id for entry in entries}
        waiting = tracker.runs(experiment_id, "tags.kind = 'run' and attributes.status = "
                                              f"'FINISHED' and tags.{ENTRY_TAG} = 'pending'")
        to_index = [entry for run in waiting if run.info.run_id not in listed
                    and (entry := entry_of(run)) is not None]
        entries += to_index
    else:
        waiting = tracker.runs_tagged(experiment_id, "kind", "run")
        ledgers = tracker.ledgers(experiment_id)
        attempts = [run for run in waiting if run.info.status != "FINISHED"]
        entries = to_index = [entry for run in waiting if run.info.status == "FINISHED"
                              and (entry := entry_of(run)) is not None]
    finished: dict[str, list[DoneEntry]] = {}
    for entry in sorted(entries, key=lambda entry: -entry.started):
        finished.setdefault(entry.identity, []).append(entry)
    unfinished: dict[str, list[Run]] = {}
    for run in attempts:
        unfinished.setdefault(identity_of(run.data.tags), []).append(run)
    pending = [run.info.run_id for run in waiting if run.info.status == "FINISHED"
               and run.data.tags.get(ENTRY_TAG) == "pending"]
    return _Stored(finished, unfinished, latest_claims(ledgers), indexed, list(to_index),
                   pending)


def _write_index(tracker: Tracker, experiment_id: str, stored: _Stored) -> None:
    """Write the entries the plan found missing, and mark the index complete. The plan
    stands either way: an index that cannot be written is said, and the next plan reads
    what it read again."""
    try:
        tracker.index(experiment_id, stored.to_index)
        tracker.entries_written(stored.pending)
    except Exception as err:
        print(f"rlbench: the store's index of finished runs could not be written "
              f"({one_line(err)}); the next sweep reads the runs it lacks again",
              file=sys.stderr)


def reap_dead_sweeps(tracker: Tracker) -> list[str]:
    """Close what sweeps into this out dir left open when their process died (SIGKILL, a
    power cut, a fatal signal): their records become KILLED, in every suite; their runs
    no process runs any more become FAILED with the traceback of a fatal error
    where one was written, else KILLED. Only sweeps of this host are judged: the locks that
    tell a live sweep from a dead one are local. Call under ``planning``. Returns one line
    per child run that died of a fatal error."""
    out_dir, host = str(tracker.out_dir.resolve()), socket.gethostname()
    deaths = []
    for experiment in all_experiments(tracker.client):
        for sweep in tracker.runs(experiment.experiment_id, "tags.kind = 'sweep' and "
                                                            "attributes.status = 'RUNNING'"):
            sweep_id, tags = sweep.info.run_id, sweep.data.tags
            here = (tags.get("host_id") == host_id() if "host_id" in tags
                    else tags.get("host") == host)  # a sweep of an older rlbench
            if tags.get("out_dir") != out_dir or not here or is_sweep_alive(
                    tracker.out_dir, sweep_id):
                continue
            if with_retry(tracker.client.get_run, sweep_id).info.status != "RUNNING":
                continue  # it ended between the search and the lock check
            runs_experiment, made_by = runs_of(sweep)
            for child in tracker.runs(runs_experiment,
                                      f"{made_by} and attributes.status = 'RUNNING'"):
                if not is_running_id(tracker.out_dir, identity_of(child.data.tags)):
                    deaths += _record_death(tracker, child)
            tracker.finish(sweep_id, "KILLED")
    return deaths


def _record_death(tracker: Tracker, run: Run) -> list[str]:
    run_dir = Path(run.data.tags.get("run_dir") or "/nonexistent")
    fatal = run_dir / FATAL_ERROR_FILE
    if fatal.is_file() and fatal.stat().st_size:
        first = fatal.read_text(errors="replace").strip().splitlines()[0][:300]
        tracker.log_artifacts(run.info.run_id, [run_dir / "config.yaml", fatal])
        error = f"its process died: {first} (see {FATAL_ERROR_FILE})"
        tracker.set_tags(run.info.run_id, {"error": error})
        tracker.finish(run.info.run_id, "FAILED")
        return [f"{run.info.run_name} ({run.info.run_id}) {error}"]
    tracker.set_tags(run.info.run_id, {"error": "its sweep's process was killed"})
    tracker.finish(run.info.run_id, "KILLED")
    return []


def _plan(tracker: Tracker, experiment_id: str, runs: list[RunConfig], stored: _Stored,
          read_at: float, reuse_code: bool) -> ResumePlan:
    by_config: dict[str, list[DoneEntry]] = {}  # finished runs by their identity without code
    for entries in stored.finished.values():
        for entry in entries:
            by_config.setdefault(entry.config_identity, []).append(entry)
    plan = ResumePlan([], [], [])
    for config in runs:
        attempts = stored.unfinished.get(config.identity, [])
        done = stored.finished.get(config.identity, [])
        claim = stored.claims.get(config.identity)
        if not done and claim is not None and stored.indexed and not any(
                run.data.tags.get("claimant") == claim.token for run in attempts):
            done = _unindexed(tracker, experiment_id, config)
            stored.to_index += done
        if not done and claim is not None and not claim.is_local(tracker.out_dir):
            holder = next((r for r in attempts
                           if r.data.tags.get("claimant") == claim.token), None)
            if holder is None and read_at - claim.at >= stale_seconds():
                # no attempt in the active view this long after the claim: made and
                # deleted (judged dead), or never made; only the first is in the store
                holder = next(iter(tracker.runs(
                    experiment_id, f"tags.claimant = '{claim.token}'", deleted=True)), None)
            if claim.alive(holder, read_at):  # another host's or out dir's live process
                plan.elsewhere.append((config, claim))
                continue
        for stale in attempts:
            tracker.delete(stale.info.run_id)
            plan.superseded.append(stale.info.run_id)
        elsewhere = sorted(by_config.get(config.config_identity, []),
                           key=lambda entry: -entry.started)
        if not done and elsewhere and not reuse_code:
            plan.other_code.append(config.name)
        if not done and reuse_code:
            done = _reuse(tracker, config, elsewhere)
            if done:
                plan.reused.append(config.name)
        if done:
            plan.finished.append(_result(config, done[0]))
        else:
            plan.to_run.append(config)
    return plan


def _unindexed(tracker: Tracker, experiment_id: str, config: RunConfig) -> list[DoneEntry]:
    """The finished runs of ``config``'s identity the done index lacks: a claim with no
    entry and no attempt in sight is of a run that finished as its process was killed,
    before its entry was written (or of an attempt since deleted: then none)."""
    return [entry for run in tracker.attempts(experiment_id, config,
                                              "attributes.status = 'FINISHED'")
            if (entry := entry_of(run)) is not None]


def _reuse(tracker: Tracker, config: RunConfig, made_by_other_code: list[DoneEntry]
           ) -> list[DoneEntry]:
    """The latest finished run of ``config`` by other code, tagged ``reused_for``; an entry
    whose run is gone from the store (purged) is passed over."""
    for entry in made_by_other_code:
        try:
            tracker.set_tags(entry.run_id, {
                "reused_for": f"{config.identity} (code {config.code or 'unknown'}, "
                              "reuse=code)"})
        except MlflowException as err:
            if err.error_code != "RESOURCE_DOES_NOT_EXIST":
                raise
            continue
        return [entry]
    return []


def _result(config: RunConfig, entry: DoneEntry) -> RunResult:
    """The result of ``config``'s finished run, as its index entry holds it."""
    return RunResult(config=config, run_id=entry.run_id, status="FINISHED",
                     final_return=entry.final_return, fps=entry.fps, frames=entry.frames,
                     seconds=entry.seconds)
