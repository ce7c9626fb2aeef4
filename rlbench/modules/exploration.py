"""The global switch between random (exploring) and deterministic action selection."""

from __future__ import annotations

import contextlib
import enum
from collections.abc import Iterator

__all__ = ["ExplorationType", "exploration_type", "set_exploration_type"]


class ExplorationType(enum.Enum):
    RANDOM = "random"
    DETERMINISTIC = "deterministic"


_current = ExplorationType.RANDOM


def exploration_type() -> ExplorationType:
    """How actors pick actions right now."""
    return _current


@contextlib.contextmanager
def set_exploration_type(kind: ExplorationType | str) -> Iterator[None]:
    """Within the block, actors sample (``random``) or take the mode (``deterministic``)."""
    global _current
    previous, _current = _current, ExplorationType(kind)
    try:
        yield
    finally:
        _current = previous
