"""Grids over settings: a hyperparameter (or a budget) given several values runs each.

On the command line, a comma list: ``ppo.learning_rate=1e-4,3e-4,1e-3``, ``frames=1e5,1e6``;
brackets and quotes keep their commas (``td3.hidden_sizes=[64,64],[256,256]`` is two
values). In a suite file, a ``grid:`` section, suite-wide or in a ``per_env`` entry, whose
fields each list their values::

    grid:
      ppo: {learning_rate: [1.0e-4, 3.0e-4], clip_epsilon: [0.1, 0.2]}
      frames: [100_000, 1_000_000]

The grid of one algorithm on one task is the product of its fields' values, and each point
of it is a configuration of its own: its own identity and store entry, and a run name that
names the point (``ppo[clip_epsilon=0.1,learning_rate=0.0001]/CartPole-v1/seed0``). A field
takes its values from the most specific place that names it, as any setting does: the
command line over ``per_env`` over the suite-wide section, a single value there replacing a
grid given further down (``ppo.learning_rate=3e-4`` runs one learning rate whatever the
suite's grid says).
"""

from __future__ import annotations

import itertools
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from rlbench.errors import ConfigError, quote
from rlbench.harness.plan.algorithms import list_algorithms
from rlbench.harness.plan.keys import scalar_word

__all__ = ["BUDGET_AXES", "Axis", "GridLevel", "budget_values", "grid_axes", "grid_points",
           "read_grid_section", "read_suite_grid", "split_values", "value_word", "variant_label"]

# The harness settings a grid may range over: the budget (each a budget of its own, as
# ``compare`` shows budgets). Device, threads and evaluation settings do not change what a
# run learns, or are fixed per suite.
BUDGET_AXES = ("frames", "steps")
_CLOSING = {"[": "]", "{": "}"}


def split_values(key: str, text: str) -> list[str]:
    """The values of a ``key=text`` word: its comma-separated parts, where commas inside
    brackets, braces or quotes do not separate. An empty part is refused (a trailing comma
    is most often a value left out)."""
    parts, current, stack, quote_char = [], [], [], ""
    for char in text:
        if quote_char:
            quote_char = "" if char == quote_char else quote_char
        elif char in "'\"":
            quote_char = char
        elif char in _CLOSING:
            stack.append(_CLOSING[char])
        elif stack and char == stack[-1]:
            stack.pop()
        elif char == "," and not stack:
            parts.append("".join(current))
            current = []
            continue
        current.append(char)
    parts.append("".join(current))
    if len(parts) > 1 and not all(part.strip() for part in parts):
        raise ConfigError(f"{key}={text}: a comma list with an empty value; give each value "
                          "once, separated by commas")
    return [part.strip() for part in parts]


def budget_values(key: str, value: Any) -> Any:
    """A budget key's value (``frames=``, ``steps=``): its values when a comma lists
    several (``frames=1e5,1e6``), else the value itself."""
    if isinstance(value, str) and "," in value:
        return [scalar_word(key, part) for part in split_values(key, value)]
    return value


@dataclass(frozen=True)
class Axis:
    """One field of a grid: its values in the order given, and where they were given."""

    field: str
    values: tuple[Any, ...]
    source: str


@dataclass(frozen=True)
class GridLevel:
    """One place that sets an algorithm's settings on a task, least specific first: its
    single values (which end a grid given further down) and its grids."""

    source: str
    fixed: Mapping[str, Any]
    grids: Mapping[str, Sequence[Any]]


def grid_axes(levels: Sequence[GridLevel]) -> list[Axis]:
    """The axes a task's grid has once every level is applied, sorted by field; a level
    naming one field both ways is refused."""
    axes: dict[str, Axis] = {}
    for level in levels:
        both = sorted(set(level.fixed) & set(level.grids))
        if both:
            raise ConfigError(f"{level.source} gives {both[0]} both a value and a grid of "
                              "values: give it once")
        for name in level.fixed:
            axes.pop(name, None)
        for name, values in level.grids.items():
            axes[name] = Axis(name, tuple(values), level.source)
    return [axes[name] for name in sorted(axes)]


def grid_points(axes: Sequence[Axis]) -> list[dict[str, Any]]:
    """Every combination of the axes' values (one empty point for no axes)."""
    names = [axis.field for axis in axes]
    return [dict(zip(names, values, strict=True))
            for values in itertools.product(*(axis.values for axis in axes))]


def value_word(value: Any) -> str:
    """A value as a run name shows it: numbers as Python writes them, lists in brackets."""
    if isinstance(value, bool):
        return str(value).lower()
    if isinstance(value, list | tuple):
        return "[" + ",".join(value_word(v) for v in value) + "]"
    return str(value)


def variant_label(point: Mapping[str, Any]) -> str:
    """The settings a grid point varies, as ``field=value`` joined by commas, by field."""
    return ",".join(f"{name}={value_word(point[name])}" for name in sorted(point))


def read_grid_section(section: Any, where: str, algorithms: Sequence[str]
                      ) -> tuple[dict[str, list[Any]], dict[str, dict[str, list[Any]]]]:
    """A suite's ``grid:`` mapping, checked: budget axes (``frames: [...]``) and, per
    algorithm, hyperparameter axes (``ppo: {learning_rate: [...]}``), each a non-empty
    list. Returns ``(budget axes, per-algorithm axes)``; the fields are checked where the
    algorithm's grid is planned."""
    if not isinstance(section, dict):
        raise ConfigError(f"{where} must map algorithms (and {', '.join(BUDGET_AXES)}) to "
                          f"lists of values, got {quote(section)}")
    budgets: dict[str, list[Any]] = {}
    per_algo: dict[str, dict[str, list[Any]]] = {}
    for name, value in section.items():
        if name in BUDGET_AXES:
            budgets[name] = _values(value, f"{where}.{name}")
        elif name in algorithms:
            if not isinstance(value, dict) or not value:
                raise ConfigError(f"{where}.{name} must map {name}'s hyperparameters to lists "
                                  f"of values, got {quote(value)}")
            per_algo[name] = {field: _values(values, f"{where}.{name}.{field}")
                              for field, values in value.items()}
        else:
            raise ConfigError(f"{where} has {quote(name)}, which is neither an algorithm "
                              f"({', '.join(algorithms)}) nor one of {', '.join(BUDGET_AXES)}")
    return budgets, per_algo


def read_suite_grid(section: Any, where: str
                    ) -> tuple[dict[str, list[Any]], dict[str, dict[str, list[Any]]]]:
    """A suite's ``grid:`` section (suite-wide or of one ``per_env`` entry), read against
    the recipes this process knows; a suite without one has no axes."""
    if section is None:
        return {}, {}
    return read_grid_section(section, where, list_algorithms())


def _values(value: Any, where: str) -> list[Any]:
    if not isinstance(value, list) or not value:
        raise ConfigError(f"{where} must be a non-empty list of values (a single value goes "
                          f"outside grid:), got {quote(value)}")
    return value
