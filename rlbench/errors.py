"""Errors for bad user input, each naming what was wrong and the closest valid names."""

from __future__ import annotations

import difflib
import reprlib
from collections.abc import Iterable
from typing import Any

__all__ = ["ConfigError", "UnknownNameError", "near_matches", "one_line", "quote"]

_QUOTE = reprlib.Repr()
_QUOTE.maxlevel = 3
_QUOTE.maxtuple = _QUOTE.maxlist = _QUOTE.maxdict = _QUOTE.maxset = 6
_QUOTE.maxlong, _QUOTE.maxstring, _QUOTE.maxother = 40, 60, 60
QUOTE_LIMIT = 120
LISTED_CHOICES = 12  # an unknown name with no near match lists the valid ones up to this many


def quote(value: Any) -> str:
    """``repr(value)`` cut to a short prefix, for error messages.

    Built with ``reprlib``, so a value that would print as megabytes (a YAML alias bomb,
    a pasted file) costs no more than its first few elements to quote.
    """
    text = _QUOTE.repr(value)
    return text if len(text) <= QUOTE_LIMIT else text[:QUOTE_LIMIT - 3] + "..."


def one_line(err: BaseException | str, limit: int = 300) -> str:
    """A message (an exception's, often a library's) as one line of at most ``limit``
    characters: line breaks and runs of spaces become one space, control characters
    (terminal escape codes included) are dropped."""
    text = " ".join(str(err).split())
    text = "".join(ch for ch in text if ch.isprintable())
    return text if len(text) <= limit else text[:limit - 3] + "..."


def near_matches(name: Any, choices: Iterable[str], n: int = 3) -> list[str]:
    """The valid names closest to ``name``, best first (case-insensitive); none for a name
    that is not text."""
    if not isinstance(name, str):
        return []
    choices = [c for c in choices if isinstance(c, str)]
    by_lower = {c.lower(): c for c in choices}
    hits = difflib.get_close_matches(name.lower(), list(by_lower), n=n, cutoff=0.6)
    return [by_lower[h] for h in hits]


class ConfigError(ValueError):
    """A configuration that cannot run: the message says what to change."""


class UnknownNameError(ConfigError):
    """An unknown suite, algorithm, env, dataset or config key."""

    def __init__(self, kind: str, name: Any, choices: Iterable[str],
                 suggestions: list[str] | None = None):
        self.kind, self.name = kind, name
        choices = [c for c in choices if isinstance(c, str)]
        self.suggestions = near_matches(name, choices) if suggestions is None else suggestions
        if self.suggestions:
            hint = f"; did you mean {', '.join(self.suggestions)}?"
        elif suggestions is None and 0 < len(choices) <= LISTED_CHOICES:
            hint = f"; one of {', '.join(sorted(choices))}"  # a short list: say it whole
        else:
            hint = ""
        super().__init__(f"unknown {kind} {quote(name)}{hint}")
