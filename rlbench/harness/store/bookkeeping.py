"""The store's own records, kept out of the suites' experiments.

A suite's experiment holds the runs of its configs and nothing else, so a user's
``mlflow.search_runs``, the MLflow UI and their own scripts count runs of configs only. What
rlbench records to coordinate its work lives in one experiment of its own,
``rlbench-bookkeeping``:

- a sweep's record (``kind=sweep``): the host, out dir, command and code of one sweep, its
  status (RUNNING while its process lives) and its summary; the sweep's runs carry its id
  as their ``sweep`` tag, and its suite's experiment id is its ``experiment`` tag;
- the ledger runs of each suite (``kind=ledger``, tagged ``ledger_of`` with the suite's
  experiment id): who runs which run (``store.claims``).

A store written before this kept both in the suite's experiment (a sweep's runs named it
by ``mlflow.parentRunId``); those records are still read where they are, and a suite whose
ledger is there goes on using it.
"""

from __future__ import annotations

from mlflow.entities import Run
from mlflow.exceptions import MlflowException
from mlflow.tracking import MlflowClient

from rlbench.harness.store.artifact_places import ARTIFACT_DIR_NAME
from rlbench.harness.store.retry import with_retry
from rlbench.harness.store.sqlite import sqlite_path, store_lock

__all__ = ["BOOKKEEPING_EXPERIMENT", "SWEEP_TAG", "bookkeeping_experiment", "of_sweep",
           "runs_of"]

BOOKKEEPING_EXPERIMENT = "rlbench-bookkeeping"
SWEEP_TAG = "sweep"  # a run's tag: the id of the sweep record it was run by
_NOTE = ("rlbench's own records: one run per sweep (kind=sweep) and the ledgers of who "
         "runs what (kind=ledger). No run here is a run of a config; the suites' "
         "experiments hold those.")


def of_sweep(sweep_id: str) -> str:
    """The search filter of the runs that sweep ``sweep_id`` made."""
    return f"tags.{SWEEP_TAG} = '{sweep_id}'"


def runs_of(sweep: Run) -> tuple[str, str]:
    """The experiment of the runs sweep record ``sweep`` made, and their search filter: its
    ``experiment`` tag and ``of_sweep``, or, for a record in a suite's experiment (a store
    written before the bookkeeping experiment), that experiment and its child runs."""
    if "experiment" in sweep.data.tags:
        return sweep.data.tags["experiment"], of_sweep(sweep.info.run_id)
    return sweep.info.experiment_id, f"tags.`mlflow.parentRunId` = '{sweep.info.run_id}'"


def bookkeeping_experiment(client: MlflowClient, *, create: bool = True,
                           artifact_location: str | None = None) -> str | None:
    """The id of the store's bookkeeping experiment: made on first use (once, however many
    processes ask together) with its artifacts at ``artifact_location`` (an embedded
    store's default: beside its database), restored if someone deleted it. None when it
    does not exist and ``create`` is false (a reader of a store no sweep of this rlbench
    wrote)."""
    existing = with_retry(client.get_experiment_by_name, BOOKKEEPING_EXPERIMENT)
    if existing is not None and existing.lifecycle_stage == "active":
        return existing.experiment_id
    if not create:
        return None if existing is None else existing.experiment_id
    with store_lock(client.tracking_uri):
        existing = with_retry(client.get_experiment_by_name, BOOKKEEPING_EXPERIMENT)
        if existing is None:
            database = sqlite_path(client.tracking_uri)
            artifacts = artifact_location
            if artifacts is None and database is not None:
                artifacts = (database.parent / ARTIFACT_DIR_NAME).resolve().as_uri()
            try:
                return with_retry(client.create_experiment, BOOKKEEPING_EXPERIMENT,
                                  artifact_location=artifacts,
                                  tags={"mlflow.note.content": _NOTE})
            except MlflowException as err:  # another client of the same server won
                if err.error_code != "RESOURCE_ALREADY_EXISTS":
                    raise
                existing = with_retry(client.get_experiment_by_name, BOOKKEEPING_EXPERIMENT)
        if existing.lifecycle_stage != "active":  # runs are made in active experiments only
            with_retry(client.restore_experiment, existing.experiment_id)
        return existing.experiment_id
