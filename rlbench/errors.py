"""Errors for bad user input, each naming what was wrong and the closest valid names."""

from __future__ import annotations

import difflib
from collections.abc import Iterable

__all__ = ["ConfigError", "UnknownNameError", "near_matches"]


def near_matches(name: str, choices: Iterable[str], n: int = 3) -> list[str]:
    """The valid names closest to ``name``, best first (case-insensitive)."""
    choices = list(choices)
    by_lower = {c.lower(): c for c in choices}
    hits = difflib.get_close_matches(name.lower(), list(by_lower), n=n, cutoff=0.6)
    return [by_lower[h] for h in hits]


class ConfigError(ValueError):
    """A configuration that cannot run: the message says what to change."""


class UnknownNameError(ConfigError):
    """An unknown suite, algorithm, env, dataset or config key."""

    def __init__(self, kind: str, name: str, choices: Iterable[str]):
        self.kind, self.name = kind, name
        self.suggestions = near_matches(name, choices)
        hint = f"; did you mean {', '.join(self.suggestions)}?" if self.suggestions else ""
        super().__init__(f"unknown {kind} {name!r}{hint}")
