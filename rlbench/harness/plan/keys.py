"""The ``key=value`` words of every ``rlbench`` command, read against the command's table.

Each command declares its keys once, as a ``KeyTable`` of ``Key``s: the name, how its text
becomes a value (its kind, range and choices), its default, its aliases, whether it takes a
comma list, and its help. One parser reads any command's words against its table, and the
command's ``--help``, the near matches of an unknown key and the key reference of the docs
are all written from the same tables, so none of them can drift from what is parsed.

A word without ``=`` or without a key, and a key given twice (``seeds=3 seeds=5``, or a
key and its alias, ``algo=`` with ``algos=``), are errors.
"""

from __future__ import annotations

import math
import textwrap
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

import yaml

from rlbench.errors import ConfigError, UnknownNameError, quote

__all__ = ["Key", "KeyTable", "Parsed", "int_word", "scalar_word", "split_words"]

# text: the word as typed; path: a Path; int, float: a number in [low, high]; bool:
# true/false; choice: one of ``choices``; value: a YAML-like scalar or list (``scalar_word``),
# for settings that suites give too and that are checked once merged with them.
Kind = Literal["text", "path", "int", "float", "bool", "choice", "value"]
HELP_WIDTH = 92
INDENT = 6  # the help text's keys column: ``keys: `` is as wide


def split_words(args: Sequence[str], aliases: Mapping[str, str]) -> list[tuple[str, str]]:
    """``(key, text)`` pairs in the order given, aliases replaced by their key."""
    pairs: list[tuple[str, str]] = []
    given: dict[str, str] = {}
    for arg in args:
        name, sep, text = arg.partition("=")
        if not sep or not name:
            raise ConfigError(f"expected key=value, got {quote(arg)}")
        key = aliases.get(name, name)
        if key in given:
            raise ConfigError(f"{key} is given twice ({given[key]}=... and {name}=...): "
                              "give it once (a key that takes several values takes them as "
                              "one comma-separated list: algo=ppo,sac)")
        given[key] = name
        pairs.append((key, text))
    return pairs


def int_word(key: str, text: str, low: int, high: int) -> int:
    """The integer a ``key=text`` word names (``1e6`` included), within ``[low, high]``."""
    try:
        number = float(text)
    except ValueError:
        number = math.nan
    if not math.isfinite(number) or not number.is_integer():
        raise ConfigError(f"{key} must be an integer, got {quote(text)}")
    value = int(text) if text.lstrip("-").isdigit() else int(number)  # exact past 2**53
    if not low <= value <= high:
        raise ConfigError(f"{key} must be between {low:,} and {high:,}, got {value:,}")
    return value


def scalar_word(key: str, text: str) -> Any:
    """A setting's value: a number, true/false/null, a YAML list in brackets, else text.

    Numbers are Python's (``1e5``, ``3e-4``); YAML 1.1's other number forms (``1:30`` is
    90 there, base 60) stay text, so they fail the type check instead of changing a value.
    """
    for convert in (int, float):
        try:
            return convert(text)
        except ValueError:
            pass
    try:
        value = yaml.safe_load(text)
    except yaml.YAMLError as err:
        raise ConfigError(f"cannot parse the value of {key}: {quote(text)}") from err
    if isinstance(value, int | float) and not isinstance(value, bool):
        return text
    return value


def _float_word(key: str, text: str, low: float, high: float) -> float:
    try:
        value = float(text)
    except ValueError:
        value = math.nan
    if not low < value < high:  # NaN included
        raise ConfigError(f"{key} must be a number in ({low:g}, {high:g}), got {quote(text)}")
    return value


def _bool_word(key: str, text: str) -> bool:
    if text.lower() not in ("true", "false"):
        raise ConfigError(f"{key} must be true or false, got {quote(text)}")
    return text.lower() == "true"


@dataclass(frozen=True)
class Key:
    """One key of a command: how its words are read, and what its help says."""

    name: str  # a family's prefix for ``family`` keys: ``tag`` reads ``tag.<name>=``
    help: str
    kind: Kind = "text"
    default: Any = None  # the value when the key is not given (None: not given)
    low: float = 0
    high: float | None = None  # an int's range is [low, high]; a float's (low, high)
    choices: tuple[str, ...] = ()
    aliases: tuple[str, ...] = ()
    many: bool = False  # a comma list; a list of choices holds each once
    required: bool = False
    family: bool = False  # ``<name>.<member>=`` words: a mapping of member to text
    member: str = "name"  # what a family's member is called in the help
    convert: Callable[[str, str], Any] | None = None  # (key, text) -> value, after the kind
    shown_default: str | None = None  # the default as the help says it, when not the value
    placeholder: str = "..."  # what a required key's value is, in the error without it
    listed_only: bool = False  # in the help and docs, read by the command itself

    @property
    def shown(self) -> str:
        """The key as help and suggestions write it: ``tag.<name>`` for a family."""
        return f"{self.name}.<{self.member}>" if self.family else self.name

    def read(self, text: str, given_as: str | None = None) -> Any:
        """The value of ``key=text``; bad text raises ``ConfigError`` naming the key."""
        name = given_as or self.name
        if self.many:
            items = [item.strip() for item in text.split(",") if item.strip()]
            if self.kind == "choice":
                items = list(dict.fromkeys(items))
                if not items:
                    raise ConfigError(f"{name} needs at least one of {', '.join(self.choices)}")
            return [self._one(name, item) for item in items]
        return self._one(name, text)

    def _one(self, name: str, text: str) -> Any:
        if self.kind in ("text", "path", "choice") and not text:
            raise ConfigError(f"{name} needs a value: {name}=...")
        if self.kind == "int":
            high = 10**12 if self.high is None else int(self.high)
            value: Any = int_word(name, text, int(self.low), high)
        elif self.kind == "float":
            value = _float_word(name, text, self.low, math.inf if self.high is None else self.high)
        elif self.kind == "bool":
            value = _bool_word(name, text)
        elif self.kind == "choice":
            if text not in self.choices:
                raise UnknownNameError(name, text, self.choices)
            value = text
        elif self.kind == "value":
            value = scalar_word(name, text)
        else:
            value = Path(text) if self.kind == "path" else text
        return self.convert(name, value) if self.convert else value

    def describe(self) -> str:
        """The help of this key, with its choices, range and default."""
        notes = []
        if self.kind == "choice":
            notes.append("|".join(self.choices))
        if self.many:
            notes.append("a comma list")
        default = self.shown_default or ("" if self.default is None else _shown(self.default))
        if default:
            notes.append(f"default {default}")
        if self.kind in ("int", "value") and self.high is not None and self.high < 10**9:
            notes.append(f"at most {int(self.high):,}")
        if self.required:
            notes.append("required")
        return f"{self.help} ({'; '.join(notes)})" if notes else self.help


_KIND_WORDS = {"text": "text", "path": "path", "int": "integer", "float": "number",
               "bool": "true/false"}


def _shown(value: Any) -> str:
    if isinstance(value, bool):
        return str(value).lower()
    if isinstance(value, list | tuple):
        return ",".join(map(str, value))
    return str(value)


@dataclass
class Parsed:
    """A command's words, read: each key's value (its default when not given), and which
    keys were given."""

    values: dict[str, Any]
    given: set[str] = field(default_factory=set)
    rest: list[str] = field(default_factory=list)  # words of another table, in order

    def __getitem__(self, key: str) -> Any:
        return self.values[key]


@dataclass(frozen=True)
class KeyTable:
    """The keys of one command, in the order its help lists them."""

    command: str  # as typed: ``regress bench``
    keys: tuple[Key, ...]
    what: str = ""  # what an unknown key is called in errors; default ``<command> key``
    more: str = ""  # what else the command takes, said under its table in the docs

    def __post_init__(self) -> None:
        names = [name for key in self.keys for name in (key.name, *key.aliases)]
        if len(names) != len(set(names)):
            raise ValueError(f"{self.command}: a key or alias is declared twice")

    def __iter__(self) -> Iterator[Key]:
        return iter(self.keys)

    @property
    def names(self) -> tuple[str, ...]:
        """Every key as help writes it (``tag.<name>`` for a family)."""
        return tuple(key.shown for key in self.keys)

    @property
    def aliases(self) -> dict[str, str]:
        return {alias: key.name for key in self.keys for alias in key.aliases}

    @property
    def defaults(self) -> dict[str, Any]:
        return {key.name: key.default for key in self.keys if not key.family}

    def key(self, name: str) -> Key | None:
        """The key ``name`` is (an alias, or a family member, resolves to its key)."""
        name = self.aliases.get(name, name)
        for key in self.keys:
            if key.listed_only:
                continue
            if key.name == name and not key.family:
                return key
            prefix, dot, member = name.partition(".")
            if key.family and dot and member and key.name == prefix:
                return key
        return None

    def unknown(self, name: str, others: Sequence[str] = ()) -> UnknownNameError:
        """The error for a key this table does not hold, with its near matches."""
        return UnknownNameError(self.what or f"{self.command} key", name,
                                [*self.names, *self.aliases, *others])

    def parse(self, args: Sequence[str], *, rest: bool = False) -> Parsed:
        """Read ``args``; unknown keys raise with near matches, or with ``rest`` are kept
        for another table (``rlbench regress`` hands them to ``rlbench run``)."""
        parsed = Parsed(self.defaults)
        for word, (name, text) in zip(args, split_words(args, self.aliases), strict=True):
            key = self.key(name)
            if key is None:
                if not rest:
                    raise self.unknown(name)
                parsed.rest.append(word)
            elif key.family:
                parsed.values.setdefault(key.name, {})[name.partition(".")[2]] = key.read(
                    text, name)
            else:
                parsed.values[key.name] = key.read(text)
                parsed.given.add(key.name)
        for key in self.keys:
            if key.required and key.name not in parsed.given:
                raise ConfigError(f"rlbench {self.command} needs {key.name}={key.placeholder}: "
                                  f"{key.help}")
        return parsed

    def help_text(self, heading: str = "keys:") -> str:
        """The keys block of the command's ``--help``: each key with its aliases and help,
        beside ``heading`` when it fits the keys' column, else under it."""
        lines = []
        for key in self.keys:
            names = ", ".join((key.shown, *key.aliases))
            lines += textwrap.wrap(f"{names}: {key.describe()}", HELP_WIDTH,
                                   initial_indent=" " * INDENT,
                                   subsequent_indent=" " * (INDENT + 2),
                                   break_on_hyphens=False)
        block = "\n".join(lines) + "\n"
        if len(heading) < INDENT:
            return heading.ljust(INDENT) + block[INDENT:]
        return f"{heading}\n{block}"

    def markdown(self) -> str:
        """The table as a Markdown reference: one row per key."""
        rows = [f"### `rlbench {self.command}`", "",
                "| key | aliases | value | default | what it is |", "|---|---|---|---|---|"]
        for key in self.keys:
            value = _kind_word(key) + (", comma list" if key.many else "")
            if key.kind in ("int", "value") and key.high is not None and key.high < 10**9:
                value += f", at most {int(key.high):,}"
            default = key.shown_default or ("" if key.default is None else _shown(key.default))
            rows.append(" | ".join([
                f"| `{key.shown}`", ", ".join(f"`{a}`" for a in key.aliases), _cell(value),
                "required" if key.required else _cell(default), _cell(key.help)]) + " |")
        if self.more:
            rows += ["", self.more]
        return "\n".join(rows) + "\n"


def _kind_word(key: Key) -> str:
    """What a key's value is, in the docs."""
    if key.kind == "choice":
        return " or ".join(f"`{choice}`" for choice in key.choices)
    if key.kind != "value":
        return _KIND_WORDS[key.kind]
    if isinstance(key.default, bool):
        return "true/false"
    return "integer" if key.high is not None else "YAML value (number, true/false, [list])"


def _cell(text: str) -> str:
    """Text a Markdown table cell shows as it is: ``|`` and ``<`` escaped."""
    return text.replace("|", "\\|").replace("<", "&lt;")
