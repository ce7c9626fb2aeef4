"""Older versions of gymnasium envs: said once when a sweep is planned, not per run.

gymnasium warns on every ``make`` of an env id older than its newest version
(``Hopper-v4`` beside ``Hopper-v5``), as a raw ``DeprecationWarning`` with terminal colour
codes, once per process. An older version is a legitimate choice (published results use
it), so the plan says it in one line of its own, and the runs leave out gymnasium's
warning about that id only; every other warning is shown.
"""

from __future__ import annotations

import contextlib
import re
import warnings
from collections.abc import Iterable, Iterator

import gymnasium as gym
from gymnasium.envs.registration import find_highest_version, get_env_id, parse_env_id

__all__ = ["newer_version", "older_version_notes", "older_version_unwarned"]


def newer_version(env_id: str) -> str | None:
    """gymnasium's newest id of ``env_id``'s env when ``env_id`` is an older version of it;
    None for the newest, an unversioned id, and ids gymnasium does not register."""
    if env_id not in gym.registry:
        return None
    namespace, name, version = parse_env_id(env_id)
    newest = find_highest_version(namespace, name)
    if version is None or newest is None or newest <= version:
        return None
    return get_env_id(namespace, name, newest)


def older_version_notes(env_ids: Iterable[str]) -> list[str]:
    """One plan note per older version among ``env_ids``."""
    return [f"{env_id} is an older version (gymnasium's newest is {newest}): it runs as "
            "asked, without gymnasium's warning in every run"
            for env_id in sorted(set(env_ids)) if (newest := newer_version(env_id))]


@contextlib.contextmanager
def older_version_unwarned(env_id: str) -> Iterator[None]:
    """gymnasium's "is out of date" warning about ``env_id`` left out for the block."""
    with warnings.catch_warnings():
        warnings.filterwarnings(
            "ignore", message=rf".*The environment {re.escape(env_id)} is out of date",
            category=DeprecationWarning)
        yield
