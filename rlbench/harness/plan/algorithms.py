"""The algorithm recipes by name (``recipe_sources`` finds them) and the resolution of their
hyperparameters."""

from __future__ import annotations

import dataclasses
import math
import types
import typing
from collections.abc import Mapping, Sequence
from typing import Any

from rlbench.errors import ConfigError, UnknownNameError, quote
from rlbench.harness.plan.recipe_sources import import_recipe, recipe_sources

__all__ = ["algorithm_fields", "coerce", "list_algorithms", "load_algorithm", "loadable_recipes",
           "missing_defaults", "resolve_algo_config", "resolve_with_sources"]

_INT_LIMIT = 10**12  # an integer hyperparameter beyond this is a typo (a size, a count)


def list_algorithms() -> list[str]:
    """Names of the recipes this process can run: built-in, installed and named on its
    command line (``recipe_sources``)."""
    return sorted(recipe_sources())


def load_algorithm(name: str, location: str = "") -> types.ModuleType:
    """Import the recipe ``name`` (from ``location``, for one named on a command line:
    ``RunConfig.recipe``); unknown names raise with near matches, a module that is not a
    recipe with what it lacks."""
    return import_recipe(name, location)


def loadable_recipes() -> dict[str, types.ModuleType]:
    """The recipes that import, by name: what suggestions and lists of alternatives name (a
    broken installed package is reported where it is named, not in another name's error)."""
    recipes = {}
    for algo in list_algorithms():
        try:
            recipes[algo] = load_algorithm(algo)
        except ConfigError:
            continue
    return recipes


def algorithm_fields(name: str) -> dict[str, dataclasses.Field]:
    """The hyperparameters of recipe ``name``, by field name."""
    return {f.name: f for f in dataclasses.fields(load_algorithm(name).Config)}


def coerce(value: Any, hint: Any, what: str) -> Any:
    """Check/convert ``value`` to the type ``hint`` (int, float, bool, str, tuple, Optional)."""
    origin, args = typing.get_origin(hint), typing.get_args(hint)
    if origin in (typing.Union, types.UnionType):
        if value is None and type(None) in args:
            return None
        errors = []
        for arg in (a for a in args if a is not type(None)):
            try:
                return coerce(value, arg, what)
            except ConfigError as err:
                errors.append(str(err))
        raise ConfigError(errors[0])
    if origin is tuple:
        if not isinstance(value, list | tuple):
            example = f"[{value}]" if isinstance(value, str) and "," in value else "[64,64]"
            raise ConfigError(f"{what} must be a list, written in brackets: {what}={example} "
                              f"(in a suite file, a YAML list), got {quote(value)}")
        return tuple(coerce(v, args[0], what) for v in value)
    if hint is bool:
        if isinstance(value, bool):
            return value
        raise ConfigError(f"{what} must be true or false, got {quote(value)}")
    if hint is int:
        if isinstance(value, float) and value.is_integer():
            value = int(value)
        if isinstance(value, int) and not isinstance(value, bool):
            if abs(value) > _INT_LIMIT:
                raise ConfigError(f"{what}={value:.3g} is beyond what rlbench runs (at most "
                                  f"{_INT_LIMIT:,} in size)")
            return value
        raise ConfigError(f"{what} must be an integer, got {quote(value)}")
    if hint is float:
        if isinstance(value, int | float) and not isinstance(value, bool):
            if not math.isfinite(value):
                raise ConfigError(f"{what} must be a finite number, got {quote(value)}")
            return float(value)
        raise ConfigError(f"{what} must be a number, got {quote(value)}")
    if hint is str:
        if isinstance(value, str):
            return value
        raise ConfigError(f"{what} must be a string, got {quote(value)}")
    raise TypeError(f"unsupported hyperparameter type {hint!r} for {what}")


def resolve_algo_config(
    name: str, family: str, *layers: Mapping[str, Any], env: str | None = None
) -> dict[str, Any]:
    """Recipe defaults, its defaults for ``family``, its defaults for ``env`` (a recipe's
    optional ``ENV_DEFAULTS``), then each override layer in order.

    Unknown fields raise with near matches; values are checked against the field types and
    by the recipe's ``Config`` itself (its ``__post_init__``), so bad values fail before any
    run starts.
    """
    labelled = [(f"layer {i}", layer) for i, layer in enumerate(layers)]
    return {key: value for key, (value, _) in
            resolve_with_sources(name, family, labelled, env=env).items()}


def resolve_with_sources(
    name: str, family: str, layers: Sequence[tuple[str, Mapping[str, Any]]],
    env: str | None = None,
) -> dict[str, tuple[Any, str]]:
    """``resolve_algo_config`` with, for each field, the layer its value came from:
    ``recipe default``, ``family <name>``, ``env <id>`` (with the file a recipe's
    ``ENV_SOURCES`` names for it, e.g. a CORL config), or the label of one of ``layers``
    (``(label, values)`` pairs, applied in order)."""
    recipe = load_algorithm(name)
    fields = algorithm_fields(name)
    hints = typing.get_type_hints(recipe.Config)
    resolved = {f: ((d.default if d.default is not dataclasses.MISSING else d.default_factory()),
                    "recipe default") for f, d in fields.items()}
    env_defaults = getattr(recipe, "ENV_DEFAULTS", {}).get(env, {})
    env_source = getattr(recipe, "ENV_SOURCES", {}).get(env)
    env_label = f"env {env}" if env_source is None else f"env {env}: {env_source}"
    all_layers = [(f"family {family}", recipe.FAMILY_DEFAULTS.get(family, {})),
                  (env_label, env_defaults), *layers]
    for label, layer in all_layers:
        for key, value in layer.items():
            if key not in fields:
                raise UnknownNameError(f"{name} hyperparameter", key, fields)
            resolved[key] = (coerce(value, hints[key], f"{name}.{key}"), label)
    try:
        recipe.Config(**{key: value for key, (value, _) in resolved.items()})
    except (TypeError, ValueError) as err:
        message = str(err)
        if len(message) > 300:  # a recipe's message may quote a value of any size
            message = message[:297] + "..."
        raise ConfigError(f"{name}: {message}") from err
    return resolved


def missing_defaults(name: str, family: str, env: str) -> str | None:
    """A note when recipe ``name`` has no defaults for ``env``'s family nor for ``env``:
    it then runs with its base defaults, which were tuned for other envs."""
    recipe = load_algorithm(name)
    if family in recipe.FAMILY_DEFAULTS or env in getattr(recipe, "ENV_DEFAULTS", {}):
        return None
    known = ", ".join(sorted(recipe.FAMILY_DEFAULTS)) or "none"
    return (f"{name} has no defaults for env family {family!r} ({env}): it runs with its "
            f"base defaults (families it has defaults for: {known})")
