"""Command-line overrides and the resolved grid of run configs.

Precedence, lowest first: harness defaults < suite settings < suite ``per_env`` settings <
command line. A suite's ``per_env[env].algos`` restricts the algorithms run on that env
(e.g. DQN only where actions are discrete), whatever ``algos`` the command line names.
Hyperparameters: recipe defaults < recipe family defaults < suite ``per_algo`` < suite
``per_env[env][algo]`` < command line ``<algo>.<field>=value``.
"""

from __future__ import annotations

import copy
import functools
import hashlib
import json
import math
import os
import re
import types
import typing
from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass, field, replace
from dataclasses import fields as dataclass_fields
from pathlib import Path
from typing import Any

import torch

from rlbench.envs import action_space_kind, env_family, list_envs
from rlbench.errors import ConfigError, UnknownNameError, near_matches, quote
from rlbench.harness.plan.algorithms import (
    list_algorithms,
    load_algorithm,
    missing_defaults,
    resolve_algo_config,
    resolve_with_sources,
)
from rlbench.harness.plan.command_keys import CHECKPOINT_EVERY, RUN_TABLE
from rlbench.harness.plan.datasets import MadeFamily, PlannedDataset, dataset_label, plan_dataset
from rlbench.harness.plan.fingerprint import code_fingerprint
from rlbench.harness.plan.grid import (
    BUDGET_AXES,
    Axis,
    GridLevel,
    grid_axes,
    grid_points,
    read_grid_section,
    split_values,
    variant_label,
)
from rlbench.harness.plan.keys import scalar_word, split_words
from rlbench.harness.plan.recipe_sources import name_recipe, recipe_sources
from rlbench.harness.plan.suites import SUITE_SETTINGS, Suite, load_suite
from rlbench.version import __version__

__all__ = ["Overrides", "RunConfig", "SlurmSettings", "SweepConfig", "check_device_here",
           "check_devices_here", "parse_overrides", "resolve_sweep"]

SWEEP_KEYS = {key.name: key.default for key in RUN_TABLE
              if key.name not in SUITE_SETTINGS and not key.family}
ALIASES = RUN_TABLE.aliases
LIST_KEYS = {key.name for key in RUN_TABLE if key.many}
# A grid the command line makes (algo=, env= or dataset= without suite=) is stored under
# this suite name, not under the name of the suite whose settings it takes
ADHOC_SUITE = "adhoc"
REUSE = RUN_TABLE.key("reuse").choices  # code: a finished run by other code counts
LAUNCHERS = RUN_TABLE.key("launcher").choices
# Where checkpoints go besides the out dir: ``tracking`` uploads each to the run's MLflow
# run, so a run taken over on another host resumes from it; ``auto``: when the store is an
# ``mlflow server`` (``store.checkpoint_uploads``).
CHECKPOINT_STORES = RUN_TABLE.key("checkpoint_store").choices
DEVICE_PATTERN = re.compile(r"(cpu|mps)(:0)?|cuda(:\d+)?")


@dataclass
class Overrides:
    """Parsed ``key=value`` arguments: harness settings and per-algorithm hyperparameters,
    and the settings given a comma list of values (``plan.grid``)."""

    sweep: dict[str, Any]
    settings: dict[str, Any]
    algo_params: dict[str, dict[str, Any]]
    algo_grids: dict[str, dict[str, list[Any]]] = field(default_factory=dict)
    budget_grids: dict[str, list[Any]] = field(default_factory=dict)


def _loadable_recipes() -> dict[str, types.ModuleType]:
    """The recipes that import, by name: what suggestions and lists of alternatives name (a
    broken installed package is reported where it is named, not in another name's error)."""
    recipes = {}
    for algo in list_algorithms():
        try:
            recipes[algo] = load_algorithm(algo)
        except ConfigError:
            continue
    return recipes


def valid_keys() -> list[str]:
    """Every key the command line accepts, hyperparameters included."""
    keys = [*SWEEP_KEYS, *SUITE_SETTINGS, *ALIASES]
    for algo, recipe in _loadable_recipes().items():
        keys += [f"{algo}.{f}" for f in recipe.Config.__dataclass_fields__]
    return keys


# Names of one meaning in different recipes and libraries: a typo of one finds the others.
_SYNONYMS = ({"learning_rate", "lr"}, {"gamma", "discount"}, {"hidden_sizes", "net_arch"},
             {"num_envs", "n_envs"}, {"rollout_steps", "n_steps"}, {"epochs", "n_epochs"},
             {"entropy_coef", "ent_coef"}, {"critic_coef", "vf_coef"},
             {"gae_lambda", "lmbda"})


def field_suggestions(name: str, fields: Sequence[str]) -> list[str]:
    """The fields of one recipe closest to ``name``: those sharing its meaning through a
    synonym (``learning_rate`` -> ``actor_lr``, ``critic_lr``; ``lr`` ->
    ``learning_rate``), then the closest spellings."""
    words = next((group for group in _SYNONYMS if name in group), set())
    related = [f for f in fields for w in words
               if f == w or f.endswith(f"_{w}") or f.startswith(f"{w}_")]
    return list(dict.fromkeys([*related, *near_matches(name, fields)]))[:4]


def parse_overrides(args: Sequence[str]) -> Overrides:
    """Parse ``key=value`` words; unknown keys raise with near matches."""
    parsed = RUN_TABLE.parse(args, rest=True)
    settings = {key: parsed[key] for key in parsed.given if key in SUITE_SETTINGS}
    sweep = {key: parsed[key] for key in parsed.given if key not in SUITE_SETTINGS}
    if "algos" in settings:  # recipes named by module or file, for their keys below
        settings["algos"] = [name_recipe(word) for word in settings["algos"]]
    budget_grids = {key: settings.pop(key) for key in BUDGET_AXES
                    if isinstance(settings.get(key), list)}
    algo_params: dict[str, dict[str, Any]] = {}
    algo_grids: dict[str, dict[str, list[Any]]] = {}
    for key, text in split_words(parsed.rest, {}):
        algo, dot, param = key.partition(".")
        if not dot or algo not in list_algorithms():
            raise UnknownNameError("override key", key, valid_keys())
        fields = load_algorithm(algo).Config.__dataclass_fields__
        if param not in fields:  # suggest this algorithm's own fields, not others'
            raise UnknownNameError(f"{algo} hyperparameter", key, [],
                                   [f"{algo}.{name}" for name in
                                    field_suggestions(param, list(fields))])
        values = split_values(key, text)
        if len(values) > 1 and _takes_a_list(algo, param) and not any(
                value.startswith("[") for value in values):
            raise ConfigError(f"{key} is a list, written in brackets: {key}=[{text}] (a comma "
                              f"list of lists runs each: {key}=[64,64],[256,256])")
        if len(values) > 1:
            algo_grids.setdefault(algo, {})[param] = [scalar_word(key, v) for v in values]
        else:
            algo_params.setdefault(algo, {})[param] = scalar_word(key, text)
    return Overrides(sweep, settings, algo_params, algo_grids, budget_grids)


def _takes_a_list(algo: str, param: str) -> bool:
    """Whether hyperparameter ``param`` of ``algo`` is a list (``hidden_sizes``)."""
    hint = typing.get_type_hints(load_algorithm(algo).Config)[param]
    return any(typing.get_origin(arg) is tuple for arg in (hint, *typing.get_args(hint)))


@dataclass(frozen=True)
class RunConfig:
    """One run of a sweep, fully resolved: its identity is a hash of these fields."""

    suite: str
    algo: str
    env: str
    env_family: str
    seed_index: int
    base_seed: int
    frames: int
    eval_every: int
    eval_episodes: int
    threads: int
    device: str
    algo_params: dict[str, Any]
    save_snapshots: bool = False
    save_transitions: bool = False
    # an offline run: ``steps`` gradient steps on ``dataset`` (``frames`` is 0), evaluated in
    # ``env``, the dataset's eval env; the file's sha256 and reference scores are its own
    dataset: str | None = None
    dataset_label: str | None = None
    dataset_sha256: str | None = None
    dataset_refs: tuple[float, float] | None = None
    steps: int = 0
    # the fingerprint of the code the run executes (``plan.fingerprint``): part of its
    # identity, so a changed recipe or loss makes its runs new; empty: not taken
    code: str = ""
    # frames or gradient steps between checkpoints: how a run is kept, not what it
    # computes (a resumed run computes the same numbers), so not part of its identity
    checkpoint_every: int = field(default=CHECKPOINT_EVERY, compare=False)
    checkpoint_store: str = field(default="auto", compare=False)  # one of CHECKPOINT_STORES
    # a recipe named on the command line by module or file: where other processes import
    # it from (``recipe_sources``); its code is in ``code``, wherever it lies
    recipe: str = field(default="", compare=False)
    # the settings a grid varies at this point (``learning_rate=0.001``), for its name: what
    # they are set to is in ``algo_params`` and the budget, so not part of its identity
    variant: str = field(default="", compare=False)

    @property
    def offline(self) -> bool:
        return self.dataset is not None

    @property
    def task(self) -> str:
        """What the run learns: its dataset's name (offline), else its env."""
        return (self.dataset_label or self.env) if self.offline else self.env

    @property
    def entry(self) -> str:
        """The algorithm, with the settings its grid varies: ``ppo[learning_rate=0.001]``."""
        return f"{self.algo}[{self.variant}]" if self.variant else self.algo

    @property
    def name(self) -> str:
        return f"{self.entry}/{self.task}/seed{self.seed_index}"

    @property
    def budget(self) -> int:
        """Gradient steps (offline) or frames (online)."""
        return self.steps if self.offline else self.frames

    @property
    def unit(self) -> str:
        return "steps" if self.offline else "frames"

    @property
    def throughput_metric(self) -> str:
        return "train/steps_per_s" if self.offline else "train/fps"

    def as_dict(self) -> dict[str, Any]:
        """The fields, but the options that are off: a run that keeps no snapshots or
        transitions, or an online run, is the run it was before those options existed (the
        same identity, so it resumes); an offline run has no ``frames``. Where a recipe
        was named from (``recipe``) is not a param: the same code named two ways is one
        config (the run's config.yaml and its ``recipe`` tag keep it)."""
        fields = self._identity_fields()
        fields["algo_params"] = copy.deepcopy(self.algo_params)  # the only nested field
        return fields

    def _identity_fields(self) -> dict[str, Any]:
        """``as_dict`` with ``algo_params`` shared, not copied: for hashing only."""
        fields = {f.name: getattr(self, f.name) for f in dataclass_fields(self)}
        for option in _ARTIFACT_OPTIONS:
            if not fields[option]:
                del fields[option]
        for option in _OFFLINE_FIELDS:
            if fields[option] is None or (option == "steps" and not self.offline):
                del fields[option]
        if self.offline:
            del fields["frames"]
        if not fields["code"]:
            del fields["code"]
        del fields["checkpoint_every"], fields["checkpoint_store"], fields["recipe"]
        del fields["variant"]
        return fields

    @functools.cached_property
    def identity(self) -> str:
        """Hash of the resolved config, the code it runs and the rlbench version (16 hex
        digits, its MLflow run's ``identity`` tag): a run is done once per identity.
        Computed once: planning asks for it several times a run, over grids of thousands."""
        return _hash_of(self._identity_fields())

    @functools.cached_property
    def config_identity(self) -> str:
        """The identity without the code (the ``config_identity`` tag): what runs made by
        other code with the same config share (``reuse=code``), and the identity of runs
        made before rlbench fingerprinted code."""
        return _hash_of({k: v for k, v in self._identity_fields().items() if k != "code"})


def _hash_of(fields: dict[str, Any]) -> str:
    payload = json.dumps({"config": fields, "rlbench": __version__}, sort_keys=True,
                         default=list)
    return hashlib.sha256(payload.encode()).hexdigest()[:16]


_ARTIFACT_OPTIONS = ("save_snapshots", "save_transitions")
_OFFLINE_FIELDS = ("dataset", "dataset_label", "dataset_sha256", "dataset_refs", "steps")


@dataclass(frozen=True)
class SlurmSettings:
    """What ``launcher=slurm`` asks Slurm for (``slurm.<field>=...``): a run's CPUs and GPU
    come from its config. ``time_limit_min``: each task's time limit; a run that needs
    longer is checkpointed ``signal_delay_s`` before it and requeued. ``max_running``:
    tasks of each array at once (a sweep submits one array per kind of run, threads and
    device, of at most Slurm's ``MaxArraySize`` tasks). ``folder``: submitit's pickles and
    the tasks' logs (default ``<out_dir>/slurm``), on a filesystem every node sees."""

    partition: str | None = None
    account: str | None = None
    qos: str | None = None
    time_limit_min: int = 1440
    mem_gb: float | None = None
    max_running: int = 256
    signal_delay_s: int = 120
    folder: Path | None = None


@dataclass
class SweepConfig:
    suite: Suite
    out_dir: Path
    dry_run: bool
    runs: list[RunConfig]
    jobs: int = 1
    launcher: str = "local"
    ray_address: str | None = None
    force_threads: bool = False
    reuse_code: bool = False  # a finished run of the same config by other code is done
    slurm: SlurmSettings = field(default_factory=SlurmSettings)  # launcher=slurm
    # per (algo, env): the layer each hyperparameter came from (see resolve_with_sources)
    sources: dict[tuple[str, str], dict[str, str]] = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)  # what the plan should say (show, run)
    to_make: list[MadeFamily] = field(default_factory=list)  # datasets to make before running


# Upper bounds on sizes, far past any real sweep but small enough that no counter, index or
# progress bar overflows and that a typo (frames=1e30, seeds=1e20) fails at once.
# eval_episodes: one env per episode is built at each evaluation (``rlbench eval``'s cap);
# runs: a grid plans 10^5 runs in about a second and 0.5 GB, and ``show`` lists a few
LIMITS = {key.name: int(key.high) for key in RUN_TABLE if key.high is not None}
MAX_RUNS = 10**5  # runs in one grid


def _size(value: int) -> str:
    return f"{value:,}" if value < 10**15 else f"{value:.3g}"


def _positive_int(settings: dict[str, Any], key: str, minimum: int = 1) -> int:
    """``settings[key]`` as an integer in ``[minimum, LIMITS[key]]``."""
    value = settings.get(key)
    if value is None:
        raise ConfigError(f"{key} is not set: give it in the suite or as {key}=...")
    if isinstance(value, float) and value.is_integer():
        value = int(value)
    if not isinstance(value, int) or isinstance(value, bool) or value < minimum:
        raise ConfigError(f"{key} must be an integer >= {minimum}, got {quote(value)}")
    if value > LIMITS[key]:
        raise ConfigError(f"{key}={_size(value)} is beyond what rlbench runs (at most "
                          f"{LIMITS[key]:,})")
    return value


def _check_device(device: Any) -> str:
    if not isinstance(device, str) or not DEVICE_PATTERN.fullmatch(device):
        raise ConfigError(f"device must be cpu, cuda, cuda:N or mps, got {quote(device)}")
    return device


def check_devices_here(sweep: SweepConfig) -> None:
    """Raise unless every run's device exists on this machine and its threads fit this
    machine's cores (unless ``force_threads=true``): a local sweep is refused as it is
    planned, so ``show`` refuses what ``run`` would."""
    for device in sorted({run.device for run in sweep.runs}):
        check_device_here(device)
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
    threads = max(run.threads for run in sweep.runs)
    if cores and threads > cores and not sweep.force_threads:
        raise ConfigError(f"threads={threads}, but this machine gives rlbench {cores} cores: "
                          "more threads than cores only slow a run down (add "
                          "force_threads=true to run it all the same)")


def check_device_here(device: Any) -> None:
    """Raise unless ``device`` is a device name that exists on this machine."""
    _check_device(device)
    kind, _, number = device.partition(":")
    if kind == "cuda":
        count = torch.cuda.device_count() if torch.cuda.is_available() else 0
        if count == 0:
            raise ConfigError(f"device={device}, but this machine has no CUDA device")
        if number and int(number) >= count:
            raise ConfigError(f"device={device}, but this machine has {count} CUDA "
                              f"device(s): cuda:0 to cuda:{count - 1}")
    if kind == "mps" and not torch.backends.mps.is_available():
        raise ConfigError("device=mps, but MPS is not available on this machine")


def _names(settings: dict[str, Any], key: str) -> list[str]:
    """The names of ``key``, in order, each once (a repeated name would run twice)."""
    value = settings.get(key)
    if isinstance(value, str):
        value = [value]
    if not value:
        raise ConfigError(f"{key} is empty: give it in the suite or as {key}=a,b")
    return list(dict.fromkeys(value))


def _check_unused_hyperparameters(suite: Suite, overrides: Overrides, envs: list[str],
                                  runs: list[RunConfig], eval_envs: dict[str, str],
                                  unplanned_datasets: Collection[str],
                                  suite_grids: Mapping[str, Mapping[str, list[Any]]]) -> None:
    """Hyperparameters given for an algorithm on an env where nothing runs (``sac.tau=abc``
    with ``algo=ppo``, a suite's ``per_env`` entry for an algorithm that env does not take)
    are checked all the same, each value of a grid too: a typo must not wait for the day
    its algorithm runs. ``eval_envs`` maps each planned dataset (source and name) to its
    eval env; a suite dataset a filter left out (``unplanned_datasets``) is not read to
    learn its env, so its entries wait until it is planned."""
    ran = {(run.algo, run.env) for run in runs} | {(run.algo, run.task) for run in runs}
    ran |= {(run.algo, run.dataset) for run in runs if run.offline}
    given = {*overrides.algo_params, *overrides.algo_grids, *suite.per_algo, *suite_grids}
    for algo in sorted(given):
        grids = {**suite_grids.get(algo, {}), **overrides.algo_grids.get(algo, {})}
        for env in envs:
            if (algo, env) in ran:
                continue
            per_env = suite.per_env.get(env, {}).get(algo, {})
            layers = (suite.per_algo.get(algo, {}), per_env if isinstance(per_env, dict) else {},
                      overrides.algo_params.get(algo, {}))
            resolve_algo_config(algo, env_family(env), *layers, env=env)
            for name, values in grids.items():
                for value in values:
                    resolve_algo_config(algo, env_family(env), *layers, {name: value}, env=env)
    for env, env_settings in suite.per_env.items():
        _, env_grids = _grid_section(env_settings.get("grid"),
                                     f"suite {suite.name}: per_env {env}.grid")
        if env in eval_envs:
            family = env_family(eval_envs[env])
        elif env in unplanned_datasets:
            continue  # left out by a filter (algo=ppo): its eval env is not known unread
        else:
            family = env_family(env)
        for algo, params in env_settings.items():
            if algo in list_algorithms() and (algo, env) not in ran:
                if not isinstance(params, dict):
                    raise ConfigError(f"suite {suite.name}: per_env {env}.{algo} must be a "
                                      f"mapping of hyperparameters, got {quote(params)}")
                resolve_algo_config(algo, family, suite.per_algo.get(algo, {}), params, env=env)
        for algo, grids in env_grids.items():
            if (algo, env) in ran:
                continue
            params = env_settings.get(algo, {})
            for name, values in grids.items():
                for value in values:
                    resolve_algo_config(algo, family, suite.per_algo.get(algo, {}),
                                        params if isinstance(params, dict) else {},
                                        {name: value}, env=env)


def _grid_section(section: Any, where: str
                  ) -> tuple[dict[str, list[Any]], dict[str, dict[str, list[Any]]]]:
    """A suite's ``grid:`` section (suite-wide or of one ``per_env`` entry), read."""
    if section is None:
        return {}, {}
    return read_grid_section(section, where, list_algorithms())


def _only(mapping: Mapping[str, Any], key: str) -> dict[str, Any]:
    return {key: mapping[key]} if key in mapping else {}


def _given(settings: Mapping[str, Any], key: str) -> dict[str, Any]:
    """``key`` of a suite's settings when the suite gives it (the unset ones are None)."""
    return {key: settings[key]} if settings.get(key) is not None else {}


def _checked_axes(algo: str, family: str, env: str, layers: list[tuple[str, Mapping[str, Any]]],
                  axes: Sequence[Axis]) -> list[Axis]:
    """Each value of each hyperparameter axis checked as the recipe checks a single value
    (its type, its range), converted as a single value is, and listed once."""
    checked = []
    for axis in axes:
        values: dict[str, Any] = {}
        for value in axis.values:
            resolved = resolve_with_sources(
                algo, family, [*layers, (f"{axis.source} grid", {axis.field: value})], env=env)
            converted = resolved[axis.field][0]
            values.setdefault(repr(converted), converted)
        checked.append(replace(axis, values=tuple(values.values())))
    return checked


def _checked_budgets(axes: Sequence[Axis]) -> list[Axis]:
    """Each value of a budget axis checked as a single budget is, and listed once."""
    return [replace(axis, values=tuple(dict.fromkeys(
        _positive_int({axis.field: value}, axis.field) for value in axis.values)))
        for axis in axes]


def _point_layers(axes: Sequence[Axis], point: Mapping[str, Any]
                  ) -> list[tuple[str, dict[str, Any]]]:
    """A grid point as override layers, one per place that gave its axes."""
    layers: dict[str, dict[str, Any]] = {}
    for axis in axes:
        layers.setdefault(f"{axis.source} grid", {})[axis.field] = point[axis.field]
    return list(layers.items())


def _artifact_options(settings: dict[str, Any], algo: str, params: dict[str, Any]
                      ) -> dict[str, bool]:
    """``save_snapshots`` and ``save_transitions``, checked: transitions are kept as the
    agent saw them, so a run that normalises observations or rewards cannot keep them."""
    options = {}
    for option in _ARTIFACT_OPTIONS:
        value = settings.get(option, False)
        if not isinstance(value, bool):
            raise ConfigError(f"{option} must be true or false, got {quote(value)}")
        options[option] = value
    normalised = [key for key in ("normalize_observation", "normalize_reward") if params.get(key)]
    if options["save_transitions"] and normalised:
        raise ConfigError(f"save_transitions keeps transitions as the agent saw them, and "
                          f"{algo} normalises them here: add "
                          f"{' '.join(f'{algo}.{key}=false' for key in normalised)} or leave "
                          f"save_transitions out")
    return options


def _check_action_space(algo: str, env: str, kind: str, known_algos: Sequence[str]) -> None:
    """Refuse to plan ``algo`` on ``env`` when it does not take that kind of action space."""
    if kind in load_algorithm(algo).ACTION_SPACES:
        return
    algo_kind = load_algorithm(algo).KIND  # envs take online algorithms, datasets offline
    takers = [name for name, recipe in _loadable_recipes().items()
              if name in known_algos and kind in recipe.ACTION_SPACES
              and algo_kind == recipe.KIND]
    raise ConfigError(f"{algo} takes {' or '.join(load_algorithm(algo).ACTION_SPACES)} actions, "
                      f"and {env}'s are {kind}: leave one of them out (algorithms for {env}: "
                      f"{', '.join(takers) or 'none'})")


def _kinds(algos: Sequence[str]) -> dict[str, str]:
    return {algo: load_algorithm(algo).KIND for algo in algos}


def _tasks(base: dict[str, Any], overrides: Overrides, algos: Sequence[str]
           ) -> tuple[list[str], list[str]]:
    """The envs of the grid's online algorithms and the datasets of its offline ones;
    refuses an algorithm given only what it cannot learn from."""
    kinds = _kinds(algos)
    online = [a for a in algos if kinds[a] == "online"]
    offline = [a for a in algos if kinds[a] == "offline"]
    has_envs, has_datasets = bool(base.get("envs")), bool(base.get("datasets"))
    if offline and not has_datasets:
        raise ConfigError(f"{', '.join(offline)} learn{'s' if len(offline) == 1 else ''} from "
                          f"a dataset: give dataset=<d4rl:name|minari:id|path> (the dataset "
                          f"names the env it is evaluated in)")
    if online and not has_envs:
        raise ConfigError(f"{', '.join(online)} collect{'s' if len(online) == 1 else ''} its "
                          f"own data in an env: give env=<id> (datasets are for offline "
                          f"algorithms: {', '.join(_offline_algorithms()) or 'none'})")
    if not offline and "datasets" in overrides.settings:
        raise ConfigError(f"dataset= is not used by online algorithms ({', '.join(online)}); "
                          f"offline algorithms: {', '.join(_offline_algorithms()) or 'none'}")
    envs = _names(base, "envs") if online else []
    datasets = _names(base, "datasets") if offline else []
    return envs, datasets


def _check_vouched_envs(named: Sequence[str], planned: Mapping[str, PlannedDataset]) -> None:
    """``env=`` in an offline-only grid names the eval envs the user vouches for (a dataset
    naming a ``module:EnvId`` env is refused without it, see ``check_stored_env_id``): each
    must be one that a dataset names, never an env to run in instead."""
    evaluated = sorted({p.env for p in planned.values() if p.env})
    for env in named:
        if env not in evaluated:
            raise ConfigError(f"env={env}: offline algorithms are evaluated in the env their "
                              f"dataset names ({', '.join(evaluated) or 'none'}), and env= only "
                              f"vouches for one of those")


def _check_offline_settings(algo: str, settings: dict[str, Any], overrides: Overrides,
                            grid_has_online: bool) -> None:
    """Refuse what an offline run cannot use: a frame budget given for an offline-only grid,
    and ``save_transitions`` (it collects none)."""
    if ("frames" in overrides.settings or "frames" in overrides.budget_grids) and (
            not grid_has_online):
        raise ConfigError(f"frames= is not used by offline algorithms ({algo}): their budget "
                          "is gradient steps, steps=...")
    if settings.get("save_transitions"):
        raise ConfigError(f"save_transitions keeps the transitions a run collects, and {algo} "
                          "collects none: it learns from its dataset")


def _offline_algorithms() -> list[str]:
    return [name for name, recipe in _loadable_recipes().items() if recipe.KIND == "offline"]


def _slurm_settings(sweep: dict[str, Any], launcher: str, given: list[str]) -> SlurmSettings:
    """The ``slurm.*`` keys, checked; given with another launcher they are refused."""
    named = [key for key in given if key.startswith("slurm.")]
    if named and launcher != "slurm":
        raise ConfigError(f"{named[0]} is only used with launcher=slurm")
    time_limit_min = _positive_int(sweep, "slurm.time_limit_min")
    delay = _positive_int(sweep, "slurm.signal_delay_s", minimum=0)
    if delay >= time_limit_min * 60:
        raise ConfigError(f"slurm.signal_delay_s={delay} must be shorter than the time limit "
                          f"(slurm.time_limit_min={time_limit_min}, {time_limit_min * 60} s)")
    mem_gb = sweep["slurm.mem_gb"]
    if mem_gb is not None and (isinstance(mem_gb, bool) or not isinstance(mem_gb, int | float)
                               or not 0 < mem_gb <= 10**6):
        raise ConfigError(f"slurm.mem_gb must be a number of GiB above 0, got {quote(mem_gb)}")
    folder = sweep["slurm.folder"]
    return SlurmSettings(
        partition=sweep["slurm.partition"], account=sweep["slurm.account"],
        qos=sweep["slurm.qos"], time_limit_min=time_limit_min, mem_gb=mem_gb,
        max_running=_positive_int(sweep, "slurm.max_running"), signal_delay_s=delay,
        folder=None if folder is None else Path(folder).absolute())


@dataclass(frozen=True)
class _SweepOptions:
    """How a sweep runs, checked before anything of its grid is planned."""

    out_dir: Path
    dry_run: bool
    force_threads: bool
    launcher: str
    ray_address: str | None
    jobs: int
    checkpoint_every: int
    checkpoint_store: str
    reuse_code: bool
    slurm: SlurmSettings


def _sweep_options(given: dict[str, Any]) -> _SweepOptions:
    """The sweep keys of the command line over their defaults, checked."""
    sweep = {**SWEEP_KEYS, **given}
    for key in ("dry_run", "force_threads"):
        if not isinstance(sweep[key], bool):
            raise ConfigError(f"{key} must be true or false, got {quote(sweep[key])}")
    launcher = sweep["launcher"]
    if launcher not in LAUNCHERS:
        raise UnknownNameError("launcher", str(launcher), LAUNCHERS)
    address = sweep["ray.address"]
    if address is not None and launcher != "ray":
        raise ConfigError("ray.address is only used with launcher=ray")
    if launcher != "local" and "jobs" in given:
        raise ConfigError(f"jobs is for launcher=local; launcher={launcher} runs as many runs "
                          "at once as its cluster has CPUs for")
    checkpoint_store = sweep["checkpoint_store"]
    if checkpoint_store not in CHECKPOINT_STORES:
        raise UnknownNameError("checkpoint_store", str(checkpoint_store), CHECKPOINT_STORES)
    if checkpoint_store == "auto" and launcher == "slurm":
        checkpoint_store = "out_dir"  # Slurm's nodes share the out dir: no upload needed
    reuse = sweep["reuse"]
    if reuse is not None and reuse not in REUSE:
        raise UnknownNameError("reuse", str(reuse), REUSE)
    return _SweepOptions(
        out_dir=Path(str(sweep["out_dir"])), dry_run=sweep["dry_run"],
        force_threads=sweep["force_threads"], launcher=launcher,
        ray_address=None if address is None else str(address),
        jobs=_positive_int(sweep, "jobs"),
        checkpoint_every=_positive_int(sweep, "checkpoint_every"),
        checkpoint_store=checkpoint_store, reuse_code=reuse == "code",
        slurm=_slurm_settings(sweep, launcher, list(given)))


def _check_suite(suite: Suite, algos: Sequence[str], task_names: set[str]) -> None:
    """A suite's ``per_algo`` and ``per_env`` name known algorithms and tasks."""
    known_algos = list_algorithms()
    for algo in suite.per_algo:
        if algo not in known_algos:
            raise UnknownNameError(f"algorithm in per_algo of suite {suite.name}", algo,
                                   known_algos)
    for env, env_settings in suite.per_env.items():
        if env not in task_names and env not in list_envs():
            raise UnknownNameError(f"env in per_env of suite {suite.name}", env, list_envs())
        env_algos = env_settings.get("algos", algos)
        if not isinstance(env_algos, list) or not env_algos:
            raise ConfigError(f"suite {suite.name}: per_env {env}.algos must be a non-empty "
                              f"list of algorithms, got {quote(env_algos)}")
        for algo in env_algos:
            if algo not in known_algos:
                raise UnknownNameError(f"algorithm in per_env {env}.algos of suite "
                                       f"{suite.name}", algo, known_algos)


@dataclass(frozen=True)
class _Task:
    """What one algorithm runs on: an env, or a dataset evaluated in its env."""

    name: str  # as the suite or command line gives it: an env id or a dataset source
    env: str
    dataset: PlannedDataset | None = None

    @property
    def label(self) -> str:
        """The task's name in run names, ``per_env`` and the sources of hyperparameters."""
        return self.dataset.label if self.dataset else self.name

    def per_env(self, suite: Suite) -> dict[str, Any]:
        """The suite's ``per_env`` entry of this task, by its name or its label."""
        return dict(suite.per_env.get(self.name, suite.per_env.get(self.label, {})))

    def budget(self, settings: dict[str, Any]) -> dict[str, Any]:
        """The run's budget (and, offline, its dataset) as ``RunConfig`` fields."""
        if self.dataset is None:
            return {"frames": _positive_int(settings, "frames")}
        return {"frames": 0, "steps": _positive_int(settings, "steps"),
                "dataset": self.dataset.source, "dataset_label": self.dataset.label,
                "dataset_sha256": self.dataset.sha256, "dataset_refs": self.dataset.refs}


def resolve_sweep(args: Sequence[str], *, check_here: bool = True) -> SweepConfig:
    """Parse the command line and resolve every run of the grid; raises on any bad input.

    The sweep's own options are checked first, then the suite, then each algorithm's runs
    on each of its tasks: online algorithms run on each env, offline ones on each dataset
    (evaluated in the dataset's env). A dataset of rlbench's own that is made on first use
    and not made yet is planned with no sha256 (``SweepConfig.to_make``): ``rlbench run``
    makes it, then plans again. A local sweep's devices and threads must exist here
    (``check_devices_here``) unless ``check_here`` is false: a plan that only reads runs
    made elsewhere.
    """
    overrides = parse_overrides(args)
    options = _sweep_options(overrides.sweep)
    suite = load_suite(str(overrides.sweep.get("suite", SWEEP_KEYS["suite"])))
    notes: list[str] = []
    if "suite" not in overrides.sweep and LIST_KEYS & overrides.settings.keys():
        suite = replace(suite, name=ADHOC_SUITE)
        notes.append(f"no suite= given: these runs are stored as suite {ADHOC_SUITE} (compare "
                     f"suite={ADHOC_SUITE}), with suite {SWEEP_KEYS['suite']}'s settings "
                     "where the command line gives none")
    base = {**suite.settings, **overrides.settings}
    algos = _names(base, "algos")
    known_algos = list_algorithms()
    for algo in algos:
        if algo not in known_algos:
            load_algorithm(algo)  # raises, naming what the suite should say
    envs, datasets = _tasks(base, overrides, algos)
    named_envs = tuple(_names(base, "envs")) if base.get("envs") else ()
    planned = {source: plan_dataset(source, trusted_envs=named_envs) for source in datasets}
    if not envs and "envs" in overrides.settings:
        _check_vouched_envs(named_envs, planned)
    action_spaces = {}
    for env in [*envs, *{p.env for p in planned.values()}]:
        action_spaces[env] = action_space_kind(env)  # an env that cannot be made: refused
    task_names = {*envs, *datasets, *(p.label for p in planned.values())}
    # a suite's own datasets keep their settings when a filter (algo=ppo) leaves them out
    suite_datasets = _names(suite.settings, "datasets") if suite.settings.get("datasets") else []
    task_names |= {*suite_datasets, *map(dataset_label, suite_datasets)}
    _check_suite(suite, algos, task_names)
    kinds = _kinds(algos)
    suite_budget_grids, suite_algo_grids = _grid_section(suite.grid, f"suite {suite.name}: grid")
    tasks = {"online": [_Task(env, env) for env in envs],
             "offline": [_Task(source, p.env, p) for source, p in planned.items()]}
    runs: list[RunConfig] = []
    sources: dict[tuple[str, str], dict[str, str]] = {}
    for algo in algos:
        for task in tasks[kinds[algo]]:
            per_env = task.per_env(suite)
            if algo not in per_env.pop("algos", algos):
                continue  # the suite does not run this algorithm on this env
            _check_action_space(algo, task.env, action_spaces[task.env], known_algos)
            env_algo_params = per_env.pop(algo, {})
            if not isinstance(env_algo_params, dict):
                raise ConfigError(f"suite {suite.name}: per_env {task.name}.{algo} must be a "
                                  f"mapping of hyperparameters, got {quote(env_algo_params)}")
            env_budget_grids, env_algo_grids = _grid_section(
                per_env.pop("grid", None), f"suite {suite.name}: per_env {task.name}.grid")
            for other in list(per_env):
                if other in known_algos:
                    per_env.pop(other)
                elif other not in SUITE_SETTINGS:
                    raise UnknownNameError(f"per_env key for {task.name}", other,
                                           [*SUITE_SETTINGS, "grid", *known_algos])
            settings = {**base, **per_env, **overrides.settings}
            family = env_family(task.env)
            layers = [(f"suite {suite.name} per_algo", suite.per_algo.get(algo, {})),
                      (f"suite {suite.name} per_env", env_algo_params),
                      ("command line", overrides.algo_params.get(algo, {}))]
            param_axes = _checked_axes(algo, family, task.label, layers, grid_axes([
                GridLevel(f"suite {suite.name}", suite.per_algo.get(algo, {}),
                          suite_algo_grids.get(algo, {})),
                GridLevel(f"suite {suite.name} per_env {task.name}", env_algo_params,
                          env_algo_grids.get(algo, {})),
                GridLevel("command line", overrides.algo_params.get(algo, {}),
                          overrides.algo_grids.get(algo, {}))]))
            unit = "steps" if task.dataset else "frames"
            budget_axes = _checked_budgets(grid_axes([
                GridLevel(f"suite {suite.name}", _given(suite.settings, unit),
                          _only(suite_budget_grids, unit)),
                GridLevel(f"suite {suite.name} per_env {task.name}", _only(per_env, unit),
                          _only(env_budget_grids, unit)),
                GridLevel("command line", _only(overrides.settings, unit),
                          _only(overrides.budget_grids, unit))]))
            note = missing_defaults(algo, family, task.label)
            if note and note not in notes:
                notes.append(note)
            if task.dataset:
                _check_offline_settings(algo, settings, overrides,
                                        grid_has_online="online" in kinds.values())
            seeds = _positive_int(settings, "seeds")
            size = math.prod(len(axis.values) for axis in (*budget_axes, *param_axes))
            if len(runs) + seeds * size > MAX_RUNS:
                raise ConfigError(f"the grid has more than {MAX_RUNS:,} runs ({len(algos)} "
                                  f"algorithms × {len(envs) + len(datasets)} envs and datasets "
                                  f"× {seeds:,} seeds" + (f" × {size:,} grid points"
                                                          if size > 1 else "")
                                  + "): split it")
            points = [(budget_point, param_point) for budget_point in grid_points(budget_axes)
                      for param_point in grid_points(param_axes)]
            varied = {axis.field for axis in (*budget_axes, *param_axes)
                      if len(axis.values) > 1}
            for budget_point, param_point in points:
                resolved = resolve_with_sources(
                    algo, family, [*layers, *_point_layers(param_axes, param_point)],
                    env=task.label)
                params = {key: value for key, (value, _) in resolved.items()}
                sources.setdefault((algo, task.label),
                                   {key: source for key, (_, source) in resolved.items()})
                artifacts = _artifact_options(settings, algo, params)
                budget = task.budget({**settings, **budget_point})
                variant = variant_label({key: value for key, value in
                                         {**budget_point, **param_point}.items()
                                         if key in varied})
                for seed_index in range(seeds):
                    runs.append(RunConfig(
                        suite=suite.name,
                        algo=algo,
                        env=task.env,
                        env_family=family,
                        seed_index=seed_index,
                        base_seed=_positive_int(settings, "base_seed", minimum=0),
                        eval_every=_positive_int(settings, "eval_every"),
                        eval_episodes=_positive_int(settings, "eval_episodes"),
                        threads=_positive_int(settings, "threads"),
                        device=_check_device(settings["device"]),
                        algo_params=params,
                        code=code_fingerprint(algo),
                        recipe=recipe_sources()[algo].location,
                        variant=variant,
                        **budget,
                        **artifacts,
                    ))
    to_make = sorted({p.family for p in planned.values() if p.family is not None},
                     key=lambda f: f.env)
    notes += [f"{p.source} is not made yet: `rlbench run` makes it first (about "
              f"{p.family.minutes} min for its family)" for p in planned.values() if p.family]
    eval_envs = {name: p.env for p in planned.values() for name in (p.source, p.label)}
    unplanned = {*suite_datasets, *map(dataset_label, suite_datasets)} - eval_envs.keys()
    _check_unused_hyperparameters(suite, overrides, list(action_spaces), runs, eval_envs,
                                  unplanned, suite_algo_grids)
    if not runs:
        named = [f"envs {', '.join(envs)}"] if envs else []
        named += [f"datasets {', '.join(datasets)}"] if datasets else []
        raise ConfigError(f"suite {suite.name} runs none of algos {', '.join(algos)} on "
                          f"{' and '.join(named)}: its per_env algos lists say which "
                          f"algorithms each env takes")
    if options.checkpoint_every != CHECKPOINT_EVERY:
        runs = [replace(run, checkpoint_every=options.checkpoint_every) for run in runs]
    if options.checkpoint_store != "auto":
        runs = [replace(run, checkpoint_store=options.checkpoint_store) for run in runs]
    sweep = SweepConfig(suite=suite, out_dir=options.out_dir, dry_run=options.dry_run,
                        runs=runs, jobs=options.jobs, launcher=options.launcher,
                        force_threads=options.force_threads, reuse_code=options.reuse_code,
                        ray_address=options.ray_address, slurm=options.slurm,
                        sources=sources, notes=notes, to_make=to_make)
    if check_here and sweep.launcher == "local":  # Ray and Slurm workers have their own
        check_devices_here(sweep)
    return sweep
