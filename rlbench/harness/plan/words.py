"""The ``key=value`` words of every ``rlbench`` command, split by one parser.

A word without ``=`` or without a key, and a key given twice (``seeds=3 seeds=5``, or a
key and its alias, ``algo=`` with ``algos=``), are errors; each command then reads the
values its own way.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence

from rlbench.errors import ConfigError, quote

__all__ = ["int_word", "split_words"]


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
                              "give it once, with a comma-separated list for several names")
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
