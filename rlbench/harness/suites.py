"""YAML suites: algorithms × envs × seeds × budget × eval protocol, with overrides.

A suite file holds the harness settings (``algos``, ``envs``, ``seeds``, ``base_seed``,
``frames``, ``eval_every``, ``eval_episodes``, ``threads``, ``device``), an optional
``description``, ``per_algo: {algo: {hyperparameter: value}}`` and
``per_env: {env: {setting: value, algo: {hyperparameter: value}}}``.
"""

from __future__ import annotations

import importlib.resources
import re
from collections.abc import Hashable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml
from yaml.constructor import ConstructorError

from rlbench.errors import ConfigError, UnknownNameError

__all__ = ["SUITE_SETTINGS", "Suite", "list_suites", "load_suite"]

# Harness settings with their defaults (None: the suite must say).
SUITE_SETTINGS: dict[str, Any] = {
    "algos": None,
    "envs": None,
    "seeds": 1,
    "base_seed": 0,
    "frames": None,
    "eval_every": None,
    "eval_episodes": 10,
    "threads": 1,
    "device": "cpu",
}
_SUITE_KEYS = {*SUITE_SETTINGS, "description", "per_algo", "per_env"}


@dataclass
class Suite:
    name: str
    path: Path
    description: str
    settings: dict[str, Any]
    per_algo: dict[str, dict[str, Any]] = field(default_factory=dict)
    per_env: dict[str, dict[str, Any]] = field(default_factory=dict)


class _SuiteLoader(yaml.SafeLoader):
    """PyYAML's safe loader, read the way the command line reads values.

    - ``1e5`` and ``3e-4`` are numbers. PyYAML follows YAML 1.1, whose floats need a dot
      (``1.0e5``); a suite saying ``learning_rate: 3e-4`` means a number.
    - YAML 1.1's other number forms are refused: ``010`` (octal 8), ``0x10``, ``0b10`` and
      ``1:30`` (base 60, 90) read as a number nobody meant.
    - A key given twice in one mapping is refused; YAML would keep the last silently.
    """

    def construct_mapping(self, node: yaml.MappingNode, deep: bool = False) -> dict:
        seen: dict[Any, int] = {}
        for key_node, _ in node.value:
            if key_node.tag == "tag:yaml.org,2002:merge":  # ``<<: *base`` may be overridden
                continue
            key = self.construct_object(key_node, deep=True)
            if not isinstance(key, Hashable):  # PyYAML's own error follows
                continue
            line = key_node.start_mark.line + 1
            if key in seen:
                raise ConstructorError(None, None, f"{key!r} is given twice (lines {seen[key]} "
                                       f"and {line}): give it once", key_node.start_mark)
            seen[key] = line
        return super().construct_mapping(node, deep=deep)

    def construct_decimal_int(self, node: yaml.ScalarNode) -> int:
        if not _DECIMAL_INT.match(node.value):
            raise ConstructorError(None, None, f"{node.value!r} is a YAML 1.1 octal, hex, "
                                   "binary or base-60 number: write it in decimal",
                                   node.start_mark)
        return self.construct_yaml_int(node)

    def construct_decimal_float(self, node: yaml.ScalarNode) -> float:
        if ":" in node.value:
            raise ConstructorError(None, None, f"{node.value!r} is a YAML 1.1 base-60 number: "
                                   "write it in decimal", node.start_mark)
        return self.construct_yaml_float(node)


_DECIMAL_INT = re.compile(r"^[-+]?(?:0|[1-9][0-9_]*)$")
_SuiteLoader.add_constructor("tag:yaml.org,2002:int", _SuiteLoader.construct_decimal_int)
_SuiteLoader.add_constructor("tag:yaml.org,2002:float", _SuiteLoader.construct_decimal_float)
_SuiteLoader.add_implicit_resolver(
    "tag:yaml.org,2002:float",
    re.compile(r"^[-+]?(?:[0-9][0-9_]*)(?:\.[0-9_]*)?[eE][-+]?[0-9]+$"),
    list("-+0123456789"),
)


def _suite_dir() -> Path:
    return Path(str(importlib.resources.files("rlbench.suites")))


def list_suites() -> list[str]:
    """Names of the suites shipped in ``suites/``."""
    return sorted(p.stem for p in _suite_dir().glob("*.yaml"))


def load_suite(name_or_path: str) -> Suite:
    """Load a shipped suite by name, or any suite file by path."""
    path = Path(name_or_path)
    if path.suffix not in (".yaml", ".yml"):
        if name_or_path not in list_suites():
            raise UnknownNameError("suite", name_or_path, list_suites())
        path = _suite_dir() / f"{name_or_path}.yaml"
    elif not path.is_file():
        raise ConfigError(f"suite file {str(path)!r} does not exist")
    try:
        with path.open("rb") as stream:
            raw = yaml.load(stream, Loader=_SuiteLoader) or {}
    except yaml.YAMLError as err:
        message = " ".join(str(err).split())
        raise ConfigError(f"suite {path}: not valid YAML ({message})") from err
    if not isinstance(raw, dict):
        raise ConfigError(f"suite {path}: expected a mapping at the top level")
    for key in raw:
        if key not in _SUITE_KEYS:
            raise UnknownNameError(f"suite key in {path.name}", key, _SUITE_KEYS)
    for key in ("algos", "envs"):
        value = raw.get(key)
        if value is not None and not (isinstance(value, str) or (
                isinstance(value, list) and all(isinstance(v, str) for v in value))):
            raise ConfigError(f"suite {path}: {key} must be a list of names, got {value!r}")
    for key in ("per_algo", "per_env"):
        value = raw.get(key) or {}
        if not isinstance(value, dict) or not all(isinstance(v, dict) for v in value.values()):
            raise ConfigError(f"suite {path}: {key} must map names to mappings of settings, "
                              f"got {value!r}")
    settings = {k: raw.get(k, default) for k, default in SUITE_SETTINGS.items()}
    return Suite(
        name=path.stem,
        path=path,
        description=raw.get("description", ""),
        settings=settings,
        per_algo=raw.get("per_algo") or {},
        per_env=raw.get("per_env") or {},
    )
