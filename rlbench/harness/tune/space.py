"""A study's search space: which hyperparameters it samples, and from what.

One grammar inline and in a file: ``field=kind(arguments)``, several separated by ``;``
inline (``space='learning_rate=log(1e-5,1e-2);epochs=int(3,20)'``), or a YAML file
mapping each field to the same text (``learning_rate: log(1e-5, 1e-2)``). Kinds:

- ``float(low, high)``: uniform between the two;
- ``log(low, high)``: log-uniform (both above 0);
- ``int(low, high)`` and ``logint(low, high)``: integers, both ends included;
- ``choice(a, b, ...)``: one of the values, each read as a command-line value is
  (``choice([64,64],[256,256])`` for a list).

Every end and every choice is checked against the recipe as a single value would be, so
a space that names a field the recipe lacks, or reaches outside a field's range, is
refused before a study exists.
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from rlbench.errors import ConfigError, UnknownNameError, quote
from rlbench.harness.plan.grid import split_values, value_word
from rlbench.harness.plan.keys import scalar_word

__all__ = ["KINDS", "Dimension", "fixed_fields", "read_space", "space_key"]

KINDS = ("float", "log", "int", "logint", "choice")
_DIMENSION = re.compile(r"\s*([A-Za-z_]\w*)\s*\(\s*(.*?)\s*\)\s*", re.DOTALL)
MAX_DIMENSIONS = 64


@dataclass(frozen=True)
class Dimension:
    """One sampled hyperparameter: its kind and bounds, or its choices as text."""

    field: str
    kind: str
    low: float = math.nan
    high: float = math.nan
    choices: tuple[str, ...] = ()

    def describe(self) -> str:
        """The dimension as the grammar writes it."""
        if self.kind == "choice":
            return f"choice({', '.join(self.choices)})"
        return f"{self.kind}({value_word(self.low)}, {value_word(self.high)})"

    def value(self, sampled: Any) -> Any:
        """The hyperparameter's value from what the sampler drew (a choice's text read)."""
        if self.kind == "choice":
            return scalar_word(self.field, str(sampled))
        return int(sampled) if self.kind in ("int", "logint") else float(sampled)


def read_space(text: str, check: Callable[[str, Any], None]) -> list[Dimension]:
    """The dimensions ``text`` names (inline, or a ``.yaml``/``.yml`` file), sorted by field.
    ``check(field, value)`` raises ``ConfigError`` for a value the recipe refuses (and
    ``UnknownNameError`` for a field it lacks); every end and choice goes through it."""
    entries = _entries(text)
    if not entries:
        raise ConfigError(f"space={text}: names no hyperparameter; give field=kind(...) "
                          f"parts separated by ';' (kinds: {', '.join(KINDS)})")
    if len(entries) > MAX_DIMENSIONS:
        raise ConfigError(f"space names {len(entries)} hyperparameters, more than "
                          f"{MAX_DIMENSIONS}")
    dimensions = [_dimension(field, spec) for field, spec in entries.items()]
    for dimension in dimensions:
        ends = ([scalar_word(dimension.field, c) for c in dimension.choices]
                if dimension.kind == "choice" else
                [dimension.value(dimension.low), dimension.value(dimension.high)])
        for value in ends:
            check(dimension.field, value)
    return sorted(dimensions, key=lambda d: d.field)


def _entries(text: str) -> dict[str, str]:
    if text.endswith((".yaml", ".yml")):
        path = Path(text)
        if not path.is_file():
            raise ConfigError(f"space file {quote(text)} does not exist")
        try:
            raw = yaml.safe_load(path.read_text())
        except yaml.YAMLError as err:
            raise ConfigError(f"space file {text}: not valid YAML ({' '.join(str(err).split())})"
                              ) from err
        if raw is None:
            return {}
        if not isinstance(raw, dict) or not all(isinstance(k, str) for k in raw):
            raise ConfigError(f"space file {text}: expected a mapping of hyperparameters to "
                              f"kind(...) texts, got {quote(raw)}")
        return {key: str(value) for key, value in raw.items()}
    entries: dict[str, str] = {}
    for part in filter(str.strip, text.split(";")):
        field, sep, spec = part.partition("=")
        if not sep or not field.strip():
            raise ConfigError(f"space: {quote(part.strip())} is not field=kind(...)")
        if field.strip() in entries:
            raise ConfigError(f"space names {field.strip()} twice")
        entries[field.strip()] = spec
    return entries


def _dimension(field: str, spec: str) -> Dimension:
    match = _DIMENSION.fullmatch(spec)
    if match is None:
        raise ConfigError(f"space: {field}={spec.strip()} is not kind(...) (kinds: "
                          f"{', '.join(KINDS)})")
    kind, arguments = match.groups()
    if kind not in KINDS:
        raise UnknownNameError(f"space kind of {field}", kind, KINDS)
    parts = split_values(f"space {field}", arguments)
    if kind == "choice":
        choices = tuple(dict.fromkeys(part for part in parts if part))
        if len(choices) < 2:
            raise ConfigError(f"space: {field}=choice(...) needs two values or more")
        return Dimension(field, kind, choices=choices)
    if len(parts) != 2:
        raise ConfigError(f"space: {field}={kind}(low, high) takes two numbers, got "
                          f"{quote(arguments)}")
    low, high = (_number(field, part, integer=kind in ("int", "logint")) for part in parts)
    if not low < high:
        raise ConfigError(f"space: {field}={kind}({parts[0]}, {parts[1]}) needs low < high")
    if kind in ("log", "logint") and low <= 0:
        raise ConfigError(f"space: {field}={kind}(...) samples on a log scale: both ends must "
                          f"be above 0, got {parts[0]}")
    return Dimension(field, kind, low, high)


def _number(field: str, text: str, *, integer: bool) -> float:
    value = scalar_word(field, text)
    if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value):
        raise ConfigError(f"space: {field}: {quote(text)} is not a finite number")
    if integer and not float(value).is_integer():
        raise ConfigError(f"space: {field}: {quote(text)} is not an integer")
    return int(value) if integer else float(value)


def space_key(dimensions: Sequence[Dimension]) -> str:
    """The space as one line: what a study records and later runs must match."""
    return "; ".join(f"{d.field}={d.describe()}" for d in dimensions)


def fixed_fields(dimensions: Sequence[Dimension], given: Mapping[str, Any]) -> list[str]:
    """Fields the space samples that are also given a value (which would be ignored)."""
    return sorted({d.field for d in dimensions} & set(given))
