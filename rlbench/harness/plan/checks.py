"""The checks of a sweep as it is planned: sizes and devices, a suite's names, what each
algorithm takes, and every hyperparameter given, run or not.

A sweep is refused whole, before anything runs: a typo must not wait for the day its
algorithm runs, nor a device for the day a run starts.
"""

from __future__ import annotations

import os
import re
from collections.abc import Collection, Mapping, Sequence
from dataclasses import replace
from typing import Any

import torch

from rlbench.envs import env_family, list_envs
from rlbench.errors import ConfigError, UnknownNameError, quote
from rlbench.harness.plan.algorithms import (
    list_algorithms,
    load_algorithm,
    loadable_recipes,
    resolve_algo_config,
    resolve_with_sources,
)
from rlbench.harness.plan.command_keys import RUN_TABLE
from rlbench.harness.plan.datasets import PlannedDataset
from rlbench.harness.plan.grid import Axis, read_suite_grid
from rlbench.harness.plan.overrides import Overrides
from rlbench.harness.plan.run_config import ARTIFACT_OPTIONS, RunConfig, SweepConfig
from rlbench.harness.plan.suites import Suite

__all__ = ["DEVICE_PATTERN", "LIMITS", "MAX_RUNS", "artifact_options", "bounded_int",
           "check_action_space", "check_device_here", "check_devices_here",
           "check_offline_settings", "check_suite", "check_unused_hyperparameters",
           "check_vouched_envs", "checked_budget_axes", "checked_device", "checked_param_axes"]

# Upper bounds on sizes, far past any real sweep but small enough that no counter, index or
# progress bar overflows and that a typo (frames=1e30, seeds=1e20) fails at once.
# eval_episodes: one env per episode is built at each evaluation (``rlbench eval``'s cap);
# runs: a grid plans 10^5 runs in about a second and 0.5 GB, and ``show`` lists a few
LIMITS = {key.name: int(key.high) for key in RUN_TABLE if key.high is not None}
MAX_RUNS = 10**5  # runs in one grid
DEVICE_PATTERN = re.compile(r"(cpu|mps)(:0)?|cuda(:\d+)?")


def _readable_size(value: int) -> str:
    return f"{value:,}" if value < 10**15 else f"{value:.3g}"


def bounded_int(settings: Mapping[str, Any], key: str, minimum: int = 1) -> int:
    """``settings[key]`` as an integer in ``[minimum, LIMITS[key]]``."""
    value = settings.get(key)
    if value is None:
        raise ConfigError(f"{key} is not set: give it in the suite or as {key}=...")
    if isinstance(value, float) and value.is_integer():
        value = int(value)
    if not isinstance(value, int) or isinstance(value, bool) or value < minimum:
        raise ConfigError(f"{key} must be an integer >= {minimum}, got {quote(value)}")
    if value > LIMITS[key]:
        raise ConfigError(f"{key}={_readable_size(value)} is beyond what rlbench runs (at "
                          f"most {LIMITS[key]:,})")
    return value


def checked_device(device: Any) -> str:
    """``device`` if it is a device name rlbench runs on, wherever it exists."""
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
    checked_device(device)
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


def check_suite(suite: Suite, algos: Sequence[str], task_names: set[str]) -> None:
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


def check_action_space(algo: str, env: str, kind: str, known_algos: Sequence[str]) -> None:
    """Refuse to plan ``algo`` on ``env`` when it does not take that kind of action space."""
    if kind in load_algorithm(algo).ACTION_SPACES:
        return
    algo_kind = load_algorithm(algo).KIND  # envs take online algorithms, datasets offline
    takers = [name for name, recipe in loadable_recipes().items()
              if name in known_algos and kind in recipe.ACTION_SPACES
              and algo_kind == recipe.KIND]
    raise ConfigError(f"{algo} takes {' or '.join(load_algorithm(algo).ACTION_SPACES)} actions, "
                      f"and {env}'s are {kind}: leave one of them out (algorithms for {env}: "
                      f"{', '.join(takers) or 'none'})")


def check_vouched_envs(named: Sequence[str], planned: Mapping[str, PlannedDataset]) -> None:
    """``env=`` in an offline-only grid names the eval envs the user vouches for (a dataset
    naming a ``module:EnvId`` env is refused without it, see ``check_stored_env_id``): each
    must be one that a dataset names, never an env to run in instead."""
    evaluated = sorted({p.env for p in planned.values() if p.env})
    for env in named:
        if env not in evaluated:
            raise ConfigError(f"env={env}: offline algorithms are evaluated in the env their "
                              f"dataset names ({', '.join(evaluated) or 'none'}), and env= only "
                              f"vouches for one of those")


def check_offline_settings(algo: str, settings: dict[str, Any], overrides: Overrides,
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


def artifact_options(settings: dict[str, Any], algo: str, params: dict[str, Any]
                     ) -> dict[str, bool]:
    """``save_snapshots`` and ``save_transitions``, checked: transitions are kept as the
    agent saw them, so a run that normalises observations or rewards cannot keep them."""
    options = {}
    for option in ARTIFACT_OPTIONS:
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


def checked_param_axes(algo: str, family: str, env: str,
                       layers: list[tuple[str, Mapping[str, Any]]],
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


def checked_budget_axes(axes: Sequence[Axis]) -> list[Axis]:
    """Each value of a budget axis checked as a single budget is, and listed once."""
    return [replace(axis, values=tuple(dict.fromkeys(
        bounded_int({axis.field: value}, axis.field) for value in axis.values)))
        for axis in axes]


def check_unused_hyperparameters(suite: Suite, overrides: Overrides, envs: list[str],
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
    _check_unrun_algorithm_params(suite, overrides, envs, ran, suite_grids)
    for env, env_settings in suite.per_env.items():
        _, env_grids = read_suite_grid(env_settings.get("grid"),
                                       f"suite {suite.name}: per_env {env}.grid")
        if env in eval_envs:
            family = env_family(eval_envs[env])
        elif env in unplanned_datasets:
            continue  # left out by a filter (algo=ppo): its eval env is not known unread
        else:
            family = env_family(env)
        _check_unrun_per_env_params(suite, env, family, env_settings, env_grids, ran)


def _check_unrun_algorithm_params(suite: Suite, overrides: Overrides, envs: list[str],
                                  ran: set[tuple[str, str | None]],
                                  suite_grids: Mapping[str, Mapping[str, list[Any]]]) -> None:
    """The command line's and the suite-wide hyperparameters (and grids) of each
    algorithm, resolved on each env it does not run on."""
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


def _check_unrun_per_env_params(suite: Suite, env: str, family: str,
                                env_settings: Mapping[str, Any],
                                env_grids: Mapping[str, Mapping[str, list[Any]]],
                                ran: set[tuple[str, str | None]]) -> None:
    """One ``per_env`` entry's hyperparameters (and grids) of each algorithm that does not
    run on its env, resolved there."""
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
