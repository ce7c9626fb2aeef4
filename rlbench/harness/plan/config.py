"""Resolving a sweep's command line into every run of its grid, checked whole.

Precedence, lowest first: harness defaults < suite settings < suite ``per_env`` settings <
command line. A suite's ``per_env[env].algos`` restricts the algorithms run on that env
(e.g. DQN only where actions are discrete), whatever ``algos`` the command line names.
Hyperparameters: recipe defaults < recipe family defaults < suite ``per_algo`` < suite
``per_env[env][algo]`` < command line ``<algo>.<field>=value``.

Resolution goes in stages, each refusing what it can before the next starts: the sweep's
own options (``plan.sweep_options``), the suite and its algorithms, the tasks (envs and
datasets), each algorithm's grid on each of its tasks, and last the grid as a whole.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any

from rlbench.envs import env_family
from rlbench.errors import ConfigError, UnknownNameError, quote
from rlbench.harness.plan.algorithms import (
    list_algorithms,
    load_algorithm,
    missing_defaults,
    resolve_with_sources,
)
from rlbench.harness.plan.budgets import rounded_budget_notes
from rlbench.harness.plan.checks import (
    MAX_RUNS,
    artifact_options,
    bounded_int,
    check_action_space,
    check_devices_here,
    check_offline_settings,
    check_unused_hyperparameters,
    checked_budget_axes,
    checked_device,
    checked_param_axes,
)
from rlbench.harness.plan.command_keys import CHECKPOINT_EVERY, RUN_TABLE
from rlbench.harness.plan.env_versions import older_version_notes
from rlbench.harness.plan.fingerprint import code_fingerprint
from rlbench.harness.plan.grid import (
    Axis,
    GridLevel,
    grid_axes,
    grid_points,
    read_suite_grid,
    variant_label,
)
from rlbench.harness.plan.numerics_mode import (
    checked_numerics,
    sweep_numerics,
    without_host_code,
)
from rlbench.harness.plan.overrides import SWEEP_KEYS, Overrides, parse_overrides
from rlbench.harness.plan.recipe_sources import recipe_sources
from rlbench.harness.plan.run_config import RunConfig, SweepConfig
from rlbench.harness.plan.seed_batches import check_seed_batches
from rlbench.harness.plan.suites import SUITE_SETTINGS, Suite, load_suite
from rlbench.harness.plan.sweep_options import SweepOptions, sweep_options
from rlbench.harness.plan.tasks import Task, Tasks, listed_names, plan_tasks

__all__ = ["ADHOC_SUITE", "resolve_sweep"]

LIST_KEYS = {key.name for key in RUN_TABLE if key.many}
# A grid the command line makes (algo=, env= or dataset= without suite=) is stored under
# this suite name, not under the name of the suite whose settings it takes
ADHOC_SUITE = "adhoc"


@dataclass
class _Sweep:
    """What every task's runs are planned from: the command line over its suite."""

    overrides: Overrides
    suite: Suite
    settings: dict[str, Any]  # the suite's settings, the command line's over them
    algos: list[str]
    known_algos: list[str]
    kinds: dict[str, str]  # each algorithm's kind: online or offline
    notes: list[str]  # what the plan should say, added to as each stage finds it


@dataclass(frozen=True)
class _SuiteGrid:
    """The suite-wide ``grid:`` section: budget axes and per-algorithm hyperparameter axes."""

    budgets: dict[str, list[Any]]
    algo_params: dict[str, dict[str, list[Any]]]


@dataclass(frozen=True)
class _TaskEntry:
    """An algorithm on a task the suite runs it on, with the task's ``per_env`` entry read."""

    algo: str
    task: Task
    settings: dict[str, Any]  # the suite settings the entry sets for this task
    algo_params: dict[str, Any]  # this algorithm's hyperparameters on this task
    budget_grids: dict[str, list[Any]]
    algo_grids: dict[str, list[Any]]  # this algorithm's hyperparameter axes on this task


@dataclass(frozen=True)
class _TaskGrid:
    """One algorithm's grid on one task, its axes checked: what each point resolves from."""

    algo: str
    task: Task
    family: str
    settings: dict[str, Any]  # the harness settings of its runs
    layers: list[tuple[str, Mapping[str, Any]]]  # hyperparameters, least specific first
    budget_axes: list[Axis]
    param_axes: list[Axis]
    seeds: int


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
    options = sweep_options(overrides.sweep)
    sweep = _sweep_of(overrides)
    tasks = plan_tasks(sweep.suite, sweep.settings, overrides.settings, sweep.algos,
                       sweep.kinds)
    suite_grid = _SuiteGrid(*read_suite_grid(sweep.suite.grid, f"suite {sweep.suite.name}: grid"))
    runs, sources = _runs_of(sweep, tasks, suite_grid)
    sweep_numerics(runs)
    runs, portable_notes = without_host_code(runs)
    sweep.notes.extend(portable_notes)
    sweep.notes.extend(older_version_notes(run.env for run in runs if not run.offline))
    sweep.notes.extend(rounded_budget_notes(runs))
    sweep.notes.extend(f"{p.source} is not made yet: `rlbench run` makes it first (about "
                       f"{p.family.minutes} min for its family)"
                       for p in tasks.planned.values() if p.family)
    _check_whole_grid(sweep, tasks, suite_grid, runs)
    resolved = SweepConfig(
        suite=sweep.suite, out_dir=options.out_dir, dry_run=options.dry_run,
        runs=_with_checkpoint_options(runs, options), jobs=options.jobs,
        seeds_per_process=check_seed_batches(runs, options.seeds_per_process),
        launcher=options.launcher, force_threads=options.force_threads,
        reuse_code=options.reuse_code, ray_address=options.ray_address, slurm=options.slurm,
        sources=sources, notes=sweep.notes, to_make=tasks.to_make())
    if check_here and resolved.launcher == "local":  # Ray and Slurm workers have their own
        check_devices_here(resolved)
    return resolved


def _sweep_of(overrides: Overrides) -> _Sweep:
    """The suite the command line names (``adhoc`` for a grid the command line makes), its
    settings under the command line's, and the algorithms they name, each known."""
    suite = load_suite(str(overrides.sweep.get("suite", SWEEP_KEYS["suite"])))
    notes: list[str] = []
    if "suite" not in overrides.sweep and LIST_KEYS & overrides.settings.keys():
        # a grid of one's own keeps the default numerics: smoke's are for its own runs
        suite = replace(suite, name=ADHOC_SUITE,
                        settings={**suite.settings, "numerics": SUITE_SETTINGS["numerics"]})
        notes.append(f"no suite= given: these runs are stored as suite {ADHOC_SUITE} (compare "
                     f"suite={ADHOC_SUITE}), with suite {SWEEP_KEYS['suite']}'s settings "
                     "where the command line gives none, numerics aside (native unless "
                     "given)")
    settings = {**suite.settings, **overrides.settings}
    algos = listed_names(settings, "algos")
    known_algos = list_algorithms()
    for algo in algos:
        if algo not in known_algos:
            load_algorithm(algo)  # raises, naming what the suite should say
    kinds = {algo: load_algorithm(algo).KIND for algo in algos}
    return _Sweep(overrides, suite, settings, algos, known_algos, kinds, notes)


def _runs_of(sweep: _Sweep, tasks: Tasks, suite_grid: _SuiteGrid
             ) -> tuple[list[RunConfig], dict[tuple[str, str], dict[str, str]]]:
    """Every run of each algorithm on each of its tasks, and per (algorithm, task) the layer
    each hyperparameter came from."""
    runs: list[RunConfig] = []
    sources: dict[tuple[str, str], dict[str, str]] = {}
    for algo in sweep.algos:
        for task in tasks.by_kind[sweep.kinds[algo]]:
            entry = _task_entry(sweep, algo, task, tasks.action_spaces[task.env])
            if entry is None:
                continue  # the suite does not run this algorithm on this env
            task_grid = _task_grid(sweep, suite_grid, entry)
            _check_grid_size(sweep, tasks, len(runs), task_grid)
            task_runs, task_sources = _grid_runs(sweep.suite.name, task_grid)
            runs += task_runs
            sources.setdefault((algo, task.label), task_sources)
    return runs, sources


def _task_entry(sweep: _Sweep, algo: str, task: Task, action_space: str) -> _TaskEntry | None:
    """``algo`` on ``task`` with the task's ``per_env`` entry read, or None where the entry
    does not run ``algo``; an algorithm that does not take the task's actions is refused."""
    suite = sweep.suite
    per_env = task.per_env(suite)
    if algo not in per_env.pop("algos", sweep.algos):
        return None
    check_action_space(algo, task.env, action_space, sweep.known_algos)
    algo_params = per_env.pop(algo, {})
    if not isinstance(algo_params, dict):
        raise ConfigError(f"suite {suite.name}: per_env {task.name}.{algo} must be a "
                          f"mapping of hyperparameters, got {quote(algo_params)}")
    budget_grids, algo_grids = read_suite_grid(
        per_env.pop("grid", None), f"suite {suite.name}: per_env {task.name}.grid")
    for other in list(per_env):
        if other in sweep.known_algos:
            per_env.pop(other)
        elif other not in SUITE_SETTINGS:
            raise UnknownNameError(f"per_env key for {task.name}", other,
                                   [*SUITE_SETTINGS, "grid", *sweep.known_algos])
    return _TaskEntry(algo, task, per_env, algo_params, budget_grids, algo_grids.get(algo, {}))


def _task_grid(sweep: _Sweep, suite_grid: _SuiteGrid, entry: _TaskEntry) -> _TaskGrid:
    """The grid of ``entry``'s algorithm on its task: its settings, hyperparameter layers
    and axes (each value checked) and seeds; what the task lacks is noted."""
    algo, task, suite, overrides = entry.algo, entry.task, sweep.suite, sweep.overrides
    settings = {**sweep.settings, **entry.settings, **overrides.settings}
    family = env_family(task.env)
    layers = [(f"suite {suite.name} per_algo", suite.per_algo.get(algo, {})),
              (f"suite {suite.name} per_env", entry.algo_params),
              ("command line", overrides.algo_params.get(algo, {}))]
    param_axes = checked_param_axes(algo, family, task.label, layers, grid_axes([
        GridLevel(f"suite {suite.name}", suite.per_algo.get(algo, {}),
                  suite_grid.algo_params.get(algo, {})),
        GridLevel(f"suite {suite.name} per_env {task.name}", entry.algo_params,
                  entry.algo_grids),
        GridLevel("command line", overrides.algo_params.get(algo, {}),
                  overrides.algo_grids.get(algo, {}))]))
    budget_axes = checked_budget_axes(_budget_axes(sweep, suite_grid, entry))
    note = missing_defaults(algo, family, task.label)
    if note and note not in sweep.notes:
        sweep.notes.append(note)
    if task.dataset:
        check_offline_settings(algo, settings, overrides,
                               grid_has_online="online" in sweep.kinds.values())
    return _TaskGrid(algo, task, family, settings, layers, budget_axes, param_axes,
                     seeds=bounded_int(settings, "seeds"))


def _budget_axes(sweep: _Sweep, suite_grid: _SuiteGrid, entry: _TaskEntry) -> list[Axis]:
    """The budget axes (frames online, steps offline) of ``entry``'s task: the suite's,
    its ``per_env`` entry's and the command line's, the most specific winning."""
    unit = "steps" if entry.task.dataset else "frames"
    suite, overrides = sweep.suite, sweep.overrides
    return grid_axes([
        GridLevel(f"suite {suite.name}", _budget_set_by_suite(suite.settings, unit),
                  _budget_entry(suite_grid.budgets, unit)),
        GridLevel(f"suite {suite.name} per_env {entry.task.name}",
                  _budget_entry(entry.settings, unit), _budget_entry(entry.budget_grids, unit)),
        GridLevel("command line", _budget_entry(overrides.settings, unit),
                  _budget_entry(overrides.budget_grids, unit))])


def _check_grid_size(sweep: _Sweep, tasks: Tasks, planned: int, task_grid: _TaskGrid) -> None:
    """Refuse a grid that would exceed ``MAX_RUNS`` with this task's runs (``planned``: the
    runs of the tasks before it)."""
    axes = (*task_grid.budget_axes, *task_grid.param_axes)
    size = math.prod(len(axis.values) for axis in axes)
    seeds = task_grid.seeds
    if planned + seeds * size > MAX_RUNS:
        raise ConfigError(f"the grid has more than {MAX_RUNS:,} runs ({len(sweep.algos)} "
                          f"algorithms × {len(tasks.envs) + len(tasks.datasets)} envs and "
                          f"datasets × {seeds:,} seeds" + (f" × {size:,} grid points"
                                                           if size > 1 else "")
                          + "): split it")


def _grid_runs(suite: str, task_grid: _TaskGrid
               ) -> tuple[list[RunConfig], dict[str, str]]:
    """The runs of each point of ``task_grid``, each seed, and the layer each hyperparameter
    of its first point came from."""
    budget_axes, param_axes = task_grid.budget_axes, task_grid.param_axes
    points = [(budget_point, param_point) for budget_point in grid_points(budget_axes)
              for param_point in grid_points(param_axes)]
    varied = {axis.field for axis in (*budget_axes, *param_axes) if len(axis.values) > 1}
    runs: list[RunConfig] = []
    sources: dict[str, str] = {}
    for index, (budget_point, param_point) in enumerate(points):
        resolved = resolve_with_sources(
            task_grid.algo, task_grid.family,
            [*task_grid.layers, *_grid_point_layers(param_axes, param_point)],
            env=task_grid.task.label)
        params = {key: value for key, (value, _) in resolved.items()}
        if index == 0:
            sources = {key: source for key, (_, source) in resolved.items()}
        artifacts = artifact_options(task_grid.settings, task_grid.algo, params)
        budget = task_grid.task.budget({**task_grid.settings, **budget_point})
        variant = variant_label({key: value for key, value in
                                 {**budget_point, **param_point}.items() if key in varied})
        runs += _seed_runs(suite, task_grid, params, variant, {**budget, **artifacts})
    return runs, sources


def _seed_runs(suite: str, task_grid: _TaskGrid, params: dict[str, Any], variant: str,
               fields: dict[str, Any]) -> list[RunConfig]:
    """One grid point's run of each seed; ``fields``: its budget and artifact options.
    What the seeds share is resolved once (a grid may hold 100,000 seeds)."""
    algo, settings = task_grid.algo, task_grid.settings
    shared = {
        "suite": suite, "algo": algo, "env": task_grid.task.env,
        "env_family": task_grid.family,
        "base_seed": bounded_int(settings, "base_seed", minimum=0),
        "eval_every": bounded_int(settings, "eval_every"),
        "eval_episodes": bounded_int(settings, "eval_episodes"),
        "threads": bounded_int(settings, "threads"),
        "device": checked_device(settings["device"]),
        "numerics": checked_numerics(settings["numerics"]),
        "algo_params": params, "code": code_fingerprint(algo),
        "recipe": recipe_sources()[algo].location, "variant": variant, **fields,
    }
    return [RunConfig(seed_index=seed_index, **shared) for seed_index in range(task_grid.seeds)]


def _grid_point_layers(axes: Sequence[Axis], point: Mapping[str, Any]
                       ) -> list[tuple[str, dict[str, Any]]]:
    """A grid point as override layers, one per place that gave its axes."""
    layers: dict[str, dict[str, Any]] = {}
    for axis in axes:
        layers.setdefault(f"{axis.source} grid", {})[axis.field] = point[axis.field]
    return list(layers.items())


def _check_whole_grid(sweep: _Sweep, tasks: Tasks, suite_grid: _SuiteGrid,
                      runs: list[RunConfig]) -> None:
    """Refuse a grid with no runs, and any hyperparameter given where nothing runs that the
    recipe would refuse."""
    check_unused_hyperparameters(sweep.suite, sweep.overrides, list(tasks.action_spaces), runs,
                                 tasks.eval_envs(), tasks.unplanned_suite_datasets(),
                                 suite_grid.algo_params)
    if not runs:
        named = [f"envs {', '.join(tasks.envs)}"] if tasks.envs else []
        named += [f"datasets {', '.join(tasks.datasets)}"] if tasks.datasets else []
        raise ConfigError(f"suite {sweep.suite.name} runs none of algos "
                          f"{', '.join(sweep.algos)} on {' and '.join(named)}: its per_env "
                          f"algos lists say which algorithms each env takes")


def _with_checkpoint_options(runs: list[RunConfig], options: SweepOptions) -> list[RunConfig]:
    """``runs`` with the sweep's checkpoint and trace options where they are not the
    defaults."""
    if options.checkpoint_every != CHECKPOINT_EVERY:
        runs = [replace(run, checkpoint_every=options.checkpoint_every) for run in runs]
    if options.checkpoint_store != "auto":
        runs = [replace(run, checkpoint_store=options.checkpoint_store) for run in runs]
    if options.resume_numerics != "same":
        runs = [replace(run, resume_numerics=options.resume_numerics) for run in runs]
    if options.trace_every:
        runs = [replace(run, trace_every=options.trace_every) for run in runs]
    return runs


def _budget_entry(mapping: Mapping[str, Any], unit: str) -> dict[str, Any]:
    """The budget ``unit`` (frames or steps) of ``mapping``, where it has one."""
    return {unit: mapping[unit]} if unit in mapping else {}


def _budget_set_by_suite(settings: Mapping[str, Any], unit: str) -> dict[str, Any]:
    """The budget ``unit`` of a suite's settings where the suite sets it (an unset setting
    is None there)."""
    return {unit: settings[unit]} if settings.get(unit) is not None else {}


# RunConfig's home is plan.run_config. harness.run.training still imports it from here: its
# import statements are part of every run's code fingerprint, so changing that line would
# renew every run identity; Slurm jobs pickle RunConfig under this module's name too.
__all__ += ["RunConfig"]
