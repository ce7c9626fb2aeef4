"""What a grid's algorithms run on: envs for the online ones, datasets (each evaluated in
the env it names) for the offline ones.

Each dataset is planned (``plan.datasets``) and each env made once to read its action
space, so a task that cannot be had is refused before any run is planned.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from rlbench.envs import action_space_kind
from rlbench.errors import ConfigError
from rlbench.harness.plan.algorithms import loadable_recipes
from rlbench.harness.plan.checks import bounded_int, check_suite, check_vouched_envs
from rlbench.harness.plan.datasets import (
    MadeFamily,
    PlannedDataset,
    dataset_label,
    plan_dataset,
)
from rlbench.harness.plan.suites import Suite

__all__ = ["Task", "Tasks", "listed_names", "plan_tasks"]


@dataclass(frozen=True)
class Task:
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
            return {"frames": bounded_int(settings, "frames")}
        return {"frames": 0, "steps": bounded_int(settings, "steps"),
                "dataset": self.dataset.source, "dataset_label": self.dataset.label,
                "dataset_sha256": self.dataset.sha256, "dataset_refs": self.dataset.refs}


@dataclass(frozen=True)
class Tasks:
    """A grid's tasks, and the datasets of its suite that a filter may have left out."""

    envs: list[str]
    datasets: list[str]
    planned: dict[str, PlannedDataset]  # by source
    action_spaces: dict[str, str]  # by env, the planned datasets' eval envs included
    suite_datasets: list[str]  # the suite's own, planned or left out by a filter
    by_kind: dict[str, list[Task]]  # online, offline

    def eval_envs(self) -> dict[str, str]:
        """Each planned dataset's eval env, by its source and by its name."""
        return {name: p.env for p in self.planned.values() for name in (p.source, p.label)}

    def unplanned_suite_datasets(self) -> set[str]:
        """The suite's datasets (sources and names) a filter (``algo=ppo``) left out."""
        named = {*self.suite_datasets, *map(dataset_label, self.suite_datasets)}
        return named - self.eval_envs().keys()

    def to_make(self) -> list[MadeFamily]:
        """The families of rlbench's own datasets that are planned and not made yet."""
        return sorted({p.family for p in self.planned.values() if p.family is not None},
                      key=lambda f: f.env)


def plan_tasks(suite: Suite, settings: Mapping[str, Any], command_line: Mapping[str, Any],
               algos: Sequence[str], kinds: Mapping[str, str]) -> Tasks:
    """The envs and datasets ``settings`` (the suite's, ``command_line``'s over them) name
    for ``algos`` (of ``kinds``: online or offline), each dataset planned and each env's
    action space read; the suite's ``per_algo`` and ``per_env`` are checked against them."""
    envs, datasets = _task_names(settings, command_line, algos, kinds)
    named_envs = tuple(listed_names(settings, "envs")) if settings.get("envs") else ()
    planned = {source: plan_dataset(source, trusted_envs=named_envs) for source in datasets}
    if not envs and "envs" in command_line:
        check_vouched_envs(named_envs, planned)
    action_spaces = {}
    for env in [*envs, *{p.env for p in planned.values()}]:
        action_spaces[env] = action_space_kind(env)  # an env that cannot be made: refused
    task_names = {*envs, *datasets, *(p.label for p in planned.values())}
    # a suite's own datasets keep their settings when a filter (algo=ppo) leaves them out
    suite_datasets = (listed_names(suite.settings, "datasets")
                      if suite.settings.get("datasets") else [])
    task_names |= {*suite_datasets, *map(dataset_label, suite_datasets)}
    check_suite(suite, algos, task_names)
    by_kind = {"online": [Task(env, env) for env in envs],
               "offline": [Task(source, p.env, p) for source, p in planned.items()]}
    return Tasks(envs, datasets, planned, action_spaces, suite_datasets, by_kind)


def listed_names(settings: Mapping[str, Any], key: str) -> list[str]:
    """The names of ``key``, in order, each once (a repeated name would run twice)."""
    value = settings.get(key)
    if isinstance(value, str):
        value = [value]
    if not value:
        raise ConfigError(f"{key} is empty: give it in the suite or as {key}=a,b")
    return list(dict.fromkeys(value))


def _task_names(settings: Mapping[str, Any], command_line: Mapping[str, Any],
                algos: Sequence[str], kinds: Mapping[str, str]) -> tuple[list[str], list[str]]:
    """The envs of the grid's online algorithms and the datasets of its offline ones;
    refuses an algorithm given only what it cannot learn from."""
    online = [a for a in algos if kinds[a] == "online"]
    offline = [a for a in algos if kinds[a] == "offline"]
    has_envs, has_datasets = bool(settings.get("envs")), bool(settings.get("datasets"))
    if offline and not has_datasets:
        raise ConfigError(f"{', '.join(offline)} learn{'s' if len(offline) == 1 else ''} from "
                          f"a dataset: give dataset=<d4rl:name|minari:id|path> (the dataset "
                          f"names the env it is evaluated in)")
    if online and not has_envs:
        raise ConfigError(f"{', '.join(online)} collect{'s' if len(online) == 1 else ''} its "
                          f"own data in an env: give env=<id> (datasets are for offline "
                          f"algorithms: {', '.join(_offline_algorithms()) or 'none'})")
    if not offline and "datasets" in command_line:
        raise ConfigError(f"dataset= is not used by online algorithms ({', '.join(online)}); "
                          f"offline algorithms: {', '.join(_offline_algorithms()) or 'none'}")
    envs = listed_names(settings, "envs") if online else []
    datasets = listed_names(settings, "datasets") if offline else []
    return envs, datasets


def _offline_algorithms() -> list[str]:
    return [name for name, recipe in loadable_recipes().items() if recipe.KIND == "offline"]
