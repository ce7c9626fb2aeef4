"""YAML suites: algorithms × envs × seeds × budget × eval protocol, with overrides.

A suite file holds the harness settings (``algos``, ``envs`` or ``datasets``, ``seeds``,
``base_seed``, ``frames`` (online) or ``steps`` (offline), ``eval_every``,
``eval_episodes``, ``threads``, ``device``), an optional
``description``, ``per_algo: {algo: {hyperparameter: value}}`` and
``per_env: {env: {setting: value, algo: {hyperparameter: value}}}``, and ``grid:`` (suite-wide
or in a ``per_env`` entry: the values each setting ranges over, ``plan.grid``). A gate suite
adds ``gate:`` (the regression gate's level and minimal effects, read by ``rlbench regress``).
"""

from __future__ import annotations

import importlib.resources
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml
from yaml.composer import ComposerError
from yaml.constructor import ConstructorError

from rlbench.errors import ConfigError, UnknownNameError, quote

__all__ = ["SUITE_SETTINGS", "Suite", "list_suites", "load_suite"]

# Harness settings with their defaults (None: the suite must say).
SUITE_SETTINGS: dict[str, Any] = {
    "algos": None,
    "envs": None,
    "datasets": None,  # offline datasets: d4rl:<name>, minari:<id> or a path
    "seeds": 1,
    "base_seed": 0,
    "frames": None,
    "steps": None,  # the gradient-step budget of offline runs
    "eval_every": None,
    "eval_episodes": 10,
    "threads": 1,
    "device": "cpu",
    # native; portable: the same numbers on every x86-64 with AVX2; auto: portable where
    # this processor runs it, else native
    "numerics": "native",
    "save_snapshots": False,  # keep the policy at every evaluation (snapshots/<frames>/)
    "save_transitions": False,  # keep every collected transition (transitions/)
}
_SUITE_KEYS = {*SUITE_SETTINGS, "description", "per_algo", "per_env", "grid", "gate"}


@dataclass
class Suite:
    name: str
    path: Path
    description: str
    settings: dict[str, Any]
    per_algo: dict[str, dict[str, Any]] = field(default_factory=dict)
    per_env: dict[str, dict[str, Any]] = field(default_factory=dict)
    gate: dict[str, Any] | None = None  # ``rlbench regress``'s settings; runs ignore them
    grid: dict[str, Any] | None = None  # suite-wide grids over settings (``plan.grid``)


class _SuiteLoader(yaml.SafeLoader):
    """PyYAML's safe loader, read the way the command line reads values.

    - ``1e5`` and ``3e-4`` are numbers. PyYAML follows YAML 1.1, whose floats need a dot
      (``1.0e5``); a suite saying ``learning_rate: 3e-4`` means a number.
    - Numbers in YAML 1.1's other forms are refused: ``010`` (octal 8), ``0x10``, ``0b10``
      and ``1:30`` (base 60, 90) read as a number nobody meant, ``09`` as text.
    - A key given twice in one mapping is refused; YAML would keep the last silently.
      Keys are compared as written (with their resolved tag) when the mapping is read,
      before merge keys (``<<: *base``) add theirs, which may be overridden.
    - Aliases (``*name``) may repeat an anchored value, but a document that expands to more
      than ``MAX_EXPANDED_NODES`` values is refused before anything is built from it: a
      few lines of nested aliases (a "billion laughs") would otherwise expand into
      gigabytes wherever the value is copied, hashed or printed.
    """

    def compose_document(self) -> yaml.Node:
        node = super().compose_document()
        _check_expansion(node)
        return node

    def compose_mapping_node(self, anchor: str | None) -> yaml.MappingNode:
        node = super().compose_mapping_node(anchor)
        seen: dict[tuple[str, str], int] = {}
        for key_node, _ in node.value:
            if not isinstance(key_node, yaml.ScalarNode) or key_node.tag == _MERGE:
                continue
            line = key_node.start_mark.line + 1
            key = (key_node.tag, key_node.value)
            if key in seen:
                raise ComposerError(None, None, f"{quote(key_node.value)} is given twice (lines "
                                    f"{seen[key]} and {line}): give it once",
                                    key_node.start_mark)
            seen[key] = line
        return node

    def construct_decimal_int(self, node: yaml.ScalarNode) -> int:
        if not _DECIMAL_INT.match(node.value):
            raise ConstructorError(None, None, _not_decimal(node.value), node.start_mark)
        return self.construct_yaml_int(node)

    def construct_decimal_float(self, node: yaml.ScalarNode) -> float:
        if ":" in node.value:
            raise ConstructorError(None, None, _not_decimal(node.value), node.start_mark)
        return self.construct_yaml_float(node)


MAX_EXPANDED_NODES = 100_000


def _check_expansion(root: yaml.Node) -> None:
    """Raise unless ``root``, with every alias expanded, has at most ``MAX_EXPANDED_NODES``
    nodes. Each distinct node is sized once, so the check costs the document's size, not
    its expansion's."""
    sizes: dict[int, int] = {}
    open_nodes: set[int] = set()

    def size(node: yaml.Node) -> int:
        key = id(node)
        if key in sizes:
            return sizes[key]
        if key in open_nodes:
            raise ComposerError(None, None, "an alias refers to a value that contains it",
                                node.start_mark)
        open_nodes.add(key)
        total = 1
        if isinstance(node, yaml.SequenceNode):
            total += sum(size(item) for item in node.value)
        elif isinstance(node, yaml.MappingNode):
            total += sum(size(k) + size(v) for k, v in node.value)
        open_nodes.discard(key)
        sizes[key] = total
        if total > MAX_EXPANDED_NODES:
            raise ComposerError(None, None, f"this value expands to more than "
                                f"{MAX_EXPANDED_NODES:,} values through YAML aliases; a suite "
                                "needs far fewer", node.start_mark)
        return total

    size(root)


def _not_decimal(text: str) -> str:
    return (f"{text!r} is a number in a YAML 1.1 form (a leading 0, 0x or 0b, or base 60 "
            "with ':'): write it in decimal, or quote it if it is text")


_MERGE = "tag:yaml.org,2002:merge"
_DECIMAL_INT = re.compile(r"^[-+]?(?:0|[1-9][0-9_]*)$")
_SuiteLoader.add_constructor("tag:yaml.org,2002:int", _SuiteLoader.construct_decimal_int)
_SuiteLoader.add_constructor("tag:yaml.org,2002:float", _SuiteLoader.construct_decimal_float)
_SuiteLoader.add_implicit_resolver(
    "tag:yaml.org,2002:float",
    re.compile(r"^[-+]?(?:[0-9][0-9_]*)(?:\.[0-9_]*)?[eE][-+]?[0-9]+$"),
    list("-+0123456789"),
)
_SuiteLoader.add_implicit_resolver(  # ``09``: text in YAML 1.1, refused as above
    "tag:yaml.org,2002:int", re.compile(r"^[-+]?0[0-9_]+$"), list("-+0"))


def _check_names(mapping: dict, where: str, path: Path) -> None:
    """Every key of ``mapping`` and of the mappings in it is text, and so is every entry of
    an ``algos`` list: names of algorithms, envs, settings and hyperparameters. YAML would
    read ``1:`` or ``true:`` as a number or a bool."""
    for key, value in mapping.items():
        if not isinstance(key, str):
            raise ConfigError(f"suite {path}: {where} has the key {quote(key)}, which is not "
                              "a name: write names as text (quote them if they look like "
                              "numbers)")
        inner = f"{where}.{key}"
        if isinstance(value, dict):
            _check_names(value, inner, path)
        elif key == "algos" and isinstance(value, list):
            for index, item in enumerate(value):
                if not isinstance(item, str):
                    raise ConfigError(f"suite {path}: {inner}[{index}] is {quote(item)}, "
                                      "not an algorithm name")


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
        raise ConfigError(f"suite file {quote(str(path))} does not exist")
    try:
        with path.open("rb") as stream:
            raw = yaml.load(stream, Loader=_SuiteLoader) or {}
    except yaml.YAMLError as err:
        message = " ".join(str(err).split())
        raise ConfigError(f"suite {path}: not valid YAML ({message})") from err
    except RecursionError as err:
        raise ConfigError(f"suite {path}: nested too deeply to be a suite") from err
    if not isinstance(raw, dict):
        raise ConfigError(f"suite {path}: expected a mapping at the top level")
    for key in raw:
        if key not in _SUITE_KEYS:
            raise UnknownNameError(f"suite key in {path.name}", key, _SUITE_KEYS)
    for key in ("algos", "envs", "datasets"):
        value = raw.get(key)
        if value is not None and not (isinstance(value, str) or (
                isinstance(value, list) and all(isinstance(v, str) for v in value))):
            raise ConfigError(f"suite {path}: {key} must be a list of names, got {quote(value)}")
    for key in ("per_algo", "per_env"):
        value = raw.get(key) or {}
        if not isinstance(value, dict) or not all(isinstance(v, dict) for v in value.values()):
            raise ConfigError(f"suite {path}: {key} must map names to mappings of settings, "
                              f"got {quote(value)}")
        _check_names(value, key, path)
    if isinstance(raw.get("grid"), dict):
        _check_names(raw["grid"], "grid", path)
    settings = {k: raw.get(k, default) for k, default in SUITE_SETTINGS.items()}
    return Suite(
        name=path.stem,
        path=path,
        description=raw.get("description", ""),
        settings=settings,
        per_algo=raw.get("per_algo") or {},
        per_env=raw.get("per_env") or {},
        gate=raw.get("gate"),
        grid=raw.get("grid"),
    )
