"""A stored run as ``reproduce`` needs it: its record (config, seeds, tags), its metric
series, and the ``RunConfig`` that makes it again in this checkout.

The record is read from the store, where every run keeps it whatever became of its files:
its params (the resolved config and seeds, flattened to text by the tracker) and its tags.
A store committed without artifacts (the reference stores) is reproduced like any other.
"""

from __future__ import annotations

import ast
import dataclasses
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from mlflow.entities import Run
from mlflow.exceptions import MlflowException
from mlflow.tracking import MlflowClient

from rlbench.errors import ConfigError, quote
from rlbench.harness.plan.datasets import plan_dataset
from rlbench.harness.plan.fingerprint import code_fingerprint
from rlbench.harness.plan.recipe_sources import name_recipe, recipe_sources
from rlbench.harness.plan.run_config import RunConfig
from rlbench.harness.policy.load import checked_run_config, open_run_store, read_run_config
from rlbench.harness.reproduce.series import Series, stored_series
from rlbench.harness.store.identity_tags import IDENTITY, config_identity_of, identity_of
from rlbench.harness.store.run_artifacts import run_member
from rlbench.recipe import Seeds
from rlbench.version import __version__

__all__ = ["StoredRun", "find_stored_run", "rebuilt_config", "recorded_config"]

_RUN_FIELDS = {f.name: f for f in dataclasses.fields(RunConfig)}
# the fields whose text is the value itself: a code fingerprint of digits stays text
_TEXT_FIELDS = frozenset({"suite", "algo", "env", "env_family", "device", "numerics", "code",
                          "dataset", "dataset_label", "dataset_sha256"})


@dataclass(frozen=True)
class StoredRun:
    """A finished run of a store: where it was found, its record and its series."""

    source: str  # the run directory or "<run id> in <store>"
    run_id: str
    config: dict[str, Any]  # its recorded config, seeds and identity
    params: dict[str, Any]  # its hyperparameters, read by its recipe
    tags: dict[str, str]
    series: Series

    @property
    def budget(self) -> tuple[str, int]:
        """The run's unit (frames or steps) and its whole budget."""
        if self.config.get("dataset") is not None:
            return "steps", int(self.config["steps"])
        return "frames", int(self.config["frames"])

    @property
    def end(self) -> int:
        """The run's last step: its budget, or past it where the budget was rounded up to
        whole rollouts or batches (the last point it logged)."""
        last = max((found[-1][0] for found in self.series.values() if found), default=0)
        return max(self.budget[1], last)

    @property
    def seeds(self) -> Seeds:
        return Seeds(**self.config["seeds"])


def find_stored_run(run: str, *, store: str | None, recipe: str | None,
                    env: str | None) -> StoredRun:
    """The finished run ``run`` names: an MLflow run id in ``store`` (default
    ``rlbench_runs``), or a run directory, whose MLflow run is the newest finished one of
    its identity in ``store`` or, without it, in the store the directory lies in
    (``<out_dir>/runs/<suite>/<run>``). ``recipe`` and ``env`` are what the user vouches
    for (a recipe named by module or file, a ``module:EnvId`` env): both import code."""
    named = None if recipe is None else name_recipe(recipe)
    directory = Path(run)
    if directory.is_dir():
        client = open_run_store(store if store is not None else directory.resolve().parents[2],
                                None)
        run_id = _newest_of_identity(client, _identity_in(directory), str(directory))
        source = str(directory)
    else:
        if not (len(run) == 32 and all(c in "0123456789abcdef" for c in run)):
            raise ConfigError(f"run={quote(run)} is neither a run directory nor an MLflow run "
                              "id (32 hex digits)")
        client, run_id = open_run_store(store, None), run
        source = f"{run} in {client.tracking_uri}"
    try:
        found = client.get_run(run_id)
    except MlflowException as err:
        raise ConfigError(f"no run {run_id} in the store at {client.tracking_uri}") from err
    if found.info.status != "FINISHED":
        raise ConfigError(f"{source} is {found.info.status}: only a finished run is reproduced")
    config = recorded_config(found)
    params = checked_run_config(config, f"{source}: its record",
                                () if env is None else (env,))
    if named is not None and named != config["algo"]:
        raise ConfigError(f"recipe={recipe} is the recipe {named}, but {source} was trained by "
                          f"{config['algo']}")
    return StoredRun(source, run_id, config, params, dict(found.data.tags),
                     stored_series(client, run_id))


def _identity_in(directory: Path) -> str:
    path = run_member(directory, "config.yaml", str(directory))
    if path is None:
        raise ConfigError(f"{directory} holds no config.yaml: not an rlbench run")
    config = read_run_config(path, f"{directory}: config.yaml")
    identity = config.get("identity") if isinstance(config, dict) else None
    if not isinstance(identity, str) or not identity.isalnum():
        raise ConfigError(f"{directory}: config.yaml names no identity")
    return identity


def _newest_of_identity(client: MlflowClient, identity: str, source: str) -> str:
    found = client.search_runs(
        [e.experiment_id for e in client.search_experiments()],
        f"tags.{IDENTITY} = '{identity}' and attributes.status = 'FINISHED'",
        order_by=["attributes.start_time DESC"], max_results=1)
    if not found:
        raise ConfigError(f"{source}: the store at {client.tracking_uri} holds no finished run "
                          f"of its identity {identity}; name the store it was made in with "
                          "store=, or the run by its MLflow run id")
    return found[0].info.run_id


def _value(text: str) -> Any:
    """A param's value from the text the tracker wrote (``str`` of it)."""
    try:
        return ast.literal_eval(text)
    except (ValueError, SyntaxError, MemoryError, RecursionError):
        return text


def recorded_config(run: Run) -> dict[str, Any]:
    """The config a run recorded, as its config.yaml holds it: its params unflattened
    (``algo_params.gamma`` -> ``{"algo_params": {"gamma": ...}}``), with its identity and
    where its recipe came from (tags)."""
    config: dict[str, Any] = {}
    for key, text in run.data.params.items():
        *path, leaf = key.split(".")
        node = config
        for part in path:
            node = node.setdefault(part, {})
            if not isinstance(node, dict):
                raise ConfigError(f"run {run.info.run_id}: its param {key} does not nest")
        top = not path and leaf in _TEXT_FIELDS
        node[leaf] = (None if text == "None" else text) if top else _value(text)
    config.setdefault("algo_params", {})  # a recipe without hyperparameters logs none
    tags = run.data.tags
    config["identity"] = identity_of(tags)
    if tags.get("recipe"):
        config["recipe"] = tags["recipe"]
    return config


def rebuilt_config(stored: StoredRun) -> RunConfig:
    """The run's config as this checkout makes it: its recorded fields with this checkout's
    code fingerprint. What this checkout cannot run (a recipe it does not know, a recipe
    named by module or file and not named again, a dataset that is not here or not the
    same file) is a ``ConfigError``."""
    config = stored.config
    algo = config["algo"]
    location = config.get("recipe") or ""
    if algo not in recipe_sources():
        how = (f"name it again: recipe={location}" if location else
               "install the package that provides it")
        raise ConfigError(f"{stored.source} was trained by the recipe {algo}, which this "
                          f"checkout does not know: {how}")
    fields = {key: value for key, value in config.items() if key in _RUN_FIELDS}
    fields["algo_params"] = dict(stored.params)
    if fields.get("dataset") is not None:
        fields.setdefault("frames", 0)  # an offline run's record has none
    if fields.get("dataset_refs") is not None:
        fields["dataset_refs"] = tuple(fields["dataset_refs"])
    fields["code"] = code_fingerprint(algo)
    fields["recipe"] = recipe_sources()[algo].location
    try:
        rebuilt = RunConfig(**fields)
    except TypeError as err:
        raise ConfigError(f"{stored.source}: its record is not a run config this checkout "
                          f"reads ({err})") from None
    recorded = config_identity_of(stored.tags)
    same_version = stored.tags.get("rlbench_version") == __version__  # the hash holds it
    if recorded and same_version and rebuilt.config_identity != recorded:
        why = ("this checkout reads it otherwise" if rebuilt.numerics != "portable" else
               "a portable identity holds the kernels portable mode pins, and this checkout "
               "pins others (or reads the record otherwise)")
        raise ConfigError(f"{stored.source}: its record rebuilds a config of identity "
                          f"{rebuilt.config_identity}, not the run's {recorded}: {why}")
    if rebuilt.offline:
        _check_dataset(rebuilt, stored.source)
    return rebuilt


def _check_dataset(config: RunConfig, source: str) -> None:
    planned = plan_dataset(str(config.dataset))
    if planned.sha256 != config.dataset_sha256:
        raise ConfigError(f"{source} trained on {config.dataset} with sha256 "
                          f"{config.dataset_sha256}; the file here has sha256 "
                          f"{planned.sha256}: another dataset, so other numbers")
