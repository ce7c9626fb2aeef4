"""Which recipes run several seeds of one config in one process (``seeds_per_process``),
and how a sweep's runs are grouped into those batches.

Each seed of a batch computes the numbers of its run made alone, bit for bit (each trainer
is tested for it: ``tests/algorithms/test_{ppo,a2c,dqn}_seeds.py``), so
``seeds_per_process`` is how runs execute, as ``jobs`` is, and part of no run's identity.
A config a trainer cannot run that way is refused when planning, with its reason.
"""

from __future__ import annotations

import importlib
import json
import types
from dataclasses import replace

from rlbench.errors import ConfigError
from rlbench.harness.plan.algorithms import load_algorithm
from rlbench.harness.plan.run_config import RunConfig

__all__ = ["SEED_TRAINERS", "check_seed_batches", "seed_batches", "seed_trainer"]

# recipe: the module whose ``train_seeds(specs, loggers)`` trains several of its seeds at
# once and whose ``check_seeds_config(config)`` says what it cannot
SEED_TRAINERS = {"ppo": "rlbench.algorithms._ppo_seeds", "a2c": "rlbench.algorithms._a2c_seeds",
                 "dqn": "rlbench.algorithms._dqn_seeds"}


def seed_trainer(algo: str) -> types.ModuleType:
    """The module that trains several seeds of ``algo`` in one process."""
    return importlib.import_module(SEED_TRAINERS[algo])


def check_seed_batches(runs: list[RunConfig], seeds_per_process: int) -> int:
    """``seeds_per_process``, once every run of the sweep can be batched: a ``ConfigError``
    names the first recipe or config that cannot, and why."""
    if seeds_per_process == 1:
        return 1
    prefix = f"seeds_per_process={seeds_per_process}"
    for run in runs:
        if run.algo not in SEED_TRAINERS or run.recipe:
            raise ConfigError(f"{prefix}: {run.algo} runs one seed a process; the recipes that "
                              f"run several: {', '.join(SEED_TRAINERS)}")
        if run.device != "cpu":
            raise ConfigError(f"{prefix}: several seeds run in one process on CPU; on "
                              f"{run.device} their numbers are not yet checked against runs "
                              "made alone: leave seeds_per_process out, or set device=cpu")
    checked: set[tuple[str, str]] = set()
    for run in runs:
        key = (run.algo, json.dumps(run.algo_params, sort_keys=True, default=list))
        if key in checked:
            continue
        checked.add(key)
        config = load_algorithm(run.algo).Config(**run.algo_params)
        try:
            seed_trainer(run.algo).check_seeds_config(config)
        except ValueError as err:
            raise ConfigError(f"{prefix}: {run.entry} on {run.task}: {err}") from None
    return seeds_per_process


def seed_batches(runs: list[RunConfig], seeds_per_process: int) -> list[list[RunConfig]]:
    """``runs`` in batches of at most ``seeds_per_process`` seeds of one config, each in
    the order of its seeds, the batches in the order of their first run."""
    groups: dict[str, list[RunConfig]] = {}
    for run in runs:
        groups.setdefault(replace(run, seed_index=0).identity, []).append(run)
    return [group[start:start + seeds_per_process] for group in groups.values()
            for start in range(0, len(group), seeds_per_process)]
