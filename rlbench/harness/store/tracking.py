"""MLflow tracking: one experiment per suite holding a run per config run, and a record per
sweep in the store's bookkeeping experiment (``bookkeeping``).

The store is the one ``uri.tracking_uri`` names (the embedded SQLite store under the out
dir by default); every call goes through ``retry.with_retry``. A run is tagged with what
it is (``identity_tags``) and the sweep that ran it, and its config is logged as flattened
params.
"""

from __future__ import annotations

import hashlib
import os
from collections.abc import Iterable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from mlflow.entities import Experiment, Param, Run, RunTag, ViewType
from mlflow.environment_variables import MLFLOW_SUPPRESS_PRINTING_URL_TO_STDOUT
from mlflow.exceptions import MlflowException
from mlflow.tracking import MlflowClient

from rlbench.errors import ConfigError
from rlbench.harness.plan.run_config import RunConfig
from rlbench.harness.store.artifact_places import ARTIFACT_DIR_NAME, artifact_roots
from rlbench.harness.store.bookkeeping import (
    BOOKKEEPING_EXPERIMENT,
    SWEEP_TAG,
    bookkeeping_experiment,
)
from rlbench.harness.store.claims import Ledger
from rlbench.harness.store.done_index import (
    ENTRY_TAG,
    INDEX_TAG,
    DoneEntry,
    entry_of,
    write_entries,
)
from rlbench.harness.store.identity_tags import CONFIG_IDENTITY, IDENTITY, LEGACY_IDENTITY
from rlbench.harness.store.retry import with_retry
from rlbench.harness.store.sqlite import (
    READY,
    check_out_dir,
    inspect_store,
    prepare_store,
    store_lock,
)
from rlbench.harness.store.sqlite_read import runs_tagged
from rlbench.harness.store.uri import StoreLocation, check_reachable

__all__ = ["Tracker", "all_experiments", "flatten", "quiet_downloads", "search_all"]


def flatten(mapping: Mapping[str, Any], prefix: str = "") -> dict[str, str]:
    """``{"a": {"b": 1}}`` -> ``{"a.b": "1"}``, values as strings."""
    flat: dict[str, str] = {}
    for key, value in mapping.items():
        name = f"{prefix}{key}"
        if isinstance(value, Mapping):
            flat.update(flatten(value, f"{name}."))
        else:
            flat[name] = str(value)
    return flat


def search_all(client: MlflowClient, experiment_id: str | Sequence[str], filter_string: str,
               *, deleted: bool = False, only_deleted: bool = False) -> list[Run]:
    """Every active run of the experiment (or experiments) matching ``filter_string`` (and
    every deleted one with ``deleted``; only the deleted ones with ``only_deleted``), all
    pages."""
    found: list[Run] = []
    token = None
    view = (ViewType.DELETED_ONLY if only_deleted
            else ViewType.ALL if deleted else ViewType.ACTIVE_ONLY)
    ids = [experiment_id] if isinstance(experiment_id, str) else list(experiment_id)
    while True:
        page = with_retry(client.search_runs, ids, filter_string,
                          run_view_type=view, max_results=1000, page_token=token)
        found.extend(page)
        token = page.token
        if not token:
            return found


def all_experiments(client: MlflowClient, *, page_size: int = 1000) -> list[Experiment]:
    """Every active experiment of the store, all pages: MLflow returns at most
    ``page_size`` (1,000 by default) a call."""
    found: list[Experiment] = []
    token = None
    while True:
        page = with_retry(client.search_experiments, max_results=page_size, page_token=token)
        found.extend(page)
        token = page.token
        if not token:
            return found


_PROGRESS_BAR = "MLFLOW_ENABLE_ARTIFACTS_PROGRESS_BAR"


@contextmanager
def quiet_downloads() -> Iterator[None]:
    """MLflow draws a progress bar per downloaded file: a few small files need none."""
    saved = os.environ.get(_PROGRESS_BAR)
    os.environ[_PROGRESS_BAR] = "false"
    try:
        yield
    finally:
        if saved is None:
            del os.environ[_PROGRESS_BAR]
        else:
            os.environ[_PROGRESS_BAR] = saved


class Tracker:
    """Creates the suite's experiment, the sweep's record and one run per config run."""

    def __init__(self, store: StoreLocation | Path, *, prepare: bool = True):
        """Open ``store``: the location the command resolved once, or an out dir whose
        store ``StoreLocation.of`` finds. With ``prepare`` (the sweep's own process), first
        check that the out dir can be written and that an embedded store is readable, then
        make the store if it is missing (``store.prepare_store``): a bad out dir or store
        raises ``ConfigError`` before anything is written. Workers open the location the
        sweep prepared with ``prepare=False``."""
        self.location = store if isinstance(store, StoreLocation) else StoreLocation.of(store)
        self.uri = self.location.uri
        self.out_dir = out_dir = self.location.out_dir
        # MLflow's client prints two "View run" lines to stdout as it ends each run of a
        # server (and reads the run back to do so): into a sweep's own output, once a run.
        # The sweep names the tracking URI once; a user's own setting is kept.
        os.environ.setdefault(MLFLOW_SUPPRESS_PRINTING_URL_TO_STDOUT.name, "true")
        database = self.location.database
        if prepare:
            check_out_dir(out_dir)
            # an unreadable store is refused before a file is made
            state = READY if database is None else inspect_store(database)
            out_dir.mkdir(parents=True, exist_ok=True)
            if state != READY:
                database.parent.mkdir(parents=True, exist_ok=True)
                prepare_store(database)
        self.client = MlflowClient(self.uri)

    def check_reachable(self, timeout: float = 10.0) -> None:
        check_reachable(self.uri, timeout)

    def artifact_roots(self) -> tuple[Path, ...]:
        """The directories this store's artifacts may be removed from (``artifact_places``)."""
        return artifact_roots(self.uri, self.out_dir)

    def experiment(self, suite: str) -> str:
        """The id of the suite's experiment, created on first use (once, however many
        sweeps start together)."""
        if suite == BOOKKEEPING_EXPERIMENT:
            raise ConfigError(f"{BOOKKEEPING_EXPERIMENT} is the name of the store's own "
                              "records (sweeps and claims): give the suite another name")
        artifacts = None
        if self.uri.startswith("sqlite:"):
            artifacts = (self.out_dir / ARTIFACT_DIR_NAME).resolve().as_uri()
        # made beside the suite's, so its sweep summaries go where the suite's artifacts go
        bookkeeping_experiment(self.client, artifact_location=artifacts)
        with store_lock(self.uri):
            existing = with_retry(self.client.get_experiment_by_name, suite)
            if existing is not None:
                return existing.experiment_id
            try:  # its done index is complete from the start: every run adds its entry
                return with_retry(self.client.create_experiment, suite,
                                  artifact_location=artifacts, tags={INDEX_TAG: "complete"})
            except MlflowException as err:  # another client of the same server won
                if err.error_code != "RESOURCE_ALREADY_EXISTS":
                    raise
                return with_retry(self.client.get_experiment_by_name, suite).experiment_id

    def start_sweep(self, experiment_id: str, suite: str, tags: Mapping[str, str]) -> str:
        """The id of a new sweep's record, RUNNING until ``finish``: in the bookkeeping
        experiment, tagged with the suite and its experiment."""
        run = with_retry(self.client.create_run, bookkeeping_experiment(self.client),
                         run_name=f"{suite} sweep",
                         tags={"suite": suite, "kind": "sweep", "experiment": experiment_id,
                               **tags})
        return run.info.run_id

    def ledgers(self, experiment_id: str) -> list[Run]:
        """The ledger runs of the suite of ``experiment_id`` (``store.claims``): in the
        bookkeeping experiment, and where a store written before it kept them, in the
        suite's experiment."""
        ledgers = self.runs_tagged(experiment_id, "kind", "ledger")
        bookkeeping = bookkeeping_experiment(self.client, create=False)
        if bookkeeping is not None:
            ledgers += self.runs_tagged(bookkeeping, "ledger_of", experiment_id)
        return ledgers

    def runs(self, experiment_id: str, filter_string: str, *,
             deleted: bool = False, only_deleted: bool = False) -> list[Run]:
        return search_all(self.client, experiment_id, filter_string, deleted=deleted,
                          only_deleted=only_deleted)

    def indexed(self, experiment_id: str) -> bool:
        """Whether the suite's done index is complete (``store.done_index``)."""
        experiment = with_retry(self.client.get_experiment, experiment_id)
        return INDEX_TAG in experiment.tags

    def index(self, experiment_id: str, entries: Iterable[DoneEntry]) -> None:
        """Write ``entries`` into the suite's done index, each on its identity's ledger
        run, mark each run that waited for its entry as written, then mark the index
        complete: what a planner does with the finished runs the index lacks."""
        by_shard: dict[str, list[DoneEntry]] = {}
        for entry in entries:
            by_shard.setdefault(entry.identity[:1], []).append(entry)
        for written in by_shard.values():
            ledger = Ledger(self.client, experiment_id, written[0].identity)
            # a key there already holds this entry, or a damaged one MLflow will not let
            # be changed: that run is found by a search again
            there = with_retry(self.client.get_run, ledger.run_id).data.params
            write_entries(self.client, ledger.run_id,
                          [entry for entry in written if entry.key not in there])
        with_retry(self.client.set_experiment_tag, experiment_id, INDEX_TAG, "complete")

    def entries_written(self, run_ids: Iterable[str]) -> None:
        """Mark each run whose entry the index now holds as written (``ENTRY_TAG``)."""
        for run_id in run_ids:
            self.set_tags(run_id, {ENTRY_TAG: "written"})

    def note_done(self, run_id: str) -> None:
        """Add the FINISHED run ``run_id`` to its suite's done index, as it was stored."""
        run = with_retry(self.client.get_run, run_id)
        entry = entry_of(run)
        if entry is not None:
            ledger = Ledger(self.client, run.info.experiment_id, entry.identity)
            write_entries(self.client, ledger.run_id, [entry])
            self.entries_written([run_id])

    def runs_tagged(self, experiment_id: str, key: str, value: str) -> list[Run]:
        """The experiment's active runs whose tag ``key`` is ``value``: from the embedded
        store in a few bulk queries (``sqlite_read``), from a server by a paged search."""
        database = self.location.database
        if database is None or not database.exists():
            return self.runs(experiment_id, f"tags.`{key}` = '{value}'")
        return runs_tagged(database, experiment_id, key, value)

    def attempts(self, experiment_id: str, config: RunConfig, filter_string: str = "", *,
                 deleted: bool = False) -> list[Run]:
        """The runs of ``config``'s identity (the active ones, and the deleted ones with
        ``deleted``), narrowed by ``filter_string`` if one is given, latest first. A store
        of rlbench 0.4.0 holds the same identity under the older tag: both are searched
        (MLflow's filters have no ``or``)."""
        found: dict[str, Run] = {}
        for tag in (IDENTITY, LEGACY_IDENTITY):
            query = f"tags.{tag} = '{config.identity}'"
            for run in self.runs(experiment_id, f"{query} and {filter_string}"
                                 if filter_string else query, deleted=deleted):
                found.setdefault(run.info.run_id, run)
        return sorted(found.values(), key=lambda run: run.info.start_time or 0, reverse=True)

    def delete(self, run_id: str) -> None:
        """Soft-delete a run (kept in the store, hidden from searches)."""
        with_retry(self.client.delete_run, run_id)

    def start_run(self, experiment_id: str, sweep_id: str, config: RunConfig,
                  tags: Mapping[str, str]) -> str:
        """The id of a new run of ``config`` in the suite's experiment, made by sweep
        ``sweep_id``, its config logged as params."""
        run = with_retry(
            self.client.create_run,
            experiment_id,
            run_name=config.name,
            tags={
                SWEEP_TAG: sweep_id,
                "kind": "run",
                "suite": config.suite,
                "algorithm": config.algo,
                "env": config.task,
                "seed": str(config.seed_index),
                IDENTITY: config.identity,
                CONFIG_IDENTITY: config.config_identity,
                ENTRY_TAG: "pending",
                **({"code_fingerprint": config.code} if config.code else {}),
                **({"recipe": config.recipe} if config.recipe else {}),
                **_recipe_file_tags(config.recipe),
                **_offline_tags(config),
                **tags,
            },
        )
        self.log_params(run.info.run_id, config.as_dict())
        return run.info.run_id

    def log_params(self, run_id: str, params: Mapping[str, Any]) -> None:
        items = [Param(k, v) for k, v in flatten(params).items()]
        for start in range(0, len(items), 100):
            with_retry(self.client.log_batch, run_id, params=items[start:start + 100])

    def set_tags(self, run_id: str, tags: Mapping[str, str]) -> None:
        with_retry(self.client.log_batch, run_id, tags=[RunTag(k, v) for k, v in tags.items()])

    def log_artifacts(self, run_id: str, paths: Iterable[Path]) -> None:
        """Log each file, and each directory as a directory of the same name; paths that do
        not exist are left out."""
        for path in paths:
            if path.is_dir():
                with_retry(self.client.log_artifacts, run_id, str(path), path.name)
            elif path.exists():
                with_retry(self.client.log_artifact, run_id, str(path))

    def finish(self, run_id: str, status: str) -> None:
        with_retry(self.client.set_terminated, run_id, status)


def _recipe_file_tags(recipe: str) -> dict[str, str]:
    """A recipe file's sha256 (``recipe_sha256``): what a reader of the run elsewhere must
    supply, since the recipe lies in no commit of rlbench's."""
    if not recipe.endswith(".py"):
        return {}
    try:
        return {"recipe_sha256": hashlib.sha256(Path(recipe).read_bytes()).hexdigest()}
    except OSError:
        return {}


def _offline_tags(config: RunConfig) -> dict[str, str]:
    """An offline run's dataset, its eval env and its reference scores (the ``env`` tag is
    the dataset's name: the task tables group by)."""
    if not config.offline:
        return {}
    tags = {"dataset": config.dataset, "eval_env": config.env,
            "dataset_sha256": config.dataset_sha256 or ""}
    if config.dataset_refs is not None:
        tags["ref_min_score"], tags["ref_max_score"] = (repr(v) for v in config.dataset_refs)
    return tags
