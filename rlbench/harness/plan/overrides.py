"""The ``key=value`` words of a sweep's command line, parsed: the sweep's own options, the
settings that override a suite's, and per-algorithm hyperparameters (``ppo.lr=...``).

An unknown key is refused with the keys nearest to it, a recipe's hyperparameter with that
recipe's own fields (a synonym first: ``lr`` finds ``learning_rate``).
"""

from __future__ import annotations

import typing
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from rlbench.errors import ConfigError, UnknownNameError, near_matches
from rlbench.harness.plan.algorithms import list_algorithms, load_algorithm, loadable_recipes
from rlbench.harness.plan.command_keys import RUN_TABLE
from rlbench.harness.plan.grid import BUDGET_AXES, split_values
from rlbench.harness.plan.keys import scalar_word, split_words
from rlbench.harness.plan.recipe_sources import name_recipe
from rlbench.harness.plan.suites import SUITE_SETTINGS

__all__ = ["ALIASES", "SWEEP_KEYS", "Overrides", "field_suggestions", "parse_overrides",
           "valid_keys"]

# The keys of how a sweep runs (not settings a suite gives), with their defaults
SWEEP_KEYS = {key.name: key.default for key in RUN_TABLE
              if key.name not in SUITE_SETTINGS and not key.family}
ALIASES = RUN_TABLE.aliases

# Names of one meaning in different recipes and libraries: a typo of one finds the others.
_SYNONYMS = ({"learning_rate", "lr"}, {"gamma", "discount"}, {"hidden_sizes", "net_arch"},
             {"num_envs", "n_envs"}, {"rollout_steps", "n_steps"}, {"epochs", "n_epochs"},
             {"entropy_coef", "ent_coef"}, {"critic_coef", "vf_coef"},
             {"gae_lambda", "lmbda"})


@dataclass
class Overrides:
    """Parsed ``key=value`` arguments: harness settings and per-algorithm hyperparameters,
    and the settings given a comma list of values (``plan.grid``)."""

    sweep: dict[str, Any]
    settings: dict[str, Any]
    algo_params: dict[str, dict[str, Any]]
    algo_grids: dict[str, dict[str, list[Any]]] = field(default_factory=dict)
    budget_grids: dict[str, list[Any]] = field(default_factory=dict)


def valid_keys() -> list[str]:
    """Every key the command line accepts, hyperparameters included."""
    keys = [*SWEEP_KEYS, *SUITE_SETTINGS, *ALIASES]
    for algo, recipe in loadable_recipes().items():
        keys += [f"{algo}.{f}" for f in recipe.Config.__dataclass_fields__]
    return keys


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
        algo, param = _hyperparameter(key)
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


def _hyperparameter(key: str) -> tuple[str, str]:
    """``key`` (``ppo.learning_rate``) as an algorithm and one of its hyperparameters;
    anything else is refused with the keys nearest to it."""
    algo, dot, param = key.partition(".")
    if not dot or algo not in list_algorithms():
        raise UnknownNameError("override key", key, valid_keys())
    fields = load_algorithm(algo).Config.__dataclass_fields__
    if param not in fields:  # suggest this algorithm's own fields, not others'
        raise UnknownNameError(f"{algo} hyperparameter", key, [],
                               [f"{algo}.{name}" for name in
                                field_suggestions(param, list(fields))])
    return algo, param


def _takes_a_list(algo: str, param: str) -> bool:
    """Whether hyperparameter ``param`` of ``algo`` is a list (``hidden_sizes``)."""
    hint = typing.get_type_hints(load_algorithm(algo).Config)[param]
    return any(typing.get_origin(arg) is tuple for arg in (hint, *typing.get_args(hint)))
